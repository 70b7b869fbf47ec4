"""The command line's deployments on the LLM path (``--tp --pp --ep --dp --micro-batches``, ``--price``,
``--max-batch``, ``--reserve``, as :mod:`opcount.cli.flags.deploy` parsed and checked them): each layout
checked against the model built, a point's deployment priced (:mod:`opcount.llm.deploy.deployment` computes),
and the lines and JSON fields it adds to a report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ..hardware.lookup import Hardware
from ..llm.causal_lm import CausalLM
from ..llm.deploy.deployment import Deployment, Placement, deploy
from ..llm.generation import GenerationCost
from ..llm.phases import PhaseCost
from ..units import seconds, size
from .flags.deploy import SWEEPABLE, layout, swept_layouts
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
    parallel = layout(d, values)
    micro = None
    if parallel.micro_batches > 1:
        # the phase as it was asked (kernels, FLOP convention, hardware), at one micro-batch
        micro = llm.cost(replace(phase.request, batch=phase.batch // parallel.micro_batches))
    return deploy(
        llm,
        phase,
        parallel,
        hardware=hardware,
        price=d.price,
        reserve=d.reserve,
        micro=micro,
        max_batch=d.max_batch,
        generation=generation,
    )


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------
def summary_lines(d: Deployment) -> list[str]:
    """The deployment in a few lines: layout, memory per device against capacity, communication, time, cost."""
    m = d.per_device
    lines = [
        f"  layout: {d.parallel.label()} (the lines above: one device); per device: weights {size(m.weights)}, KV cache {size(m.kv_cache)}, "
        f"activations {size(m.activations)}, total {size(m.total)}"
    ]
    if d.capacity is not None:
        verdict = "fits" if d.fits else f"does not fit: needs >= {d.needs} x {d.hardware}"
        lines.append(
            f"  capacity: {size(d.capacity)} per device ({d.reserve:g} kept for the engine's workspace): {verdict}"
        )
    if d.parallel.tp * d.parallel.pp * d.parallel.ep > 1:  # a layout that communicates
        timed = f", {seconds(d.communication_time)}" if d.communication_time is not None else ""
        lines.append(f"  communication: {size(d.communication_bytes)} sent per device per step{timed}")
    if d.time is not None and d.time_bound is not None:
        devices = f"{d.parallel.devices} device{'s' if d.parallel.devices > 1 else ''}"
        lines.append(
            f"  per device and {'output token' if d.generated else 'step'}: estimate {seconds(d.compute_time)} kernels "
            f"+ {seconds(d.communication_time)} communication (not overlapped) = {seconds(d.time)}, "
            f"{d.tokens_per_s:,.1f} tokens/s on {devices}; bound {seconds(d.time_bound)}, {d.tokens_per_s_bound:,.1f} tokens/s"
        )
    if d.prefill_time is not None:
        lines.append(
            f"  per device: time to first token {seconds(d.prefill_time)} (bound {seconds(d.prefill_time_bound)}), "
            f"whole generation {seconds(d.generation_time)} (bound {seconds(d.generation_time_bound)})"
        )
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
    """The deployment's JSON into a point's: ``parallel``; ``memory`` gains ``per_device``,
    ``capacity`` and ``fits``; ``communication``, ``time_per_device``, ``cost``, ``max_batch``."""
    if d is None:
        return
    out["parallel"] = d.parallel.as_dict()
    memory = out.setdefault("memory", {})
    memory |= {"per_device": d.per_device.as_dict(), "capacity": d.capacity, "fits": d.fits}
    out["communication"] = {"bytes_per_device": d.communication_bytes, "time": d.communication_time}
    if d.time is not None:
        out["time_per_device"] = {
            "compute": d.compute_time,
            "communication": d.communication_time,
            "total": d.time,
            "time_bound": d.time_bound,
        }
        if d.prefill_time is not None:
            out["time_per_device"] |= {
                "time_to_first_token": d.prefill_time,
                "time_to_first_token_bound": d.prefill_time_bound,
                "generation": d.generation_time,
                "generation_bound": d.generation_time_bound,
            }
        out["tokens_per_s_all_devices"] = d.tokens_per_s
        out["tokens_per_s_all_devices_bound"] = d.tokens_per_s_bound
    if d.cost is not None:
        out["cost"] = {
            "per_million_tokens": d.cost,
            "per_million_tokens_bound": d.cost_bound,
            "usd_per_device_hour": d.price,
            "devices": d.parallel.devices,
        }
    if d.max_batch is not None:
        out["max_batch"] = d.max_batch


# A sweep's extra columns, how a table cell shows each, and their CSV names (units: bytes, seconds, dollars).
SWEEP_CELLS: dict[str, Callable[[Any], str]] = {
    "devices": str,
    "per_device": size,
    "fits": lambda v: "yes" if v else "no",
    "communication_time": seconds,
    "step_time": seconds,
    "step_time_bound": seconds,
    "tokens_per_s_all_devices": lambda v: f"{v:,.1f}",
    "usd_per_1m_tokens": lambda v: f"{v:,.4g}",
    "usd_per_1m_tokens_bound": lambda v: f"{v:,.4g}",
    "max_batch": str,
}
SWEEP_CSV_NAMES = {
    "per_device": "per_device_bytes",
    "communication_time": "communication_time_s",
    "step_time": "step_time_s",
    "step_time_bound": "step_time_bound_s",
}


def sweep_header(d: Deployment | None) -> list[str]:
    if d is None:
        return []
    keys = ["devices", "per_device", "fits"]
    if d.time is not None:
        keys += ["communication_time", "step_time", "step_time_bound", "tokens_per_s_all_devices"]
    if d.cost is not None:
        keys += ["usd_per_1m_tokens", "usd_per_1m_tokens_bound"]
    if d.max_batch is not None:
        keys.append("max_batch")
    return keys


def sweep_row(d: Deployment | None) -> dict[str, Any]:
    """One sweep row's deployment cells (a generation's cost: per generated token)."""
    if d is None:
        return {}
    cost = None if d.cost is None else d.cost.get("generated", d.cost.get("prompt"))
    bound = None if d.cost_bound is None else d.cost_bound.get("generated", d.cost_bound.get("prompt"))
    return {
        "devices": d.parallel.devices,
        "per_device": d.per_device.total,
        "fits": d.fits,
        "communication_time": d.communication_time,
        "step_time": d.time,
        "step_time_bound": d.time_bound,
        "tokens_per_s_all_devices": d.tokens_per_s,
        "usd_per_1m_tokens": cost,
        "usd_per_1m_tokens_bound": bound,
        "max_batch": d.max_batch,
    }
