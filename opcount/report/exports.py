"""Exports: every module and module x operator with exact numbers, as a dict, JSON or CSV
(with what they were computed from), and a markdown table."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tabulate

from ..errors import OpcountValueError
from ..units import COMPACT, NumberFormat, exact
from .columns import COLUMNS, Column, Sources, resolve_columns
from .layout import build_layout, check_max_depth, format_cells
from .tables import operator_rows, operator_table

__all__ = ["csv_rows", "to_csv", "to_dict", "to_json", "to_markdown"]

_EXACT_COLUMNS = ("params", "flops", "activations", "bytes_read", "bytes_written")


def _export_columns(sources: Sources, columns: Sequence[str | Column] | None) -> list[Column]:
    if columns is None:  # every exact statistic the given analyses have
        columns = [k for k in _EXACT_COLUMNS if all(sources.get(r) is not None for r in COLUMNS[k].needs)]
    return resolve_columns(columns, sources)


def to_dict(
    analysis: Any,
    *,
    columns: Sequence[str | Column] | None = None,
    max_depth: int | None = None,
    activations: Any = None,
    memory: Any = None,
    extra: Mapping[str, Any] | None = None,
    meta: Mapping[str, Any] | bool = True,
) -> dict[str, Any]:
    """Every module (to ``max_depth`` levels) and every module x operator, unrounded.

    ``columns`` defaults to the exact statistics available: ``params``, ``flops``, and
    ``activations`` / ``bytes_read`` / ``bytes_written`` when those analyses are given. For an
    additive statistic each module also has ``self_<key>``: its value less its children's (the
    operators it runs itself, and its own parameters); it is never negative in owner mode.

    ``meta``: what the numbers were computed from (:func:`opcount.report.provenance.export_meta`: versions,
    model, inputs, tracer, preset, flops per mac, hardware), under the key ``"meta"``; a mapping
    replaces it, ``False`` leaves it out.
    """
    check_max_depth(max_depth, optional=True)
    sources = Sources(analysis, activations, memory, extra or {})
    chosen = _export_columns(sources, columns)
    values = {c.key: c.modules(sources) for c in chosen}
    layout = build_layout(sources.tree, with_params=False)
    tree = sources.tree
    uncalled = set(analysis.uncalled_modules())
    modules = []
    for name in tree.names:
        depth = layout.depth(name)
        if max_depth is not None and depth > max_depth:
            continue
        row: dict[str, Any] = {
            "name": name,
            "type": type(tree.module(name)).__name__,
            "parent": layout.parent[name],
            "depth": depth,
            "called": name not in uncalled,
        }
        kids = layout.children.get(name, ())
        for c in chosen:
            row[c.key] = exact(values[c.key].get(name, 0 if c.additive else None))
        for c in chosen:
            if c.additive:
                own = values[c.key].get(name, 0) - sum(values[c.key].get(k, 0) for k in kids)
                row["self_" + c.key] = exact(own)
        modules.append(row)
    op_columns = [c for c in chosen if c.operators is not None]
    operators = [
        {"module": name, "operator": op, **{k: exact(x) for k, x in v.items()}}
        for name, op, v in operator_rows(sources, op_columns, max_depth)
    ]
    unsupported = {
        role: {op: int(n) for op, n in sorted(sources.get(role).unsupported_ops().items())}
        for role in dict.fromkeys(r for c in chosen for r in c.needs)
        if hasattr(sources.get(role), "unsupported_ops")
    }
    described: dict[str, Any] = {}
    if meta is True:
        from .provenance import export_meta

        described = {"meta": export_meta(analysis, roofline=sources.get("roofline"))}
    elif meta is not False:
        described = {"meta": dict(meta)}
    return {
        **described,
        "model": type(sources.model).__name__,
        "columns": [c.key for c in chosen],
        "operator_columns": [c.key for c in op_columns],
        "total": {c.key: exact(values[c.key].get("", 0)) for c in chosen},
        "modules": modules,
        "operators": operators,
        "unsupported_ops": unsupported,
    }


def to_json(analysis: Any, *, indent: int | None = 2, **kwargs: Any) -> str:
    """:func:`to_dict` as JSON (exact integers)."""
    return json.dumps(to_dict(analysis, **kwargs), indent=indent)


def _level_rows(data: Mapping[str, Any], level: str) -> tuple[list[str], list[dict[str, Any]]]:
    if level == "modules":
        fields = list(data["modules"][0]) if data["modules"] else ["name", "type", "parent", "depth", "called"]
        return fields, data["modules"]
    if level == "operators":
        return ["module", "operator", *data["operator_columns"]], data["operators"]
    raise OpcountValueError(f"unknown level {level!r}; choose 'modules' or 'operators'")


def to_csv(analysis: Any, *, level: str = "modules", **kwargs: Any) -> str:
    """One CSV row per module (``level="modules"``) or per module and operator
    (``"operators"``), exact numbers, below ``# key: value`` lines saying what they were
    computed from (``meta=`` as in :func:`to_dict`). The model's own row is named ``"."``
    (:data:`opcount.report.provenance.CSV_ROOT`): an empty name would read back as NaN in pandas."""
    from .provenance import csv_header

    data = to_dict(analysis, **kwargs)
    fields, rows = _level_rows(data, level)
    return (csv_header(data["meta"]) if "meta" in data else "") + csv_rows(fields, rows)


def csv_rows(fields: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """CSV text with a header: booleans as ``true``/``false``, None as an empty cell, the
    model's own name (``""``) as ``"."`` in the columns naming modules."""
    from .provenance import CSV_ROOT

    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(fields), extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _csv_cell(k, v, CSV_ROOT) for k, v in row.items()})
    return out.getvalue()


def _csv_cell(key: str, value: Any, root: str) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if value == "" and key in ("name", "parent", "module"):
        return root
    return value


def to_markdown(
    analysis: Any,
    *,
    level: str = "modules",
    columns: Sequence[str | Column] = ("params", "flops"),
    max_depth: int | None = 3,
    activations: Any = None,
    memory: Any = None,
    extra: Mapping[str, Any] | None = None,
    number_format: NumberFormat = COMPACT,
) -> str:
    """A markdown table per module (full names, every module to ``max_depth`` levels) or per
    module and operator. ``number_format=EXACT`` writes unrounded numbers."""
    check_max_depth(max_depth, optional=True)
    sources = Sources(analysis, activations, memory, extra or {})
    chosen = resolve_columns(columns, sources)
    if level == "operators":  # parameters have no per-operator share: leave them out here
        return operator_table(
            analysis,
            columns=[c for c in chosen if c.operators is not None],
            max_depth=max_depth,
            activations=activations,
            memory=memory,
            extra=extra,
            number_format=number_format,
        )
    if level != "modules":
        raise OpcountValueError(f"unknown level {level!r}; choose 'modules' or 'operators'")
    values = {c.key: c.modules(sources) for c in chosen}
    layout = build_layout(sources.tree, with_params=False)
    shown = [n for n in sources.tree.names if max_depth is None or layout.depth(n) <= max_depth]
    cells = format_cells(sources, chosen, values, shown, number_format, "N/A")
    tree = sources.tree
    rows = [
        [f"`{n}`" if n else "model", type(tree.module(n)).__name__, *(cells[n].get(c.key, "") for c in chosen)]
        for n in shown
    ]
    aligns = ["left", "left", *(["right"] * len(chosen))]
    table: str = tabulate.tabulate(
        rows,
        headers=["module", "type", *(c.header for c in chosen)],
        tablefmt="pipe",
        colalign=aligns,
        disable_numparse=True,
    )
    return table
