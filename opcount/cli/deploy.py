"""The command line's deployments on the LLM path (``--tp --pp --ep --dp --micro-batches``, ``--price``,
``--max-batch``, ``--reserve``, as :mod:`opcount.cli.flags.deploy` parsed and checked them): each layout
checked against the model built, a point's deployment priced (:mod:`opcount.llm.deploy.deployment` computes),
and the lines and JSON fields it adds to a report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..hardware.lookup import Hardware
from ..llm.causal_lm import CausalLM
from ..llm.deploy.deployment import Deployment, Placement
from ..llm.generation import GenerationCost
from ..llm.phases import PhaseCost
from ..units import seconds, size
from .flags.deploy import SWEEPABLE, dispatch, layout, swept_layouts
from .options import LLMOptions


def check_model(llm: CausalLM, flags: LLMOptions) -> None:
    """Every layout of the run against the model (heads, layers, experts), before anything is traced."""
    d = flags.deploy
    if not d.given and not any(k in SWEEPABLE for k, _ in flags.sweep):
        return
    for values in swept_layouts(flags):
        Placement(llm, layout(d, values))


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
    if not d.given and not set(values) & set(SWEEPABLE):
        return None
    # CausalLM.deploy traces a pipeline's micro-batch as the phase was asked (kernels, FLOP convention, hardware)
    return llm.deploy(
        phase,
        layout(d, values),
        hardware=hardware,
        price=d.price,
        reserve=d.reserve,
        max_batch=d.max_batch,
        generation=generation,
        dispatch=dispatch(d),
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
        if d.overlapped_time is not None:
            timed += f" ({seconds(d.overlapped_time)} of it overlapped with the kernels: two-batch overlap)"
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
    if d.overlapped_time is not None:  # two-batch overlap: the seconds hidden under the kernels, the bound's
        out["communication"] |= {"overlapped": d.overlapped_time, "time_bound": d.communication_time_bound}
    if d.step_time is not None:
        out["compute"] = {"time": d.compute_time, "time_bound": d.compute_time_bound}
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
