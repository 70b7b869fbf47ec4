"""``opcount simulate MODEL``'s own flags: the workload (``--rate`` with ``--arrivals``, or ``--concurrency``;
``--requests``, ``--input-len``, ``--output-len``, ``--seed``) and the engine's scheduler (``--max-num-seqs``,
``--block-size``; ``--max-batched-tokens`` and ``--gpu-memory-utilization`` are the deployment group's). They are
read first, and what is left is the command line of a phase (the model, ``--hardware``, the dtypes, the
layout), parsed as :func:`opcount.cli.parser.parse` parses it; the flags that set a phase's own lengths and
batch are refused, the workload's set them."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from ...errors import OpcountError
from ...llm.serve.workload import ARRIVALS, MAX_REQUESTS, Workload
from ..args import UsageError, natural_int, positive_int
from ..options import Options
from ..parser import parse as parse_phase

# vllm bench serve's defaults for its random dataset (vllm/benchmarks/datasets.py, --random-input-len and
# --random-output-len) and its --num-prompts (vllm/benchmarks/serve.py)
DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_REQUESTS = 1024, 128, 1000
# a phase's flags that the workload and the scheduler decide instead
REFUSED = (
    "--phase", "--kv-len", "--batch", "--seq-len", "--gen-len", "--sweep", "--max-batch", "--price",
    "--micro-batches", "--dp", "--enable-two-batch-overlap",
)  # fmt: skip


@dataclass(frozen=True)
class SimulateOptions:
    """``opcount simulate``: the workload, the scheduler's knobs (None: vLLM's default for the device) and the
    phase's options (model, hardware, precision, layout, output)."""

    workload: Workload
    max_num_seqs: int | None
    block_size: int
    phase: Options


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(f"{message} (see opcount simulate --help)")


def parse_rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected requests a second, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected requests a second above 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="opcount simulate",
        allow_abbrev=False,  # the rest of the line is the phase's: no prefix of its flags taken here
        add_help=False,
        description="Served traffic on one deployment: requests through vLLM v1's scheduler over the model's "
        "traced step costs; TTFT, TPOT, ITL and end-to-end latency, throughput (simulate.md). The model, "
        "--hardware, the dtypes, --tp/--pp/--ep, --max-batched-tokens, --gpu-memory-utilization, -o and "
        "--format (table or json) are as for `opcount MODEL`.",
    )
    p.add_argument("-h", "--help", action="help", help="this help")
    g = p.add_argument_group("workload")
    g.add_argument("--rate", type=parse_rate, metavar="R", help="requests a second (open loop)")
    g.add_argument("--arrivals", choices=ARRIVALS, help="with --rate: Poisson (default) or evenly spaced arrivals")
    g.add_argument("--concurrency", type=positive_int, metavar="C", help="clients in a closed loop (instead of --rate)")
    g.add_argument("--requests", type=positive_int, metavar="N", help=f"requests (default {DEFAULT_REQUESTS})")
    g.add_argument("--input-len", type=positive_int, metavar="L", help=f"prompt tokens (default {DEFAULT_INPUT_LEN})")
    g.add_argument(
        "--output-len", type=positive_int, metavar="L", help=f"generated tokens (default {DEFAULT_OUTPUT_LEN})"
    )
    g.add_argument("--seed", type=natural_int, metavar="S", help="the Poisson arrivals' seed (default 0)")
    e = p.add_argument_group("engine (vLLM's names)")
    e.add_argument(
        "--max-num-seqs", type=positive_int, metavar="N",
        help="the most requests running at once (default vLLM's: 1024 on a device of 70 GiB or more but an A100, else 256)",
    )  # fmt: skip
    e.add_argument("--block-size", type=positive_int, metavar="T", help="tokens a KV block holds (default 16, vLLM's)")
    return p


def parse(argv: Sequence[str]) -> SimulateOptions:
    """``opcount simulate ...`` as checked, typed options; everything refused before a model is built."""
    ns, rest = build_parser().parse_known_args(list(argv))
    for token in rest:
        name = token.split("=", 1)[0]
        if name in REFUSED:
            raise UsageError(
                f"opcount simulate: {name} does not apply (the workload sets each step's lengths and batch)"
            )
    if ns.rate is None and ns.concurrency is None:
        raise UsageError("opcount simulate needs --rate R (requests a second) or --concurrency C (clients)")
    if ns.rate is not None and ns.concurrency is not None:
        raise UsageError("--rate and --concurrency are two workloads: give one of them")
    if ns.arrivals is not None and ns.rate is None:
        raise UsageError("--arrivals applies to --rate")
    requests = ns.requests or DEFAULT_REQUESTS
    if requests > MAX_REQUESTS:
        raise UsageError(f"--requests {requests}: at most {MAX_REQUESTS:,}")
    workload = Workload(
        requests=requests, input_len=ns.input_len or DEFAULT_INPUT_LEN, output_len=ns.output_len or DEFAULT_OUTPUT_LEN,
        rate=ns.rate, concurrency=ns.concurrency, arrivals=ns.arrivals or "poisson", seed=ns.seed or 0,
    )  # fmt: skip
    phase = parse_phase(rest)
    if not isinstance(phase, Options):  # parse() reads `compare` as a first word
        raise UsageError("opcount simulate takes one model")
    if phase.hardware is None:
        raise UsageError("opcount simulate needs --hardware (the step times, the device's memory)")
    if phase.rendering.format not in ("table", "json"):
        raise UsageError(f"opcount simulate writes a table or json, not --format {phase.rendering.format}")
    if phase.analysis.mode == "train" or phase.profile or phase.plot:
        raise UsageError("opcount simulate serves inference: drop --train, --profile and --plot")
    if not phase.model.startswith(("llm:", "hf:")):
        raise OpcountError(f"opcount simulate serves a causal LM (llm:NAME or hf:...), not {phase.model}")
    return SimulateOptions(workload, ns.max_num_seqs, ns.block_size or 16, phase)
