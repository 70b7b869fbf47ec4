"""The command line's deployment flags on the LLM path: ``--tp --pp --ep --dp --micro-batches``
(a parallel layout), ``--price`` (dollars per device-hour), ``--max-batch`` and ``--reserve``; their
checks, and the lines and JSON fields they add to a report (:mod:`opcount.llm.deploy.deployment` computes)."""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import OpcountError
from ..hardware.lookup import Hardware
from ..llm.deploy.deployment import DEFAULT_RESERVE, MAX_PRICE, Deployment, Placement, deploy
from ..llm.deploy.layout import Parallel
from ..llm.phases import CausalLM, GenerationCost, PhaseCost
from ..units import seconds, size
from .args import positive_int
from .options import DeployOptions, LLMOptions

# The flags by their argparse names (opcount compare's help hides them, as the other LLM flags).
DEPLOY_FLAGS = ("tp", "pp", "ep", "dp", "micro_batches", "price", "max_batch", "reserve")
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
    g.add_argument("--price", type=_price, metavar="USD", help="dollars per device-hour: the cost per million tokens")
    g.add_argument(
        "--max-batch",
        action="store_true",
        help="the largest --batch whose weights, KV cache (--kv-len + --gen-len) and activations fit a device",
    )
    g.add_argument(
        "--reserve",
        type=_fraction,
        metavar="F",
        help=f"fraction of a device's memory kept for the engine's workspace (default {DEFAULT_RESERVE:g}, "
        "as vLLM's gpu_memory_utilization 0.9)",
    )


def _price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected dollars per device-hour, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_PRICE:
        raise argparse.ArgumentTypeError(
            f"expected dollars per device-hour above 0 and up to {MAX_PRICE:g}, got {text}"
        )
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
    """The deployment flags of the parsed command line (argparse's names -> values)."""
    return DeployOptions(
        **{name: ns.get(name) for name in DEPLOY_FLAGS if name != "max_batch"}, max_batch=bool(ns.get("max_batch"))
    )


def layout(flags: DeployOptions, values: Mapping[str, int]) -> Parallel:
    """The layout of one point: the flags, a swept value in its place; bad values name their flag."""
    try:
        return Parallel(
            **{k: values.get(k, getattr(flags, k) or 1) for k in SWEEPABLE},
            micro_batches=flags.micro_batches or 1,
        )
    except OpcountError as e:
        raise OpcountError(str(e)) from None


def check(flags: LLMOptions, hardware_given: bool, hardware: Hardware | None) -> None:
    """Combinations refused before anything is built (``hardware``: the preset or file given, None
    for this machine, measured later)."""
    d = flags.deploy
    swept = {k for k, _ in flags.sweep} & set(SWEEPABLE)
    if d.micro_batches is not None and (d.pp or 1) == 1 and "pp" not in swept:
        raise OpcountError("--micro-batches applies to a pipeline: give --pp")
    if d.micro_batches is not None and flags.gen_len is not None:
        raise OpcountError("--micro-batches prices one phase: drop --gen-len (or --micro-batches)")
    if d.micro_batches is not None and (flags.batch or 1) % d.micro_batches:
        raise OpcountError(f"--micro-batches {d.micro_batches}: does not divide --batch {flags.batch or 1}")
    for name, value in (("price", d.price), ("max-batch", d.max_batch or None)):
        if value is not None and not hardware_given:
            raise OpcountError(f"--{name} needs --hardware (the time per step, the device's memory)")
    if d.max_batch and hardware is not None and hardware.memory_bytes is None:
        raise OpcountError(f"--max-batch: {hardware.name} does not say its memory (memory_bytes in a hardware file)")
    layouts = [layout(d, values) for values in _swept_layouts(flags)]  # each within bounds, before building
    multi = any(p.tp > 1 or p.pp > 1 or p.ep > 1 for p in layouts)  # replicas alone communicate nothing
    if multi and hardware is not None and hardware.interconnect is None:
        given = [f"--{k} {getattr(d, k)}" for k in SWEEPABLE if (getattr(d, k) or 1) > 1] or ["--sweep"]
        raise OpcountError(
            f"{' '.join(given)}: {hardware.name} has no interconnect figures to price the communication "
            "(a hardware file can give them: hardware.md)"
        )


def check_model(llm: CausalLM, flags: LLMOptions) -> None:
    """Every layout of the run against the model (heads, layers, experts), before anything is traced."""
    d = flags.deploy
    if not d.given() and not any(k in SWEEPABLE for k, _ in flags.sweep):
        return
    for values in _swept_layouts(flags):
        Placement(llm.model, llm.config, llm.precision, layout(d, values))


def _swept_layouts(flags: LLMOptions) -> list[dict[str, int]]:
    """Every combination of the swept layout keys (one empty one without a sweep of them)."""
    axes = [(k, v) for k, v in flags.sweep if k in SWEEPABLE]
    return [dict(zip([k for k, _ in axes], combo, strict=True)) for combo in itertools.product(*(v for _, v in axes))]


