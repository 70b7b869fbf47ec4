"""The sparsity columns of every report table, tree and export (``sparse_flops``, ``sparse_time``,
``speedup``, ``sparsity``): ``module_table(flops, columns=("flops", "sparse_flops", "speedup"),
extra={"sparsity": report})``. Importing :mod:`opcount.sparsity` registers them."""

from __future__ import annotations

from typing import Any

from ..report.columns import COLUMNS, Column, register_column
from ..rollup import grouped
from ..units import format_number, seconds
from .report import SparsityReport, speedup_ratio


def _sparse_flop_cuts(report: SparsityReport) -> dict[str, dict[str, float]]:
    """FLOPs each module (and operator in it) no longer does, in the report's flops-per-MAC convention."""
    cuts: dict[str, dict[str, float]] = {}
    for owner, weights in grouped((w.dense.layer.owners, w) for w in report.weights).items():
        ops = cuts[owner] = {}
        for w in weights:
            ops[w.dense.layer.op] = ops.get(w.dense.layer.op, 0.0) + w.dense_flops - w.sparse_flops
    return cuts


def _sparse_flops_modules(s: Any) -> dict[str, Any]:
    cuts = _sparse_flop_cuts(s.get("sparsity"))
    return {name: v - sum(cuts.get(name, {}).values()) for name, v in s.flops.by_module().items()}


def _sparse_flops_operators(s: Any) -> dict[str, dict[str, Any]]:
    cuts = _sparse_flop_cuts(s.get("sparsity"))
    return {
        m: {op: v - cuts.get(m, {}).get(op, 0.0) for op, v in ops.items()}
        for m, ops in s.flops.by_module_and_operator().items()
    }


def _sparse_time_modules(s: Any) -> dict[str, Any]:
    return {name: summary.time for name, summary in s.get("sparsity").sparse.by_module().items()}


def _sparse_time_operators(s: Any) -> dict[str, dict[str, Any]]:
    rows = s.get("sparsity").sparse.by_module_and_operator()
    return {m: {op: summary.time for op, summary in ops.items()} for m, ops in rows.items()}


def _speedup_modules(s: Any) -> dict[str, Any]:
    return {name: speedup_ratio(d.time, sp.time) for name, (d, sp) in s.get("sparsity").by_module().items()}


def _speedup_operators(s: Any) -> dict[str, dict[str, Any]]:
    report: SparsityReport = s.get("sparsity")
    dense, sparse = report.dense.by_module_and_operator(), report.sparse.by_module_and_operator()
    return {m: {op: speedup_ratio(d.time, sparse[m][op].time) for op, d in ops.items()} for m, ops in dense.items()}


def _speedup_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else f"{x:.3g}x"


def _level_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else f"{100 * x:.1f}%"


def _time_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else seconds(x)


def _register_columns() -> None:
    def count_cell(x: Any, fmt: Any) -> str:
        return "" if x is None else format_number(x, fmt)

    columns = (
        Column(
            "sparse_flops",
            "#sparse flops",
            ("flops", "sparsity"),
            _sparse_flops_modules,
            _sparse_flops_operators,
            count_cell,
        ),
        Column("sparse_time", "sparse time", ("sparsity",), _sparse_time_modules, _sparse_time_operators, _time_cell),
        Column(
            "speedup", "speedup", ("sparsity",), _speedup_modules, _speedup_operators, _speedup_cell, additive=False
        ),
        Column(
            "sparsity",
            "% zero weights",
            ("sparsity",),
            lambda s: s.get("sparsity").module_levels(),
            None,
            _level_cell,
            additive=False,
        ),
    )
    for column in columns:
        if column.key not in COLUMNS:
            register_column(column)


_register_columns()
