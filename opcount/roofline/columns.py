"""The roofline's report columns: ``time``, ``time_share``, ``bound`` and ``unit``.

Registered with :func:`opcount.report.register_column` when :mod:`opcount.roofline` is imported, so
``module_table(flops, columns=("flops", "time", "bound"), extra={"roofline": report})`` shows a
:class:`~opcount.roofline.RooflineReport`'s times beside the other analyses' columns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..units import seconds
from .report import RooflineReport, Summary


def _seconds_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else seconds(x)


def _text_cell(x: Any, fmt: Any) -> str:
    return "" if x is None else str(x)


def _percent_cell(x: Any, fmt: Any) -> str:
    return "" if x is None else f"{x:.1f}%"


def _module_values(attr: Callable[[Summary, float], Any]) -> Callable[[Any], dict[str, Any]]:
    def values(sources: Any) -> dict[str, Any]:
        report: RooflineReport = sources.get("roofline")
        total = report.total_time
        return {name: attr(s, total) for name, s in report.by_module().items()}

    return values


def _operator_values(attr: Callable[[Summary, float], Any]) -> Callable[[Any], dict[str, dict[str, Any]]]:
    def values(sources: Any) -> dict[str, dict[str, Any]]:
        report: RooflineReport = sources.get("roofline")
        total = report.total_time
        return {m: {op: attr(s, total) for op, s in ops.items()} for m, ops in report.by_module_and_operator().items()}

    return values


def _register_columns() -> None:
    from ..report.columns import COLUMNS, Column, register_column

    specs: list[tuple[str, str, Callable[[Summary, float], Any], Callable[[Any, Any], str], bool]] = [
        ("time", "time", lambda s, total: s.time, _seconds_cell, True),
        ("time_share", "% time", lambda s, total: 100 * s.time / total if total > 0 else None, _percent_cell, False),
        ("bound", "bound", lambda s, total: s.limited_by or None, _text_cell, False),
        ("unit", "unit", lambda s, total: "+".join(s.units) or None, _text_cell, False),
    ]
    for key, header, attr, render, additive in specs:
        if key not in COLUMNS:
            register_column(
                Column(key, header, ("roofline",), _module_values(attr), _operator_values(attr), render, additive)
            )


_register_columns()