def deployment(
    llm: CausalLM,
    phase: PhaseCost,
    generation: GenerationCost | None,
    values: Mapping[str, int],
    flags: LLMOptions,
    hardware: Hardware | None,
) -> Deployment | None:
    """The point's deployment, when a deployment flag is given or a layout swept; None otherwise."""
    d = flags.deploy
    if not d.given() and not set(values) & set(SWEEPABLE):
        return None
    return deploy(
        llm,
        phase,
        layout(d, values),
        hardware=hardware,
        price=d.price,
        reserve=DEFAULT_RESERVE if d.reserve is None else d.reserve,
        max_batch=d.max_batch,
        generation=generation,
    )


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------
def summary_lines(d: Deployment) -> list[str]:
    """The deployment in a few lines: layout, memory per device against capacity, communication,
    cost (its times are the summary's time lines: :func:`opcount.cli.llm_times.time_lines`)."""
    m = d.per_device
    lines = [
        f"  layout: {d.parallel.label()}; per device: weights {size(m.weights)}, KV cache {size(m.kv_cache)}, "
        f"activations {size(m.activations)}, total {size(m.total)}"
    ]
    if d.capacity is not None:
        verdict = "fits" if d.fits else f"does not fit: needs >= {d.needs} x {d.hardware}"
        lines.append(
            f"  capacity: {size(d.capacity)} per device ({d.reserve:g} kept for the engine's workspace): {verdict}"
        )
    if d.parallel.tp * d.parallel.pp * d.parallel.ep > 1:  # a layout that communicates
        timed = f", {seconds(d.communication_time)}" if d.communication_time is not None else ""
        step = "output token" if d.generation else "step"
        lines.append(f"  communication: {size(d.communication_bytes)} sent per device per {step}{timed}")
    if d.cost is not None:
        bound = d.cost_bound or {}
        lines.append(
            "  cost: "
            + ", ".join(f"${v:,.4g} per 1M {k} tokens (bound ${bound.get(k, 0):,.4g})" for k, v in d.cost.items())
        )
    if d.max_batch is not None:
        lines.append(f"  max batch: {d.max_batch} sequences fit a device")
    return lines


def add_json(out: dict[str, Any], d: Deployment | None) -> None:
    """The deployment's JSON into a point's, beside its times (the deployment's: :func:`opcount.cli.llm_times.time_fields`):
    ``parallel``; ``memory`` gains ``per_device``, ``capacity`` and ``fits``; ``communication`` and
    ``compute`` (a step's collectives and kernels, which its ``time`` adds), ``cost``, ``max_batch``."""
    if d is None:
        return
    out["parallel"] = d.parallel.as_dict()
    memory = out.setdefault("memory", {})
    memory |= {"per_device": d.per_device.as_dict(), "capacity": d.capacity, "fits": d.fits}
    out["communication"] = {"bytes_per_device": d.communication_bytes, "time": d.communication_time}
    if d.step_time is not None:
        out["compute"] = {"time": d.compute_time, "time_bound": d.compute_bound}
    if d.cost is not None:
        out["cost"] = cost_json(d.cost, d.cost_bound, d.price, d.parallel.devices)
    if d.max_batch is not None:
        out["max_batch"] = d.max_batch


def cost_json(
    cost: dict[str, float], bound: dict[str, float] | None, price: float | None, devices: int
) -> dict[str, Any]:
    """``cost``: dollars per million tokens of each kind (``prompt``, ``generated``, ``trained``),
    from the estimate and from the bound, at ``usd_per_device_hour`` on ``devices`` devices."""
    return {
        "per_million_tokens": cost,
        "per_million_tokens_bound": bound,
        "usd_per_device_hour": price,
        "devices": devices,
    }


# A sweep's extra columns, how a table cell shows each, and their CSV names (units: bytes, seconds,
# dollars). Its times are the point's own columns (time, tokens_per_s, ...): the layout's.
SWEEP_CELLS: dict[str, Callable[[Any], str]] = {
    "devices": str,
    "per_device": size,
    "fits": lambda v: "yes" if v else "no",
    "communication_time": seconds,
    **{f"usd_per_1m_{k}_tokens{b}": (lambda v: f"{v:,.4g}") for k in ("prompt", "generated") for b in ("", "_bound")},
    "max_batch": str,
}
SWEEP_CSV_NAMES = {"per_device": "per_device_bytes", "communication_time": "communication_time_s"}


def sweep_header(d: Deployment | None) -> list[str]:
    if d is None:
        return []
    keys = ["devices", "per_device", "fits"]
    if d.step_time is not None:
        keys.append("communication_time")
    for kind in d.cost or {}:  # every kind priced: a generation's prompt and generated tokens
        keys += [f"usd_per_1m_{kind}_tokens", f"usd_per_1m_{kind}_tokens_bound"]
    if d.max_batch is not None:
        keys.append("max_batch")
    return keys


def sweep_row(d: Deployment | None) -> dict[str, Any]:
    """One sweep row's deployment cells."""
    if d is None:
        return {}
    row: dict[str, Any] = {
        "devices": d.parallel.devices,
        "per_device": d.per_device.total,
        "fits": d.fits,
        "communication_time": d.communication_time,
        "max_batch": d.max_batch,
    }
    for kind, value in (d.cost or {}).items():
        row[f"usd_per_1m_{kind}_tokens"] = value
        row[f"usd_per_1m_{kind}_tokens_bound"] = (d.cost_bound or {}).get(kind)
    return row
