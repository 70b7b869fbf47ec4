"""What the LLM path prints of its times: the summary's lines and JSON fields (the estimate beside the
speed of light, per kernels mode), the module table's time columns (the estimate by module), and the
``--by-operator`` report, one row per operator with the kernels it was fused into."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tabulate

from .. import report
from ..errors import OpcountError
from ..llm.generation import GenerationCost
from ..llm.phases import PhaseCost
from ..llm.report import times as kernel_times
from ..llm.report.operators import operator_rows
from ..llm.sweep.figures import GenerationPoint, PhasePoint
from ..report.columns import Column
from ..units import seconds, si, size
from .options import Layout
from .render import write_csv_meta


def by_operator(cost: PhaseCost, layout: Layout, meta: Mapping[str, Any]) -> str:
    """The rows as a table or CSV; counts are headed by their unit (MACs or FLOPs), bytes are each
    operator's as its own kernels (eager), seconds its part of the estimate of the chosen kernels
    (:mod:`opcount.llm.report.times`: the rows sum to the summary's time)."""
    rows = operator_rows(cost)
    if not rows:
        raise OpcountError("--by-operator on an LLM phase needs --hardware: it says which kernel each operator ran in")
    unit = "MACs" if cost.flops.flops_per_mac == 1 else "FLOPs"
    mode = cost.kernels
    if layout.format == "csv":
        write_csv_meta(layout.csv_meta, meta)
        fields = ("operator", "calls", "flops", "bytes_eager", f"time_{mode}", f"bound_{mode}", "kernels")
        names = {"flops": unit.lower(), f"time_{mode}": f"time_{mode}_s", "kernels": f"{mode}_kernels"}
        return report.csv_rows(fields, rows, names=names).rstrip("\n")
    headers = [
        "operator",
        "calls",
        unit,
        "bytes (eager)",
        f"time ({mode})",
        f"bound ({mode})",
        f"{mode} kernels it ran in",
    ]
    cells = [
        [
            r["operator"],
            str(r["calls"]),
            si(r["flops"]),
            size(r["bytes_eager"]),
            seconds(r[f"time_{mode}"]),
            r[f"bound_{mode}"] or "",
            r["kernels"],
        ]
        for r in rows
    ]
    return str(tabulate.tabulate(cells, headers=headers, tablefmt="pipe", disable_numparse=True))


def table_columns(cost: PhaseCost, given: Sequence[str] | None) -> tuple[list[str | Column], dict[str, Any] | None]:
    """The module table's columns and the analyses they read: with hardware, ``time``, ``time_share``
    and ``bound`` are the estimate of the chosen kernels attributed to modules
    (:mod:`opcount.llm.report.times`: the whole model's row is the summary's time), headed by the mode."""
    if cost.roofline is None or cost.plan is None:
        return list(given or ("params", "flops")), None
    estimate = kernel_times.columns(cost.kernels)
    keys = given or ("params", "flops", "time", "time_share", "bound")
    extra = {"roofline": cost.roofline, kernel_times.ROLE: kernel_times.KernelTimes(cost)}
    return [estimate.get(k, k) for k in keys], extra


def time_lines(p: PhaseCost, gen: GenerationCost | None) -> list[str]:
    """The summary's lines of times (none without hardware): each estimate beside its speed of light."""
    if p.roofline is None:
        return []
    hw = f"{p.roofline.hardware.name}, {p.kernels} kernels"
    if gen is None and p.phase == "prefill":
        return [
            f"  {hw}: time to first token {seconds(p.time)}, speed of light {seconds(p.time_bound)} "
            f"({p.bound}-bound); {p.tokens_per_s:,.0f} prompt tokens/s (at most {p.tokens_per_s_bound:,.0f})"
        ]
    if gen is None:
        return [
            f"  {hw}: {seconds(p.time)} per step, speed of light {seconds(p.time_bound)} ({p.bound}-bound); "
            f"{p.tokens_per_s:,.1f} tokens/s (at most {p.tokens_per_s_bound:,.1f})"
        ]
    lines = [
        f"  {hw}: time to first token {seconds(gen.time_to_first_token)}, speed of light "
        f"{seconds(gen.time_to_first_token_bound)} ({p.bound}-bound)"
    ]
    if gen.gen_len:
        step = gen.last_step.bound if gen.last_step is not None else "?"
        lines.append(
            f"  {hw}: time per output token {seconds(gen.time_per_output_token)}, speed of light "
            f"{seconds(gen.time_per_output_token_bound)} ({step}-bound at the last step); "
            f"{gen.tokens_per_s:,.1f} tokens/s (at most {gen.tokens_per_s_bound:,.1f}); "
            f"whole generation {seconds(gen.time)} (speed of light {seconds(gen.time_bound)})"
        )
    return lines


def time_fields(p: PhaseCost | PhasePoint, gen: GenerationCost | GenerationPoint | None) -> dict[str, Any]:
    """The JSON fields of times (none without hardware): each with its ``_bound``; a traced phase's
    or a swept point's (:mod:`opcount.llm.sweep.figures`) alike."""
    hw = (None if p.roofline is None else p.roofline.hardware) if isinstance(p, PhaseCost) else p.hardware
    if hw is None:
        return {}
    out: dict[str, Any] = {"hardware": hw.name, "kernels": p.kernels}
    if gen is None:
        return out | {
            "time": p.time,
            "time_bound": p.time_bound,
            "bound": p.bound,
            "tokens_per_s": p.tokens_per_s,
            "tokens_per_s_bound": p.tokens_per_s_bound,
        }
    return out | {
        "time_to_first_token": gen.time_to_first_token,
        "time_to_first_token_bound": gen.time_to_first_token_bound,
        "time_per_output_token": gen.time_per_output_token,
        "time_per_output_token_bound": gen.time_per_output_token_bound,
        "tokens_per_s": gen.tokens_per_s,
        "tokens_per_s_bound": gen.tokens_per_s_bound,
        "time": gen.time,
        "time_bound": gen.time_bound,
    }
