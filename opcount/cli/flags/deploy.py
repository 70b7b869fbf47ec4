"""The deployment flags: ``--tp --pp --ep --dp --micro-batches`` (a parallel layout), the experts' all-to-all
(``--ep-num-redundant-experts``, ``--dispatch-dtype``, ``--enable-two-batch-overlap``), ``--price`` (dollars per
device-hour), ``--max-batch``, and how a serving engine sizes a device: ``--gpu-memory-utilization`` (``--reserve``,
its complement) and ``--max-batched-tokens``. Their arguments, their :class:`~opcount.cli.options.DeployOptions`
with the defaults resolved, and the checks that need no model (:mod:`opcount.cli.deploy` checks a layout
against the model built, and prices it)."""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Mapping
from typing import Any

from ...errors import OpcountError
from ...hardware.lookup import Hardware
from ...llm.deploy import DEFAULT_GPU_MEMORY_UTILIZATION, MAX_PRICE
from ...llm.deploy.expert_routes import DISPATCH_DTYPES, Dispatch
from ...llm.deploy.layout import Parallel
from ...llm.engines.profile import ENGINES, resolve
from ..args import natural_int, positive_int
from ..options import DeployOptions, LLMOptions

# The flags by their argparse names (opcount compare's help hides them, as the other LLM flags).
FLAGS = (
    "tp", "pp", "ep", "dp", "micro_batches", "ep_num_redundant_experts", "dispatch_dtype", "enable_two_batch_overlap",
    "price", "max_batch", "gpu_memory_utilization", "reserve", "max_batched_tokens", "engine", "engine_profile",
)  # fmt: skip
SWITCHES = ("enable_two_batch_overlap", "max_batch")  # store_true: given when set
# --sweep keys: a layout per point
SWEEPABLE = {"tp": "tp", "pp": "pp", "ep": "ep", "dp": "dp"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The deployment flags, in their own help group."""
    g = parser.add_argument_group(
        "LLM deployment (llm: and causal hf: models; memory and fit per device, communication, the layout's time and cost; "
        "deploy.md)"
    )
    for name, what in (
        ("tp", "tensor-parallel devices (the model's tp_plan splits heads and channels)"),
        ("pp", "pipeline stages (contiguous layers)"),
        ("ep", "expert-parallel devices: 1 or --tp x --dp"),
        ("dp", "data-parallel replicas"),
    ):
        g.add_argument(f"--{name}", type=positive_int, metavar="N", help=f"{what} (default 1)")
    g.add_argument(
        "--micro-batches", type=positive_int, metavar="M", help="with --pp: micro-batches in flight (default 1)"
    )
    g.add_argument(
        "--ep-num-redundant-experts",
        type=natural_int,
        metavar="N",
        help="with --ep: N more expert slots holding copies of experts (EPLB, SGLang's name; vLLM's "
        "--enable-eplb with num_redundant_experts); experts + N must divide by --ep (default 0)",
    )
    g.add_argument(
        "--dispatch-dtype",
        metavar="DTYPE",
        help=f"with --ep: the experts' dispatch in {', '.join(DISPATCH_DTYPES)} (or bf16, fp16, fp8: DeepEP's FP8 "
        "dispatch, a float32 scale per 128 channels); the combine stays in the residual stream's dtype "
        "(default: the residual stream's)",
    )
    g.add_argument(
        "--enable-two-batch-overlap",
        action="store_true",
        help="with --ep: the batch run as two halves, each one's all-to-all under the other's kernels "
        "(SGLang's name; vLLM's --enable-dbo)",
    )
    g.add_argument(
        "--price", type=parse_price, metavar="USD", help="dollars per device-hour: the cost per million tokens"
    )
    g.add_argument(
        "--max-batch",
        action="store_true",
        help="the largest --batch whose weights, KV cache (--kv-len + --gen-len) and activations fit a device",
    )
    g.add_argument(
        "--gpu-memory-utilization",
        type=_utilization,
        metavar="U",
        help="the share of a device's reported memory the engine takes for weights, activations and KV cache "
        f"(vLLM's name and default, {DEFAULT_GPU_MEMORY_UTILIZATION:g})",
    )
    g.add_argument(
        "--reserve",
        type=_fraction,
        metavar="F",
        help="the share of a device's memory kept from the engine: --gpu-memory-utilization 1 - F",
    )
    g.add_argument(
        "--max-batched-tokens",
        "--max-num-batched-tokens",
        dest="max_batched_tokens",
        type=positive_int,
        metavar="N",
        help="the most tokens the engine runs in a step, a long prompt in chunks (vLLM's max_num_batched_tokens; "
        "default vLLM's: 8192 on a device of 70 GiB or more but an A100, else 2048): the activations of fit and "
        "--max-batch",
    )
    g.add_argument(
        "--engine",
        choices=ENGINES,
        help="an engine's built-in profile: its per-step, collective, small-GEMM, MoE-routing, decode-attention and "
        "software-dequantisation terms added to the estimate, its server's time to first token to TTFT; the bound "
        "is unchanged (default: none, the kernels' and collectives' estimate alone; llm.md)",
    )
    g.add_argument(
        "--engine-profile",
        metavar="FILE",
        help="an engine profile's JSON, as opcount calibrate writes it (instead of --engine's built-in)",
    )


def parse_price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected dollars per device-hour, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_PRICE:
        raise argparse.ArgumentTypeError(
            f"expected dollars per device-hour above 0 and up to {MAX_PRICE:g}, got {text}"
        )
    return value


def _utilization(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction above 0 and up to 1, got {text!r}") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"expected a fraction above 0 and up to 1, got {text}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to 0.99, got {text!r}") from None
    if not 0 <= value <= 0.99:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to 0.99, got {text}")
    return value


def options(ns: Mapping[str, Any]) -> DeployOptions:
    """The deployment flags of the parsed command line (argparse's names -> values), each default resolved:
    one device of each kind, one micro-batch, no price, vLLM's :data:`DEFAULT_GPU_MEMORY_UTILIZATION` (less
    ``--reserve`` where it is given instead); ``max_batched_tokens`` None is vLLM's default for the device,
    resolved with the device (:func:`opcount.llm.deploy.fit.default_max_batched_tokens`)."""
    given = [f"--{n.replace('_', '-')}" for n in FLAGS if (ns.get(n) if n in SWITCHES else ns.get(n) is not None)]
    degrees = {name: ns.get(name) or 1 for name in ("tp", "pp", "ep", "dp", "micro_batches")}  # each >= 1 if given
    utilization, reserve = ns.get("gpu_memory_utilization"), ns.get("reserve")  # 0 is a reserve
    if utilization is None:
        utilization = DEFAULT_GPU_MEMORY_UTILIZATION if reserve is None else 1 - reserve
    dispatch_dtype = ns.get("dispatch_dtype")
    if dispatch_dtype is not None:
        dispatch_dtype = Dispatch(dispatch_dtype).dtype  # its canonical name; an unknown one is refused here
    return DeployOptions(
        **degrees,
        redundant_experts=ns.get("ep_num_redundant_experts") or 0,
        dispatch_dtype=dispatch_dtype,
        two_batch_overlap=bool(ns.get("enable_two_batch_overlap")),
        price=ns.get("price"),
        max_batch=bool(ns.get("max_batch")),
        gpu_memory_utilization=utilization,
        max_batched_tokens=ns.get("max_batched_tokens"),
        engine=resolve(ns.get("engine"), ns.get("engine_profile")),
        given=tuple(given),
    )


def layout(flags: DeployOptions, values: Mapping[str, int]) -> Parallel:
    """The layout of one point: the flags, a swept value in its place; bad values name their flag."""
    try:
        return Parallel(
            **{k: values.get(k, getattr(flags, k)) for k in SWEEPABLE},
            micro_batches=flags.micro_batches,
            redundant_experts=flags.redundant_experts,
        )
    except OpcountError as e:
        raise OpcountError(str(e)) from None


def swept_layouts(flags: LLMOptions) -> list[dict[str, int]]:
    """Every combination of the swept layout keys (one empty one without a sweep of them)."""
    axes = [(k, v) for k, v in flags.sweep if k in SWEEPABLE]
    return [dict(zip([k for k, _ in axes], combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))]


def check(flags: LLMOptions, hardware_given: bool, hardware: Hardware | None) -> None:
    """Combinations refused before anything is built (``hardware``: the preset or file given, None
    for this machine, measured later)."""
    d = flags.deploy
    swept = {k for k, _ in flags.sweep} & set(SWEEPABLE)
    micro = "--micro-batches" in d.given
    if micro and d.pp == 1 and "pp" not in swept:
        raise OpcountError("--micro-batches applies to a pipeline: give --pp")
    if micro and flags.gen_len is not None:
        raise OpcountError("--micro-batches prices one phase: drop --gen-len (or --micro-batches)")
    if micro and flags.batch % d.micro_batches:
        raise OpcountError(f"--micro-batches {d.micro_batches}: does not divide --batch {flags.batch}")
    if "--gpu-memory-utilization" in d.given and "--reserve" in d.given:
        raise OpcountError("--reserve F is --gpu-memory-utilization 1 - F: give one of them")
    if "--engine" in d.given and "--engine-profile" in d.given:
        raise OpcountError("--engine-profile FILE replaces --engine's built-in profile: give one of them")
    for name, value in (("price", d.price), ("max-batch", d.max_batch or None), ("engine", d.engine)):
        if value is not None and not hardware_given:
            raise OpcountError(f"--{name} needs --hardware (the time per step, the device's memory)")
    if d.max_batch and hardware is not None and hardware.memory_bytes is None:
        raise OpcountError(f"--max-batch: {hardware.name} does not say its memory (memory_bytes in a hardware file)")
    layouts = [layout(d, values) for values in swept_layouts(flags)]  # each within bounds, before building
    _check_all_to_all(flags, layouts)
    multi = any(p.tp > 1 or p.pp > 1 or p.ep > 1 for p in layouts)  # replicas alone communicate nothing
    if multi and hardware is not None and hardware.interconnect is None:
        given = [f"--{k} {getattr(d, k)}" for k in SWEEPABLE if getattr(d, k) > 1] or ["--sweep"]
        raise OpcountError(
            f"{' '.join(given)}: {hardware.name} has no interconnect figures to price the communication "
            "(a hardware file can give them: hardware.md)"
        )


def dispatch(flags: DeployOptions) -> Dispatch:
    """The experts' all-to-all as the flags ask for it."""
    return Dispatch(flags.dispatch_dtype, flags.two_batch_overlap)


def _check_all_to_all(flags: LLMOptions, layouts: list[Parallel]) -> None:
    """``--dispatch-dtype`` and ``--enable-two-batch-overlap`` price expert parallelism's all-to-all; two-batch
    overlap splits one phase's batch in halves on one pipeline stage."""
    d = flags.deploy
    for name, given in (
        ("--dispatch-dtype", d.dispatch_dtype is not None),
        ("--enable-two-batch-overlap", d.two_batch_overlap),
    ):
        if given and any(p.ep == 1 for p in layouts):
            raise OpcountError(f"{name} applies to the experts' all-to-all: give --ep (above 1 at every point)")
    if not d.two_batch_overlap:
        return
    if flags.gen_len is not None or any(p.pp > 1 or p.micro_batches > 1 for p in layouts):
        raise OpcountError(
            "--enable-two-batch-overlap prices one phase on one pipeline stage: drop --gen-len, --pp and --micro-batches"
        )
    batches = dict(flags.sweep).get("batch", (flags.batch,))
    odd = [b for b in batches if b % 2]
    if odd:
        raise OpcountError(f"--enable-two-batch-overlap splits the batch in two halves: --batch {odd[0]} is odd")
