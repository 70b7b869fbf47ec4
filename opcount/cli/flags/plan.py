"""``opcount plan MODEL``'s own flags: the workload as ``opcount simulate`` reads it (``--rate`` with
``--arrivals``, or ``--concurrency``; ``--requests``, ``--input-len``, ``--output-len``, ``--seed``), the engine's
``--max-num-seqs`` and ``--block-size``, the targets (``--slo-ttft``, ``--slo-tpot``: :mod:`opcount.llm.serve.slo`'s
syntax), and the search (``--hardware`` a list, ``--price`` per device, ``--max-devices``, ``--weight-dtypes``,
``--disaggregate``). They are read first, and what is left is the command line of a phase (the model, the
activation and KV dtypes, ``--kernels``...), parsed as :func:`opcount.cli.parser.parse` parses it; the flags the
search decides (the layout, one ``--hardware``) and those the workload sets are refused."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from ...errors import OpcountError
from ...hardware.lookup import Hardware
from ...hardware.lookup import hardware as lookup_hardware
from ...llm.plan.bounds import MAX_DEVICES, MAX_SIMULATIONS, space
from ...llm.serve.slo import Slo
from ...llm.serve.slo import parse as parse_slo
from ...llm.serve.workload import MAX_REQUESTS, Workload
from ..args import UsageError, positive_int
from ..options import Options
from ..parser import parse as parse_phase
from .deploy import parse_price
from .simulate import DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN, add_workload
from .simulate import REFUSED as SIMULATE_REFUSED

# a search runs hundreds of simulations: fewer requests each than simulate's default of vllm bench serve's 1000
DEFAULT_REQUESTS = 200
DEFAULT_MAX_DEVICES = 8  # one node of eight: the usual unit a deployment is bought in
DEFAULT_HARDWARE = ("h100-sxm",)
# the search decides the layout and the devices; the workload each step's lengths and batch
REFUSED = (*SIMULATE_REFUSED, "--tp", "--pp", "--ep", "--ep-num-redundant-experts", "--profile")


@dataclass(frozen=True)
class PlanOptions:
    """``opcount plan``: the workload, the targets, the devices searched with their prices (dollars a
    device-hour, by the device's name), the bound on devices, the weight dtypes tried (empty: the phase's
    ``--weight-dtype``), pools or not, the scheduler's knobs and the phase's options."""

    workload: Workload
    slos: tuple[Slo, ...]
    hardware: tuple[Hardware, ...]
    prices: dict[str, float]
    max_devices: int
    weight_dtypes: tuple[str, ...]
    disaggregate: bool
    max_num_seqs: int | None
    block_size: int
    phase: Options


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(f"{message} (see opcount plan --help)")


def _items(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="opcount plan",
        allow_abbrev=False,  # the rest of the line is the phase's: no prefix of its flags taken here
        add_help=False,
        description="The cheapest deployments that meet latency targets: every device type, layout (tp, pp, ep, "
        "dp copies), weight dtype and, with --disaggregate, prefill and decode pools, each simulated as "
        "`opcount simulate` does and ranked by dollars per million output tokens (plan.md). The model, the other "
        "dtypes, --kernels, --max-batched-tokens, --gpu-memory-utilization, -o and --format (table or json) are "
        "as for `opcount MODEL`.",
    )
    p.add_argument("-h", "--help", action="help", help="this help")
    g = p.add_argument_group("workload (as opcount simulate)")
    add_workload(g, DEFAULT_REQUESTS)
    e = p.add_argument_group("engine (vLLM's names)")
    e.add_argument("--max-num-seqs", type=positive_int, metavar="N", help="as opcount simulate (default vLLM's)")
    e.add_argument("--block-size", type=positive_int, metavar="T", help="tokens a KV block holds (default 16, vLLM's)")
    s = p.add_argument_group("targets and search")
    s.add_argument("--slo-ttft", metavar="[pNN:]TIME", help="time to first token, e.g. 2s or p90:2s (p50 unless given)")
    s.add_argument("--slo-tpot", metavar="[pNN:]TIME", help="time per output token after the first, e.g. p90:50ms")
    s.add_argument(
        "--hardware", metavar="NAME,...", help=f"the device types searched (default {','.join(DEFAULT_HARDWARE)})"
    )
    s.add_argument(
        "--price", metavar="NAME=USD,...",
        help="dollars per device-hour of each device searched (as --price of `opcount MODEL`, per device type; "
        "a bare USD prices them all); without it configurations rank by device-hours per million output tokens",
    )  # fmt: skip
    s.add_argument(
        "--max-devices", type=positive_int, metavar="N",
        help=f"the most devices of a configuration (default {DEFAULT_MAX_DEVICES}; at most {MAX_DEVICES})",
    )  # fmt: skip
    s.add_argument(
        "--weight-dtypes", metavar="DTYPE,...",
        help="the weight dtypes tried, each for the whole model (e.g. bf16,fp8); default: --weight-dtype's one",
    )  # fmt: skip
    s.add_argument("--disaggregate", action="store_true", help="also separate prefill and decode pools (needs --rate)")
    # --frontier FILE: the frontier engineer's writer (opcount.llm.plan.frontier.write(points, path)) goes here
    return p


def prices(text: str | None, hardware: Sequence[Hardware]) -> dict[str, float]:
    """``--price``: ``NAME=USD,...`` (each name a device searched) or one ``USD`` for all, by the device's name."""
    if text is None:
        return {}
    found: dict[str, float] = {}
    try:
        if "=" not in text:
            return {h.name: parse_price(text.strip()) for h in hardware}
        for item in _items(text):
            name, _, value = item.partition("=")
            try:
                resolved = lookup_hardware(name.strip()).name
            except OpcountError as e:
                raise UsageError(f"--price {item}: {e}") from None
            if resolved not in {h.name for h in hardware}:
                raise UsageError(
                    f"--price {item}: {resolved} is not searched (--hardware {','.join(h.name for h in hardware)})"
                )
            found[resolved] = parse_price(value.strip())
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"--price: {e}") from None
    missing = [h.name for h in hardware if h.name not in found]
    if missing:
        raise UsageError(f"--price: no price for {', '.join(missing)}: price every --hardware searched, or none")
    return found


