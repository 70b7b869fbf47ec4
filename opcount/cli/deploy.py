"""The command line's deployments on the LLM path (``--tp --pp --ep --dp --micro-batches``, ``--price``,
``--max-batch``, ``--gpu-memory-utilization``, ``--max-batched-tokens``, as :mod:`opcount.cli.flags.deploy`
parsed and checked them): each layout checked against the model built, a point's deployment priced
(:mod:`opcount.llm.deploy.deployment` computes), one device's fit where no layout is given, and the lines
and JSON fields they add to a report."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..hardware.lookup import Hardware
from ..llm.causal_lm import CausalLM
from ..llm.deploy.deployment import Deployment, fit
from ..llm.deploy.figures import Fit
from ..llm.deploy.layout import Parallel
from ..llm.deploy.placement import Placement
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
        Placement.of(llm, layout(d, values))


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
        gpu_memory_utilization=d.gpu_memory_utilization,
        max_batched_tokens=d.max_batched_tokens,
        max_batch=d.max_batch,
        generation=generation,
        dispatch=dispatch(d),
        engine=d.engine,
    )


def fit_alone(
    llm: CausalLM, phase: PhaseCost, generation: GenerationCost | None, flags: LLMOptions, hardware: Hardware | None
) -> Fit | None:
    """One device's fit, where no layout is given: None without a device's memory."""
    if hardware is None or hardware.memory_bytes is None:
        return None
    d = flags.deploy
    return fit(
        llm,
        generation if generation is not None else phase,
        hardware=hardware,
        gpu_memory_utilization=d.gpu_memory_utilization,
        max_batched_tokens=d.max_batched_tokens,
    )


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------
def capacity_line(f: Fit, hardware: str | None) -> str:
    """The fit in one line: the capacity and how it is sized, the verdict, and where it does not fit, a
    layout that does (or the bound searched)."""
    memory = f.capacity / f.gpu_memory_utilization
    chunks = f"; activations of a step of at most {f.max_batched_tokens:,} tokens" if f.chunked else ""
    verdict = "fits"
    if not f.fits:
        verdict = f"does not fit ({size(f.per_device.total)})"
        if f.layout_that_fits is not None:
            verdict += f"; {layout_flags(f.layout_that_fits)} fits ({size(f.layout_per_device or 0)} a device)"
        elif f.reason:
            verdict += f"; {f.reason}"
        else:
            verdict += (
                f"; nor does a layout of up to {f.searched} x {hardware} (--tp within a node, then --pp across nodes)"
            )
    return (
        f"  capacity: {size(f.capacity)} per device ({f.gpu_memory_utilization:g} of its {size(memory)}"
        f"{chunks}): {verdict}"
    )


def layout_flags(p: Parallel) -> str:
    """A layout as the flags that ask for it (``--tp 8 --pp 2``)."""
    return " ".join(f"--{k} {v}" for k, v in (("tp", p.tp), ("pp", p.pp), ("ep", p.ep), ("dp", p.dp)) if v > 1)


def summary_lines(d: Deployment) -> list[str]:
    """The deployment in a few lines: layout, memory per device against capacity, communication,
    cost (its times are the summary's time lines: :func:`opcount.cli.llm_times.time_lines`)."""
    m = d.per_device
    lines = [
        f"  layout: {d.parallel.label()}; per device: weights {size(m.weights)}, KV cache {size(m.kv_cache)}, "
        f"activations {size(m.activations)}, total {size(m.total)}"
    ]
    if d.fit is not None:
        lines.append(capacity_line(d.fit, d.hardware))
    if d.parallel.tp * d.parallel.pp * d.parallel.ep > 1:  # a layout that communicates
        timed = f", {seconds(d.communication_time)}" if d.communication_time is not None else ""
        if d.overlapped_time is not None:
            timed += f" ({seconds(d.overlapped_time)} of it overlapped with the kernels: two-batch overlap)"
        step = "output token" if d.generation else "step"
        lines.append(f"  communication: {size(d.communication_bytes)} sent per device per {step}{timed}")
    if d.engine_terms:
        parts = ", ".join(f"{k} {seconds(v)}" for k, v in d.engine_terms.items() if v)
        lines.append(f"  engine profile: {seconds(d.engine_time)} a step in the estimate ({parts or 'none'})")
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
    ``parallel``; ``memory`` gains ``per_device`` and the fit (:func:`add_fit_json`); ``communication`` and
    ``compute`` (a step's collectives and kernels, which its ``time`` adds), ``cost``, ``max_batch``."""
    if d is None:
        return
    out["parallel"] = d.parallel.as_dict()
    if d.engine_terms:  # seconds a step, each term of the engine profile (opcount.llm.engines.terms)
        out["engine_terms"] = dict(d.engine_terms)
    memory = out.setdefault("memory", {})
    memory |= {"per_device": d.per_device.as_dict(), "capacity": d.capacity, "fits": d.fits}
    if d.fit is not None:
        memory |= d.fit.as_dict()
    out["communication"] = {"bytes_per_device": d.communication_bytes, "time": d.communication_time}
    if d.overlapped_time is not None:  # two-batch overlap: the seconds hidden under the kernels, the bound's
        out["communication"] |= {"overlapped": d.overlapped_time, "time_bound": d.communication_time_bound}
    if d.step_time is not None:
        out["compute"] = {"time": d.compute_time, "time_bound": d.compute_time_bound}
    if d.cost is not None:
        out["cost"] = cost_json(d.cost, d.cost_bound, d.price, d.parallel.devices)
    if d.max_batch is not None:
        out["max_batch"] = d.max_batch


def add_fit_json(out: dict[str, Any], f: Fit | None) -> None:
    """One device's fit into a point's JSON, where no layout is given: ``memory`` gains ``per_device`` (what is
    set against the capacity), ``capacity``, ``fits``, the engine's settings and where it does not fit, the
    layout that does (``layout_that_fits``, null when none of up to ``searched_devices`` does)."""
    if f is not None:
        out.setdefault("memory", {}).update({"per_device": f.per_device.as_dict(), **f.as_dict()})


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
