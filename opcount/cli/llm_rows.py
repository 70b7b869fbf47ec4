"""An LLM point's figures as a JSON object, and a sweep's points computed and rendered as rows
(a table, JSON or CSV) for ``opcount llm:NAME --sweep`` (:mod:`opcount.cli.llm`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import tabulate

from .. import report
from ..llm.causal_lm import CausalLM
from ..llm.deploy import deployment as deploy_lib
from ..llm.generation import GenerationCost
from ..llm.phases import PhaseCost, PhaseRequest
from ..llm.sweep.figures import GenerationValues, PhaseValues
from ..llm.sweep.points import generations_of, points_of
from ..report.columns import flops_unit
from ..report.provenance import export_meta
from ..units import seconds, si, size
from . import deploy
from .llm_times import time_fields
from .options import Rendering
from .render import write_csv_meta


@dataclass
class SweepRow:
    """One point of a sweep: a phase, or a whole generation, as figures (opcount.llm.sweep.points)."""

    values: dict[str, int]
    phase: PhaseValues
    generation: GenerationValues | None = None
    deployment: deploy_lib.Deployment | None = None

    @classmethod
    def of(
        cls,
        values: dict[str, int],
        phase: PhaseCost,
        generation: GenerationCost | None,
        deployment: deploy_lib.Deployment | None,
    ) -> SweepRow:
        """A point traced on its own (a deployment sweep), as figures."""
        gen = None if generation is None else GenerationValues.of(generation)
        return cls(values, PhaseValues.of(phase), gen, deployment)


def sweep_points(llm: CausalLM, combos: Sequence[dict[str, int]], request: PhaseRequest) -> list[SweepRow]:
    """Every point of a sweep of ``request``, fitted from a few traces (equal to tracing each,
    :mod:`opcount.llm.sweep.points`)."""
    if "gen_len" in combos[0]:
        gens = generations_of(llm, request, [(v["batch"], v["seq_len"], v["gen_len"]) for v in combos])
        return [SweepRow(v, g.prefill, g) for v, g in zip(combos, gens, strict=True)]
    points = [(v["batch"], v["seq_len"], v["kv_len"]) for v in combos]
    return [SweepRow(v, p) for v, p in zip(combos, points_of(llm, request, points), strict=True)]


def point_json(
    values: dict[str, int],
    p: PhaseValues,
    gen: GenerationValues | None,
    label: str,
    parameters: int,
    active: int = 0,
    deployment: deploy_lib.Deployment | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": label,
        "phase": "generation" if gen is not None else p.phase,
        **values,
        "precision": {
            "weight": p.precision.weight,
            "act": p.precision.act,
            "kv": p.precision.kv_dtype if p.precision.holds_kv else None,  # None: the model holds no keys and values
            "state": p.precision.state,  # None: the model holds no recurrent state
            "label": p.precision.label(),
        },
        "parameters": {"total": parameters, "active": active},
        "flops": p.flops if gen is None else gen.flops,
        "flops_per_mac": p.flops_per_mac,
        "memory": (p.memory if gen is None else gen.memory).as_dict(),
    }
    out |= time_fields(p, gen, deployment)  # under a layout the layout's, one device's in single_device
    deploy.add_json(out, deployment)
    return out


SWEEP_COLUMNS = ("flops", "weights", "kv_cache", "activations", "time", "time_bound", "tokens_per_s", "bound")
# A sweep's CSV headers with their units (the sizes are bytes, the times seconds).
SWEEP_CSV_NAMES = {
    "weights": "weights_bytes",
    "kv_cache": "kv_cache_bytes",
    "activations": "activations_bytes",
    "time_to_first_token": "time_to_first_token_s",
    "time_per_output_token": "time_per_output_token_s",
    "time_bound": "time_bound_s",
    "time_to_first_token_bound": "time_to_first_token_bound_s",
    "time_per_output_token_bound": "time_per_output_token_bound_s",
}


def sweep_report(points: Sequence[SweepRow], rendering: Rendering, label: str, model: str) -> str:
    keys = list(points[0].values)
    rows = [point_json(pt.values, pt.phase, pt.generation, label, 0, 0, pt.deployment) for pt in points]
    if rendering.format == "json":
        return json.dumps(
            {"model": label, "points": [{k: v for k, v in r.items() if k != "parameters"} for r in rows]}, indent=2
        )
    has_time = points[0].phase.hardware is not None
    gen = points[0].generation is not None
    time_keys = (
        [f"{k}{b}" for k in ("time_to_first_token", "time_per_output_token", "tokens_per_s") for b in ("", "_bound")]
        if gen
        else ["time", "time_bound", "tokens_per_s", "tokens_per_s_bound"]
    )
    header = [*keys, "flops", "weights", "kv_cache", "activations", *(time_keys if has_time else [])]
    if has_time and not gen:
        header.append("bound")
    header += deploy.sweep_header(points[0].deployment)
    flat = [{**r, **r["memory"], **deploy.sweep_row(pt.deployment)} for r, pt in zip(rows, points, strict=True)]
    if rendering.format == "csv":  # a missing value (None) is an empty cell, as in every CSV export
        first = points[0].phase.cost  # the first point is always traced (opcount.llm.sweep.points)
        if first is not None:
            write_csv_meta(rendering.csv_meta, export_meta(first.flops, model=model, roofline=first.roofline))
        names = {
            **report.csv_fields(header, points[0].phase.flops_per_mac),
            **SWEEP_CSV_NAMES,
            **deploy.SWEEP_CSV_NAMES,
        }
        return report.csv_rows(header, flat, names=names, raw=rendering.csv_raw).rstrip("\n")
    cells = [[_cell(h, r.get(h)) for h in header] for r in flat]
    unit = flops_unit(points[0].phase.flops_per_mac)  # a count's header says its unit
    shown = [unit if h == "flops" else h for h in header]
    return _pipe(shown, cells) + f"\n\n{label}: {len(points)} points, {points[0].phase.precision.label()}"


def _cell(key: str, value: Any) -> str:
    if value is None:
        return ""
    if key in deploy.SWEEP_CELLS:
        return deploy.SWEEP_CELLS[key](value)
    if key in ("weights", "kv_cache", "activations"):
        return size(value)
    if key.startswith("time"):
        return seconds(value)
    if key.startswith("tokens_per_s"):
        return f"{value:,.1f}"
    if key == "flops":
        return si(value)
    return str(value)


def _pipe(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return str(tabulate.tabulate(rows, headers=list(header), tablefmt="pipe", disable_numparse=True))
