"""From the samples of every profiled pass to the report: one statistic per row across passes
(``midmean``, ``median`` or ``mean``, see :mod:`opcount.profiling`), each row paired with the
roofline's prediction, custom operators' breakdown placed below them.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..scopes import ModuleTree
from .events import Key, Walker
from .report import ProfileReport, ProfileRow

if TYPE_CHECKING:
    from ..roofline import RooflineReport

__all__ = ["STATISTICS", "build_report"]

STATISTICS = ("midmean", "median", "mean")


def _aggregate(samples: Sequence[Mapping[Key, float]], statistic: str) -> dict[Key, float]:
    keys = dict.fromkeys(k for s in samples for k in s)
    if statistic == "median":
        return {k: statistics.median(s.get(k, 0.0) for s in samples) for k in keys}
    chosen = list(samples)
    if statistic == "midmean":
        order = sorted(range(len(samples)), key=lambda i: samples[i].get(("module", ""), 0.0))
        cut = len(order) // 4  # keep the middle half (everything below 4 passes)
        chosen = [samples[i] for i in order[cut : len(order) - cut]]
    return {k: sum(s.get(k, 0.0) for s in chosen) / len(chosen) for k in keys}


def build_report(
    model: nn.Module,
    tree: ModuleTree,
    device: torch.device,
    samples: Sequence[Mapping[Key, float]],
    walker: Walker,
    wall: float,
    repeats: int,
    warmup: int,
    statistic: str,
    predicted: RooflineReport | None,
) -> ProfileReport:
    """The report of ``samples`` (one per pass, from ``walker``): modules in registration order,
    outermost operators slowest first with custom operators' breakdown below them."""
    v = _aggregate(samples, statistic)
    pm = predicted.by_module() if predicted is not None else {}
    po = predicted.by_operator() if predicted is not None else {}

    def pred(summary: Any, missing: float | None = None) -> dict[str, float | None]:
        # A module without roofline layers costs nothing. An operator without any costs nothing
        # if declared free (a view); otherwise the roofline has not seen it or has no formula
        # for it (a custom operator and its inside, an operator the tracer folded away): unknown.
        if predicted is None:
            return {}
        if summary is None:
            return {"predicted": missing, "flops": missing, "bytes": missing}
        return {"predicted": summary.time, "flops": summary.flops, "bytes": summary.bytes}

    modules = {}
    for name in tree.names:
        calls = v.get(("calls", name), 0.0)
        modules[name] = ProfileRow(
            name,
            "module",
            type(tree.module(name)).__name__,
            tree.parent(name),
            calls,
            v.get(("module", name), 0.0),
            v.get(("self", name)) if calls else None,
            **pred(pm.get(name), 0.0),
        )
    breakdown: dict[str, list[ProfileRow]] = {}
    for k, t in v.items():
        if k[0] in ("inner", "python"):
            parent = walker.parents[k[1]]
            # A custom operator's own (Python) time runs once per call of the operator.
            calls = v.get(("op_calls", k[1] if k[0] == "inner" else parent), 0.0)
            extra = pred(po.get(k[1])) if k[0] == "inner" else {}  # the inside of a custom op: unknown
            breakdown.setdefault(parent, []).append(ProfileRow(k[1], k[0], "", parent, calls, t, **extra))
    operators: dict[str, ProfileRow] = {}

    def place(row: ProfileRow) -> None:
        operators[row.name] = row
        for sub in sorted(breakdown.get(row.name, ()), key=lambda r: (r.kind == "python", -r.measured)):
            place(sub)

    tops = [
        ProfileRow(
            k[1],
            "operator",
            "",
            None,
            v.get(("op_calls", k[1]), 0.0),
            t,
            **pred(po.get(k[1]), 0.0 if k[1] in walker.free else None),
        )
        for k, t in v.items()
        if k[0] == "op"
    ]
    for row in sorted(tops, key=lambda r: -r.measured):
        place(row)
    for name, s in po.items():  # predicted, never measured (e.g. folded away by the tracer)
        if name not in operators:
            operators[name] = ProfileRow(name, "operator", "", None, 0.0, 0.0, **pred(s))
    module_ops: dict[str, dict[str, float]] = {}
    for k, t in v.items():
        if k[0] == "module_op":
            module_ops.setdefault(k[1], {})[k[2]] = t
    return ProfileReport(
        type(model).__name__,
        device.type,
        modules,
        operators,
        module_ops,
        wall,
        repeats,
        warmup,
        statistic,
        tree,
        predicted,
    )
