"""What the LLM path prints of its times: the summary's lines and JSON fields (the estimate beside the
speed of light, per kernels mode), the module table's time columns (the estimate by module), and the
``--by-operator`` report, one row per operator with the kernels it was fused into.

One schema: ``time``, ``time_bound``, ``bound``, ``time_to_first_token``, ``time_per_output_token``,
``tokens_per_s`` (each with its ``_bound``) are what the deployment the user described does: a
single device without a layout, the layout's (:class:`~opcount.llm.deploy.figures.Deployment`) with
one. Under a layout the traced device's own figures are shown too, named ``single_device`` (a JSON
object, a summary line, the module table's and ``--by-operator``'s time columns)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

import tabulate

from .. import report
from ..errors import OpcountError
from ..llm.deploy.figures import Deployment
from ..llm.generation import GenerationCost
from ..llm.phases import PhaseCost
from ..llm.report import times as kernel_times
from ..llm.report.operators import operator_rows
from ..llm.sweep.figures import GenerationValues, PhaseValues
from ..report.columns import Column
from ..units import seconds, si, size
from .options import Rendering
from .render import write_csv_meta

SINGLE_DEVICE = "single_device"  # the name of one device's figures under a layout: JSON key, column suffix, line


def _single(key: str, single_device: bool) -> str:
    return f"{key}_{SINGLE_DEVICE}" if single_device else key


def operator_rows_named(cost: PhaseCost, single_device: bool = False) -> list[dict[str, Any]]:
    """``--by-operator``'s rows; under a layout their times are one device's, keyed so (``time_fused_single_device``)."""
    mode = cost.kernels
    names = {
        f"time_{mode}": _single(f"time_{mode}", single_device),
        f"bound_{mode}": _single(f"bound_{mode}", single_device),
    }
    return [{names.get(k, k): v for k, v in row.items()} for row in operator_rows(cost)]


def by_operator(cost: PhaseCost, rendering: Rendering, meta: Mapping[str, Any], single_device: bool = False) -> str:
    """The rows as a table or CSV; counts are headed by their unit (MACs or FLOPs), bytes are each
    operator's as its own kernels (eager), seconds its part of the estimate of the chosen kernels
    (:mod:`opcount.llm.report.times`: the rows sum to the single device's time), headed
    ``single device`` under a layout."""
    rows = operator_rows_named(cost, single_device)
    if not rows:
        raise OpcountError("--by-operator on an LLM phase needs --hardware: it says which kernel each operator ran in")
    unit = "MACs" if cost.flops.flops_per_mac == 1 else "FLOPs"
    mode = cost.kernels
    time, bound = _single(f"time_{mode}", single_device), _single(f"bound_{mode}", single_device)
    if rendering.format == "csv":
        write_csv_meta(rendering.csv_meta, meta)
        fields = ("operator", "calls", "flops", "bytes_eager", time, bound, "kernels")
        names = {"flops": unit.lower(), time: f"{time}_s", "kernels": f"{mode}_kernels"}
        return report.csv_rows(fields, rows, names=names, raw=rendering.csv_raw).rstrip("\n")
    which = f"{mode}, single device" if single_device else mode
    headers = [
        "operator",
        "calls",
        unit,
        "bytes (eager)",
        f"time ({which})",
        f"bound ({which})",
        f"{mode} kernels it ran in",
    ]
    cells = [
        [
            r["operator"],
            str(r["calls"]),
            si(r["flops"]),
            size(r["bytes_eager"]),
            seconds(r[time]),
            r[bound] or "",
            r["kernels"],
        ]
        for r in rows
    ]
    return str(tabulate.tabulate(cells, headers=headers, tablefmt="pipe", disable_numparse=True))


def table_columns(
    cost: PhaseCost, given: Sequence[str] | None, single_device: bool = False
) -> tuple[list[str | Column], dict[str, Any] | None]:
    """The module table's columns and the analyses they read: with hardware, ``time``, ``time_share``
    and ``bound`` are the estimate of the chosen kernels attributed to modules
    (:mod:`opcount.llm.report.times`: the whole model's row is the single device's time), headed by
    the mode, and under a layout by ``single device`` (their keys ``time_fused_single_device``...)."""
    if cost.roofline is None or cost.schedule is None:
        return list(given or ("params", "flops")), None
    estimate = kernel_times.columns(cost.kernels)
    if single_device:
        estimate = {
            k: replace(c, key=_single(c.key, True), header=c.header.replace(")", ", single device)"))
            for k, c in estimate.items()
        }
    keys = given or ("params", "flops", "time", "time_share", "bound")
    extra = {"roofline": cost.roofline, kernel_times.ROLE: kernel_times.KernelTimes(cost)}
    return [estimate.get(k, k) for k in keys], extra


class PhaseTimes(Protocol):
    """A phase's times: a traced phase's, a swept point's, a deployment's."""

    @property
    def time(self) -> float | None: ...
    @property
    def time_bound(self) -> float | None: ...
    @property
    def limited_by(self) -> str | None: ...
    @property
    def tokens_per_s(self) -> float | None: ...
    @property
    def tokens_per_s_bound(self) -> float | None: ...


class GenerationTimes(Protocol):
    """A generation's times: a traced generation's, a swept point's, a deployment's."""

    @property
    def time(self) -> float | None: ...
    @property
    def time_bound(self) -> float | None: ...
    @property
    def time_to_first_token(self) -> float | None: ...
    @property
    def time_to_first_token_bound(self) -> float | None: ...
    @property
    def time_per_output_token(self) -> float | None: ...
    @property
    def time_per_output_token_bound(self) -> float | None: ...
    @property
    def tokens_per_s(self) -> float | None: ...
    @property
    def tokens_per_s_bound(self) -> float | None: ...


def time_lines(p: PhaseCost, gen: GenerationCost | None, deployment: Deployment | None = None) -> list[str]:
    """The summary's lines of times (none without hardware): each estimate beside its speed of light,
    the deployment's under a layout (its kernels and collectives apart)."""
    if p.roofline is None:
        return []
    head = f"{p.roofline.hardware.name}, {p.kernels} kernels"
    if deployment is None or deployment.step_time is None:
        return (
            _phase_lines(head, p, p.phase) if gen is None else _generation_lines(head, gen, p.limited_by, gen.last_step)
        )
    layout = deployment.parallel
    if not _alone(deployment):
        head = f"{head}, {layout.label()}"
    parts = ""
    if layout.tp * layout.pp * layout.ep > 1:  # a layout that communicates: its kernels and collectives apart
        overlapped = deployment.overlapped_time
        parts = (
            f" ({seconds(deployment.compute_time)} kernels + {seconds(deployment.communication_time)} communication, "
            + ("not overlapped)" if overlapped is None else f"{seconds(overlapped)} of it overlapped)")
        )
    if gen is None:
        return _phase_lines(head, deployment, p.phase, parts)
    prompt_limited_by = p.limited_by if _alone(deployment) else None  # the prompt's own on one device
    return _generation_lines(head, deployment, prompt_limited_by, deployment if gen.gen_len else None, parts)


def single_device_lines(p: PhaseCost, gen: GenerationCost | None, deployment: Deployment) -> list[str]:
    """Under a layout of several devices (or micro-batches), the traced device's own times, named so."""
    if p.roofline is None or _alone(deployment):
        return []
    head = f"single device ({p.roofline.hardware.name}, {p.kernels} kernels)"
    return _phase_lines(head, p, p.phase) if gen is None else _generation_lines(head, gen, p.limited_by, gen.last_step)


def _alone(deployment: Deployment) -> bool:
    """A layout of one device running the batch whole: its times are the traced device's."""
    return deployment.parallel.single and deployment.parallel.micro_batches == 1


def _phase_lines(head: str, f: PhaseTimes, phase: str, parts: str = "") -> list[str]:
    if phase == "prefill":
        return [
            f"  {head}: time to first token {seconds(f.time)}{parts}, speed of light {seconds(f.time_bound)} "
            f"({f.limited_by}-bound); {f.tokens_per_s:,.0f} prompt tokens/s (at most {f.tokens_per_s_bound:,.0f})"
        ]
    return [
        f"  {head}: {seconds(f.time)} per step{parts}, speed of light {seconds(f.time_bound)} ({f.limited_by}-bound); "
        f"{f.tokens_per_s:,.1f} tokens/s (at most {f.tokens_per_s_bound:,.1f})"
    ]


def _generation_lines(
    head: str, f: GenerationTimes, prompt_limited_by: str | None, last: PhaseTimes | None, parts: str = ""
) -> list[str]:
    """``prompt_limited_by``: what limits the prompt's speed of light, where known; ``last``: the last
    decode step's figures (what limits it), None without a decode step."""
    limit_note = f" ({prompt_limited_by}-bound)" if prompt_limited_by else ""
    lines = [
        f"  {head}: time to first token {seconds(f.time_to_first_token)}, speed of light "
        f"{seconds(f.time_to_first_token_bound)}{limit_note}"
    ]
    if last is not None:
        lines.append(
            f"  {head}: time per output token {seconds(f.time_per_output_token)}{parts}, speed of light "
            f"{seconds(f.time_per_output_token_bound)} ({last.limited_by}-bound at the last step); "
            f"{f.tokens_per_s:,.1f} tokens/s (at most {f.tokens_per_s_bound:,.1f}); "
            f"whole generation {seconds(f.time)} (speed of light {seconds(f.time_bound)})"
        )
    return lines


def time_fields(
    p: PhaseCost | PhaseValues, gen: GenerationCost | GenerationValues | None, deployment: Deployment | None = None
) -> dict[str, Any]:
    """The JSON fields of times (none without hardware): each with its ``_bound``; a traced phase's
    or a swept point's (:mod:`opcount.llm.sweep.figures`) alike; under a layout the deployment's,
    the traced device's own in ``single_device``."""
    hw = (None if p.roofline is None else p.roofline.hardware) if isinstance(p, PhaseCost) else p.hardware
    if hw is None:
        return {}
    out: dict[str, Any] = {"hardware": hw.name, "kernels": p.kernels}
    own = phase_fields(p) if gen is None else generation_fields(gen)
    if deployment is None or deployment.step_time is None:
        return out | own
    return out | (phase_fields(deployment) if gen is None else generation_fields(deployment)) | {SINGLE_DEVICE: own}


def phase_fields(f: PhaseTimes) -> dict[str, Any]:
    """A phase's times, from a phase or a deployment: they share the names."""
    return {
        "time": f.time,
        "time_bound": f.time_bound,
        "bound": f.limited_by,
        "tokens_per_s": f.tokens_per_s,
        "tokens_per_s_bound": f.tokens_per_s_bound,
    }


def generation_fields(f: GenerationTimes) -> dict[str, Any]:
    """A generation's times, from a generation or a deployment: they share the names."""
    return {
        "time_to_first_token": f.time_to_first_token,
        "time_to_first_token_bound": f.time_to_first_token_bound,
        "time_per_output_token": f.time_per_output_token,
        "time_per_output_token_bound": f.time_per_output_token_bound,
        "tokens_per_s": f.tokens_per_s,
        "tokens_per_s_bound": f.tokens_per_s_bound,
        "time": f.time,
        "time_bound": f.time_bound,
    }
