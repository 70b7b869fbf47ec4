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
from pathlib import Path
from typing import NoReturn

from ...errors import OpcountError
from ...hardware.lookup import Hardware
from ...hardware.lookup import hardware as lookup_hardware
from ...llm.plan.bounds import MAX_DEVICES, MAX_SIMULATIONS, space
from ...llm.plan.frontier import kind as frontier_kind
from ...llm.serve.slo import Slo
from ...llm.serve.slo import parse as parse_slo
from ...llm.serve.speculative import Speculation
from ...llm.serve.workload import MAX_REQUESTS, Workload
from ..args import UsageError, positive_int
from ..options import Options
from ..parser import parse as parse_phase
from .deploy import parse_price
from .simulate import REFUSED as SIMULATE_REFUSED
from .simulate import add_speculation, add_workload, block_size, clients, max_num_seqs, speculative, workload_of

# a search runs hundreds of simulations: fewer requests each than simulate's default of vllm bench serve's 1000
DEFAULT_REQUESTS = 200
DEFAULT_MAX_DEVICES = 8  # one node of eight: the usual unit a deployment is bought in
DEFAULT_HARDWARE = ("h100-sxm",)
MAX_CONCURRENCIES = 32  # --concurrency values of one search: each multiplies the configurations simulated
# the search decides the layout and the devices; the workload each step's lengths and batch
REFUSED = (*SIMULATE_REFUSED, "--tp", "--pp", "--ep", "--ep-num-redundant-experts", "--profile")


@dataclass(frozen=True)
class PlanOptions:
    """``opcount plan``: the workload, the targets, the devices searched with their prices (dollars a
    device-hour, by the device's name), the bound on devices, the weight dtypes tried (empty: the phase's
    ``--weight-dtype``), pools or not, the scheduler's knobs and the phase's options; ``workload`` is the first
    of ``concurrencies`` where several are listed (each searched alike), ``frontier`` the file to write."""

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
    concurrencies: tuple[int, ...] = ()  # every --concurrency listed, in rising order (empty under --rate)
    frontier: str | None = None  # --frontier FILE
    speculation: Speculation | None = None  # tried beside none, drafted by `draft` (None: the model's MTP head)
    draft: str | None = None


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
    add_workload(g, DEFAULT_REQUESTS, concurrencies, "C[,C...]")
    e = p.add_argument_group("engine (vLLM's names)")
    e.add_argument("--max-num-seqs", type=max_num_seqs, metavar="N", help="as opcount simulate (default vLLM's)")
    e.add_argument("--block-size", type=block_size, metavar="T", help="tokens a KV block holds (default 16, vLLM's)")
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
    s.add_argument(
        "--frontier", metavar="FILE",
        help="write the throughput-interactivity frontier (tokens/s per device against tokens/s per user, each "
        "device type's Pareto set marked) of every configuration run: .csv, .json, .png, .svg or an interactive "
        ".html; list several --concurrency values to trace it across load",
    )  # fmt: skip
    add_speculation(p)
    return p


def concurrencies(text: str) -> tuple[int, ...]:
    """argparse type of plan's ``--concurrency``: one count of clients or a list, ``1,4,16,64``."""
    items = _items(text)
    if not items:
        raise argparse.ArgumentTypeError(f"expected clients, or a list of them (1,4,16), got {text!r}")
    found = tuple(sorted({clients(t) for t in items}))
    if len(found) > MAX_CONCURRENCIES:
        raise argparse.ArgumentTypeError(f"at most {MAX_CONCURRENCIES} values, got {len(found)}")
    return found


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
    if ns.rate is not None and ns.concurrency is not None:
        raise UsageError("--rate and --concurrency are two workloads: give one of them")
    if ns.arrivals is not None and ns.rate is None:
        raise UsageError("--arrivals applies to --rate")
    if ns.disaggregate and (ns.rate is None or ns.trace is not None):
        raise UsageError(
            "--disaggregate simulates the two pools apart at a rate of drawn requests: give --rate, not "
            + ("--trace" if ns.trace is not None else "--concurrency")
        )
    clients: tuple[int, ...] = ns.concurrency or ()
    if ns.requests is not None and ns.requests > MAX_REQUESTS:
        raise UsageError(f"--requests {ns.requests}: at most {MAX_REQUESTS:,}")
    if ns.seed is not None and ns.seed >= 2**63:
        raise UsageError(f"--seed {ns.seed}: at most 2**63 - 1")
    one = argparse.Namespace(**vars(ns) | {"concurrency": clients[0] if clients else None})
    workload = workload_of(one, "opcount plan", DEFAULT_REQUESTS)
    slos = _slos(ns, workload)
    hardware = _hardware(ns.hardware)
    max_devices = ns.max_devices or DEFAULT_MAX_DEVICES
    if max_devices > MAX_DEVICES:
        raise UsageError(f"--max-devices {max_devices}: at most {MAX_DEVICES}")
    dtypes = tuple(dict.fromkeys(_items(ns.weight_dtypes))) if ns.weight_dtypes is not None else ()
    if ns.weight_dtypes is not None and not dtypes:
        raise UsageError("--weight-dtypes: name one dtype at least (bf16,fp8)")
    count = space(hardware, max(1, len(dtypes)), max_devices) * (2 if ns.disaggregate else 1) * max(1, len(clients))
    if count > MAX_SIMULATIONS:
        over = f" and {len(clients)} concurrencies" if len(clients) > 1 else ""
        raise UsageError(
            f"--max-devices {max_devices}: {count:,} configurations over {len(hardware)} device types, "
            f"{max(1, len(dtypes))} weight dtypes{over}, more than the {MAX_SIMULATIONS:,} a search simulates; lower it"
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
    _frontier(ns.frontier, phase)
    speculation = speculative(ns.speculative_tokens, ns.acceptance, ns.draft)
    if speculation is not None and ns.disaggregate:
        raise UsageError("--speculative-tokens: disaggregated pools are searched without speculation; drop one")
    return PlanOptions(
        workload, slos, hardware, prices(ns.price, hardware), max_devices, dtypes, ns.disaggregate,
        ns.max_num_seqs, ns.block_size or 16, phase, clients, ns.frontier, speculation, ns.draft,
    )  # fmt: skip


def _frontier(path: str | None, phase: Options) -> None:
    """``--frontier FILE`` is written after the search: a wrong ending or folder should not cost one."""
    if path is None:
        return
    if not path.strip() or Path(path).is_dir():
        raise UsageError(f"--frontier needs a file name, got {path!r}")
    try:
        kind = frontier_kind(path)
    except OpcountError as e:
        raise UsageError(f"--frontier {e}") from None
    if not Path(path).resolve().parent.is_dir():
        raise UsageError(f"--frontier {path}: no folder {str(Path(path).parent)!r} to write it in")
    if phase.output and Path(phase.output).resolve() == Path(path).resolve():
        raise UsageError(f"--frontier {path}: -o writes the same file: give each output its own")
    if kind in ("png", "svg"):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--frontier as a chart needs matplotlib: pip install 'opcount[plot]'") from None