def _hardware(text: str | None) -> tuple[Hardware, ...]:
    names = _items(text) if text is not None else list(DEFAULT_HARDWARE)
    if not names:
        raise UsageError("--hardware: name one device type at least (h100-sxm,h200-sxm,...)")
    found: list[Hardware] = []
    for name in names:
        try:
            h = lookup_hardware(name)
        except OpcountError as e:
            raise UsageError(f"--hardware {name}: {e}") from None
        if h.memory_bytes is None:
            raise UsageError(f"--hardware {name}: {h.name} does not say its memory: its KV cache cannot be sized")
        if h.name not in {f.name for f in found}:
            found.append(h)
    return tuple(found)


def _slos(ns: argparse.Namespace, workload: Workload) -> tuple[Slo, ...]:
    slos = []
    for metric, text in (("ttft", ns.slo_ttft), ("tpot", ns.slo_tpot)):
        if text is None:
            continue
        try:
            slos.append(parse_slo(metric, text))
        except OpcountError as e:
            raise UsageError(f"--slo-{metric}: {e}") from None
    if any(s.metric == "tpot" for s in slos) and workload.output_len < 2:
        raise UsageError("--slo-tpot: answers of one token have no time per output token (--output-len 1)")
    return tuple(slos)


def parse(argv: Sequence[str]) -> PlanOptions:
    """``opcount plan ...`` as checked, typed options; everything refused before a model is built."""
    ns, rest = build_parser().parse_known_args(list(argv))
    for token in rest:
        name = token.split("=", 1)[0]
        if name in REFUSED or name == "--dp":
            raise UsageError(
                f"opcount plan: {name} does not apply (the search sets the layout, the workload the steps)"
            )
    if ns.rate is None and ns.concurrency is None:
        raise UsageError("opcount plan needs --rate R (requests a second) or --concurrency C (clients)")
    if ns.rate is not None and ns.concurrency is not None:
        raise UsageError("--rate and --concurrency are two workloads: give one of them")
    if ns.arrivals is not None and ns.rate is None:
        raise UsageError("--arrivals applies to --rate")
    if ns.disaggregate and ns.rate is None:
        raise UsageError("--disaggregate simulates the two pools apart at a rate: give --rate, not --concurrency")
    requests = ns.requests or DEFAULT_REQUESTS
    if requests > MAX_REQUESTS:
        raise UsageError(f"--requests {requests}: at most {MAX_REQUESTS:,}")
    workload = Workload(
        requests=requests, input_len=ns.input_len or DEFAULT_INPUT_LEN, output_len=ns.output_len or DEFAULT_OUTPUT_LEN,
        rate=ns.rate, concurrency=ns.concurrency, arrivals=ns.arrivals or "poisson", seed=ns.seed or 0,
    )  # fmt: skip
    slos = _slos(ns, workload)
    hardware = _hardware(ns.hardware)
    max_devices = ns.max_devices or DEFAULT_MAX_DEVICES
    if max_devices > MAX_DEVICES:
        raise UsageError(f"--max-devices {max_devices}: at most {MAX_DEVICES}")
    dtypes = tuple(dict.fromkeys(_items(ns.weight_dtypes))) if ns.weight_dtypes is not None else ()
    if ns.weight_dtypes is not None and not dtypes:
        raise UsageError("--weight-dtypes: name one dtype at least (bf16,fp8)")
    count = space(hardware, max(1, len(dtypes)), max_devices) * (2 if ns.disaggregate else 1)
    if count > MAX_SIMULATIONS:
        raise UsageError(
            f"--max-devices {max_devices}: {count:,} configurations over {len(hardware)} device types and "
            f"{max(1, len(dtypes))} weight dtypes, more than the {MAX_SIMULATIONS:,} a search simulates; lower it"
        )
    engine = any(t.split("=", 1)[0] in ("--engine", "--engine-profile") for t in rest)
    # an engine profile prices time on hardware: the phase's flags are checked on the first device searched
    phase = parse_phase([*rest, "--hardware", hardware[0].name] if engine else rest)
    if not isinstance(phase, Options):  # parse() reads `compare` as a first word
        raise UsageError("opcount plan takes one model")
    if dtypes and any(t.split("=", 1)[0] == "--weight-dtype" for t in rest):
        raise UsageError("--weight-dtypes lists the weight dtypes tried: drop --weight-dtype")
    if phase.rendering.format not in ("table", "json"):
        raise UsageError(f"opcount plan writes a table or json, not --format {phase.rendering.format}")
    if phase.analysis.mode == "train" or phase.plot:
        raise UsageError("opcount plan serves inference: drop --train and --plot")
    if not phase.model.startswith(("llm:", "hf:")):
        raise OpcountError(f"opcount plan serves a causal LM (llm:NAME or hf:...), not {phase.model}")
    return PlanOptions(
        workload, slos, hardware, prices(ns.price, hardware), max_devices, dtypes, ns.disaggregate,
        ns.max_num_seqs, ns.block_size or 16, phase,
    )  # fmt: skip
