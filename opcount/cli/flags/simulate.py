"""``opcount simulate MODEL``'s own flags: the workload (``--rate`` with ``--arrivals``, or ``--concurrency``;
``--requests``, ``--input-len``, ``--output-len``, ``--seed``) and the engine's scheduler (``--max-num-seqs``,
``--block-size``; ``--max-batched-tokens`` and ``--gpu-memory-utilization`` are the deployment group's), the latency
targets (``--slo-ttft``, ``--slo-tpot``, ``--slo-itl``, ``--slo-e2el``), the files beside the report
(``--per-request``, ``--schedule-trace``) and speculative decoding (``--speculative-tokens``, ``--acceptance``,
``--draft``). They are
read first, and what is left is the command line of a phase (the model, ``--hardware``, the dtypes, the
layout), parsed as :func:`opcount.cli.parser.parse` parses it; the flags that set a phase's own lengths and
batch are refused, the workload's set them."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from ...errors import OpcountError
from ...llm.models.limits import MAX_BATCH, MAX_POSITIONS
from ...llm.serve import slo, traces
from ...llm.serve.speculative import MAX_TOKENS, Speculation, parse_acceptance
from ...llm.serve.workload import ARRIVALS, MAX_REQUESTS, Workload
from ..args import UsageError, natural_int, positive_int
from ..options import Options
from ..parser import parse as parse_phase

# vllm bench serve's defaults for its random dataset (vllm/benchmarks/datasets.py, --random-input-len and
# --random-output-len) and its --num-prompts (vllm/benchmarks/serve.py)
DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, DEFAULT_REQUESTS = 1024, 128, 1000
# what each latency target holds a request to
WHAT = {
    "ttft": "each request's TTFT", "tpot": "each request's TPOT", "itl": "every gap between a request's tokens",
    "e2el": "each request's end-to-end latency",
}  # fmt: skip
# a phase's flags that the workload and the scheduler decide instead
REFUSED = (
    "--phase", "--kv-len", "--batch", "--sweep", "--max-batch", "--price",
    "--micro-batches", "--dp", "--enable-two-batch-overlap",
)  # fmt: skip


@dataclass(frozen=True)
class SimulateOptions:
    """``opcount simulate``: the workload, the scheduler's knobs (None: vLLM's default for the device) and the
    phase's options (model, hardware, precision, layout, output); speculative decoding (None: none) and the
    draft model that drafts (None: the model's own MTP head)."""

    workload: Workload
    max_num_seqs: int | None
    block_size: int
    phase: Options
    slos: tuple[slo.Slo, ...] = ()
    per_request: str | None = None  # a CSV of one row a request
    schedule_trace: str | None = None  # the schedule as a Chrome/Perfetto trace
    speculation: Speculation | None = None
    draft: str | None = None
    enable_prefix_caching: bool = True


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


def max_num_seqs(text: str) -> int:
    """argparse type of ``--max-num-seqs`` (simulate's and plan's): decode steps are traced at batches up to it,
    so it is bounded by the most sequences a step is built with, here rather than after a trace."""
    value = positive_int(text)
    if value > MAX_BATCH:
        raise argparse.ArgumentTypeError(f"at most {MAX_BATCH:,} sequences (the most a step is traced at), got {text}")
    return value


def clients(text: str) -> int:
    """argparse type of one ``--concurrency``: clients in a closed loop, at most the requests a run may hold
    (each client holds one request; more of them send nothing)."""
    value = positive_int(text)
    if value > MAX_REQUESTS:
        raise argparse.ArgumentTypeError(f"at most {MAX_REQUESTS:,} clients (a run's most requests), got {text}")
    return value


def block_size(text: str) -> int:
    """argparse type of ``--block-size``: tokens a KV block holds, at most the positions one sequence may have
    (a larger block holds nothing more, and its bytes would be priced before anything said so)."""
    value = positive_int(text)
    if value > MAX_POSITIONS:
        raise argparse.ArgumentTypeError(f"at most {MAX_POSITIONS:,} tokens (a sequence's most positions), got {text}")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 below 1, got {text!r}") from None
    if not 0 <= value < 1:  # NaN fails both
        raise argparse.ArgumentTypeError(f"expected a number from 0 below 1, got {text}")
    return value


def add_workload(
    g: argparse._ArgumentGroup, requests: int, concurrency: Callable[[str], Any] = clients, metavar: str = "C"
) -> None:
    """The workload's flags ``opcount simulate`` and ``opcount plan`` share: a rate (with its arrivals) or a
    concurrency (read by ``concurrency``: plan takes a list), the requests (``requests`` by default), their
    lengths and the seed."""
    g.add_argument("--rate", type=parse_rate, metavar="R", help="requests a second (open loop)")
    g.add_argument("--arrivals", choices=ARRIVALS, help="with --rate: Poisson (default) or evenly spaced arrivals")
    g.add_argument(
        "--concurrency", type=concurrency, metavar=metavar, help="clients in a closed loop (instead of --rate)"
    )
    g.add_argument("--requests", type=positive_int, metavar="N", help=f"requests (default {requests})")
    g.add_argument(
        "--input-len", "--seq-len", dest="input_len", type=positive_int, metavar="L",
        help=f"prompt tokens (default {DEFAULT_INPUT_LEN})",
    )  # fmt: skip
    g.add_argument(
        "--output-len", "--gen-len", dest="output_len", type=positive_int, metavar="L",
        help=f"generated tokens (default {DEFAULT_OUTPUT_LEN})",
    )  # fmt: skip
    g.add_argument("--seed", type=natural_int, metavar="S", help="the arrivals' and lengths' seed (default 0)")
    g.add_argument(
        "--random-range-ratio", type=_share, metavar="R",
        help="lengths drawn uniformly within R of --input-len and --output-len, as vllm bench serve's random dataset (0 <= R < 1)",
    )  # fmt: skip
    g.add_argument(
        "--trace", metavar="FILE",
        help="requests from a trace: Mooncake .jsonl, a .csv of arrival/input/output tokens, or vllm bench serve's .json",
    )  # fmt: skip
    g.add_argument(
        "--trace-block-size", type=positive_int, metavar="T",
        help=f"tokens one of a Mooncake trace's hash_ids covers (default {traces.MOONCAKE_BLOCK})",
    )  # fmt: skip
    g.add_argument(
        "--prefix-hit", type=_share, metavar="H",
        help="the first H of every prompt is one prefix all requests share (a system prompt; 0 <= H < 1)",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="opcount simulate",
        allow_abbrev=False,  # the rest of the line is the phase's: no prefix of its flags taken here
        add_help=False,
        description="Served traffic on one deployment: requests through vLLM v1's scheduler over the model's "
        "traced step costs; TTFT, TPOT, ITL and end-to-end latency, throughput (simulate.md). The model, "
        "--hardware, the dtypes, --tp/--pp/--ep, --max-batched-tokens, --gpu-memory-utilization, -o, --format "
        "(table, json, or csv: the run's one row) and --plot (TTFT and TPOT percentiles over time) are as for "
        "`opcount MODEL`; goodput under the --slo-* targets.",
    )
    p.add_argument("-h", "--help", action="help", help="this help")
    g = p.add_argument_group("workload")
    add_workload(g, DEFAULT_REQUESTS)
    e = p.add_argument_group("engine (vLLM's names)")
    e.add_argument(
        "--max-num-seqs", type=max_num_seqs, metavar="N",
        help="the most requests running at once (default vLLM's: 1024 on a device of 70 GiB or more but an A100, else 256)",
    )  # fmt: skip
    e.add_argument("--block-size", type=block_size, metavar="T", help="tokens a KV block holds (default 16, vLLM's)")
    e.add_argument(
        "--enable-prefix-caching", action=argparse.BooleanOptionalAction, default=True,
        help="reuse the cached blocks of prompts' shared prefixes (default on, as in vLLM v1)",
    )  # fmt: skip
    t = p.add_argument_group("latency targets: goodput, the requests a second meeting all of them")
    for metric in slo.METRICS:
        t.add_argument(
            f"--slo-{metric}", metavar="[pNN:]T",
            help=f"{WHAT[metric]} at most T (2s, 200ms); the run's pNN (p50 if not given) judged too",
        )  # fmt: skip
    o = p.add_argument_group("files beside the report")
    o.add_argument("--per-request", metavar="FILE", help="a CSV of one row a request (latencies in seconds)")
    o.add_argument(
        "--schedule-trace", metavar="FILE",
        help="the schedule as a Chrome/Perfetto trace: a track of engine steps, a track a request (first 100k steps)",
    )  # fmt: skip
    add_speculation(p)
    return p


def add_speculation(p: argparse.ArgumentParser) -> None:
    """Speculative decoding's flags, ``opcount simulate``'s and ``opcount plan``'s (read by :func:`speculative`)."""
    s = p.add_argument_group("speculative decoding (vLLM's --speculative-config)")
    s.add_argument(
        "--speculative-tokens", type=positive_int, metavar="K",
        help=f"draft tokens a step, verified together (num_speculative_tokens; 1 to {MAX_TOKENS})",
    )  # fmt: skip
    s.add_argument(
        "--acceptance", metavar="A",
        help="the chance a draft token is accepted: one rate, or K comma-separated, each given those before accepted",
    )  # fmt: skip
    s.add_argument(
        "--draft", metavar="MODEL",
        help="the draft model (llm:NAME or hf:...), on the same devices and layout; default the model's MTP head",
    )  # fmt: skip


def _targets(ns: argparse.Namespace) -> tuple[slo.Slo, ...]:
    found = []
    for metric in slo.METRICS:
        text = getattr(ns, f"slo_{metric}")
        if text is None:
            continue
        try:
            found.append(slo.parse(metric, text))
        except OpcountError as e:
            raise UsageError(f"--slo-{metric} {text}: {e}") from None
    return tuple(found)


def _files(ns: argparse.Namespace, phase: Options) -> None:
    """``--per-request`` and ``--schedule-trace`` are written after the run: a wrong folder should not cost one,
    nor two outputs on one path (the second written would replace the first)."""
    seen = {Path(v).resolve(): f for f, v in (("-o", phase.output), ("--plot", phase.plot)) if v}
    for flag, value in (("--per-request", ns.per_request), ("--schedule-trace", ns.schedule_trace)):
        if value is None:
            continue
        path = Path(value)
        if not value.strip() or path.is_dir():
            raise UsageError(f"{flag} needs a file name, got {value!r}")
        if not path.resolve().parent.is_dir():
            raise UsageError(f"{flag} {value}: no folder {str(path.parent)!r} to write it in")
        if path.resolve() in seen:
            raise UsageError(f"{flag} {value}: {seen[path.resolve()]} writes the same file: give each output its own")
        seen[path.resolve()] = flag


def parse(argv: Sequence[str]) -> SimulateOptions:
    """``opcount simulate ...`` as checked, typed options; everything refused before a model is built."""
    ns, rest = build_parser().parse_known_args(list(argv))
    for token in rest:
        name = token.split("=", 1)[0]
        if name in REFUSED:
            raise UsageError(
                f"opcount simulate: {name} does not apply (the workload sets each step's lengths and batch)"
            )
    if ns.rate is not None and ns.concurrency is not None:
        raise UsageError("--rate and --concurrency are two workloads: give one of them")
    if ns.arrivals is not None and ns.rate is None:
        raise UsageError("--arrivals applies to --rate")
    if ns.requests is not None and ns.requests > MAX_REQUESTS:
        raise UsageError(f"--requests {ns.requests}: at most {MAX_REQUESTS:,}")
    if ns.seed is not None and ns.seed >= 2**63:
        raise UsageError(f"--seed {ns.seed}: at most 2**63 - 1")
    if ns.prefix_hit and not ns.enable_prefix_caching:
        raise UsageError("--prefix-hit shares a prefix that --no-enable-prefix-caching would not reuse: drop one")
    workload = workload_of(ns)
    slos = _targets(ns)
    speculation = speculative(ns.speculative_tokens, ns.acceptance, ns.draft)
    phase = parse_phase(rest)
    if not isinstance(phase, Options):  # parse() reads `compare` as a first word
        raise UsageError("opcount simulate takes one model")
    if phase.hardware is None:
        raise UsageError("opcount simulate needs --hardware (the step times, the device's memory)")
    if phase.rendering.format not in ("table", "json", "csv"):
        raise UsageError(f"opcount simulate writes a table, json or csv, not --format {phase.rendering.format}")
    if phase.analysis.mode == "train" or phase.profile:
        raise UsageError("opcount simulate serves inference: drop --train and --profile")
    if not phase.model.startswith(("llm:", "hf:")):
        raise OpcountError(f"opcount simulate serves a causal LM (llm:NAME or hf:...), not {phase.model}")
    _files(ns, phase)
    return SimulateOptions(
        workload,
        ns.max_num_seqs,
        ns.block_size or 16,
        phase,
        slos,
        ns.per_request,
        ns.schedule_trace,
        speculation,
        ns.draft,
        ns.enable_prefix_caching,
    )


def workload_of(
    ns: argparse.Namespace, command: str = "opcount simulate", requests: int = DEFAULT_REQUESTS
) -> Workload:
    """The workload the flags give: drawn (lengths, a rate or a concurrency), or a trace's requests (the first
    ``--requests`` of them), sent at the trace's own times unless a rate or a concurrency is given (a vllm bench
    serve result's own, where neither is)."""
    arrivals, seed, prefix_hit = ns.arrivals or "poisson", ns.seed or 0, ns.prefix_hit or 0.0
    if ns.trace_block_size is not None and ns.trace is None:
        raise UsageError("--trace-block-size applies to --trace")
    if ns.trace is None:
        if ns.rate is None and ns.concurrency is None:
            raise UsageError(f"{command} needs --rate R (requests a second), --concurrency C (clients) or --trace FILE")
        return Workload(
            requests=ns.requests or requests, input_len=ns.input_len or DEFAULT_INPUT_LEN,
            output_len=ns.output_len or DEFAULT_OUTPUT_LEN, rate=ns.rate, concurrency=ns.concurrency,
            range_ratio=ns.random_range_ratio or 0.0, arrivals=arrivals, seed=seed, prefix_hit=prefix_hit,
        )  # fmt: skip
    for flag, value in (
        ("--input-len", ns.input_len),
        ("--output-len", ns.output_len),
        ("--random-range-ratio", ns.random_range_ratio),
    ):
        if value is not None:
            raise UsageError(f"{flag} does not apply to --trace: the trace gives each request's lengths")
    try:
        trace = traces.read(ns.trace, ns.trace_block_size or traces.MOONCAKE_BLOCK)
    except OpcountError as e:
        raise UsageError(f"--trace {e}") from None
    if ns.requests is not None and ns.requests > len(trace.rows):
        raise UsageError(f"--requests {ns.requests}: the trace {ns.trace} has {len(trace.rows):,}")
    if ns.prefix_hit and trace.hash_block:
        raise UsageError(f"--prefix-hit does not apply to --trace {ns.trace}: its hash_ids say which blocks are shared")
    rows = trace.rows[: ns.requests] if ns.requests else trace.rows
    rate, concurrency = ns.rate, ns.concurrency
    if rate is None and concurrency is None:
        rate, concurrency = trace.rate, trace.concurrency
        if rate is None and concurrency is None and any(s.arrival is None for s in rows):
            raise UsageError(f"--trace {ns.trace}: it has no arrival times: give --rate R or --concurrency C")
    return Workload.replay(
        rows, hash_block=trace.hash_block, rate=rate, concurrency=concurrency, arrivals=arrivals, seed=seed,
        prefix_hit=prefix_hit,
    )  # fmt: skip


def speculative(tokens: int | None, acceptance: str | None, draft: str | None) -> Speculation | None:
    """``--speculative-tokens`` with its ``--acceptance`` (and ``--draft``) as one checked speculation."""
    if tokens is None:
        for flag, value in (("--acceptance", acceptance), ("--draft", draft)):
            if value is not None:
                raise UsageError(f"{flag} applies to speculative decoding: give --speculative-tokens K")
        return None
    if acceptance is None:
        raise UsageError(
            "--speculative-tokens needs --acceptance: the chance a draft token is accepted (one rate, or one a token)"
        )
    if draft is not None and not draft.startswith(("llm:", "hf:")):
        raise UsageError(f"--draft takes a causal LM (llm:NAME or hf:...), not {draft}")
    try:
        rates = parse_acceptance(acceptance)
        return Speculation.of(tokens, rates[0] if len(rates) == 1 else rates, draft or "mtp")
    except OpcountError as e:
        raise UsageError(f"--speculative-tokens {tokens} --acceptance {acceptance}: {e}") from None
