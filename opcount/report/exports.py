"""Exports: every module and module x operator with exact numbers, as a dict, JSON (with what they
were computed from) or CSV (a header line, then rows: what tools read as they are), and a markdown table.

The model's own row is named :data:`ROOT` (``"."``) in every export, and so is the ``parent`` of its
children and the ``module`` of its own operators. fvcore names it ``""`` (``by_module()[""]``), but an
empty CSV field reads back as NaN in pandas, quoted or not, and ``"model"``, what the text tables
print, would collide with a child named ``model`` (transformers' ``LlamaForCausalLM`` has one); no
module can be named ``.`` (torch refuses dots in module names).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tabulate

from ..errors import OpcountValueError
from ..units import COMPACT, NumberFormat, exact
from .columns import COLUMNS, Column, Sources, resolve_columns
from .rows import build_row_tree, check_max_depth, format_cells
from .tables import operator_rows, operator_table

__all__ = [
    "FORMULA_STARTS",
    "ROOT",
    "csv_fields",
    "csv_rows",
    "export_number",
    "to_csv",
    "to_dict",
    "to_json",
    "to_markdown",
]

ROOT = "."
# What begins a formula in a spreadsheet's cell (OWASP, "CSV Injection"): such text cells get a leading '
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# Columns that name modules: the model's own name ("") is written as ROOT there.
_MODULE_FIELDS = ("name", "parent", "module")
# Significant digits kept of a float: sums of floats (times) carry residue past the 15th digit,
# such as -1.6e-19 s for a module's own time that is 0.
_DIGITS = 12
# CSV headers carry their unit: time in seconds, shares in percent, and the flop count under the
# name of its convention ("macs" when a multiply-add counts 1, fvcore's; "flops" when it counts 2).
_CSV_NAMES = {
    "flops": "{flops}",
    "sparse_flops": "sparse_{flops}",
    "intensity": "{flops}_per_byte",
    "percent": "{flops}_percent",
    "time": "time_s",
    "sparse_time": "sparse_time_s",
    "time_share": "time_percent",
    # an LLM phase's estimate of its fused or eager kernels, attributed to modules (opcount.llm.report.times)
    **{f"time_{mode}": f"time_{mode}_s" for mode in ("fused", "eager")},
    **{f"time_share_{mode}": f"time_{mode}_percent" for mode in ("fused", "eager")},
    # the same of one device when the run describes a layout (opcount.cli.llm_times)
    **{f"time_{mode}_single_device": f"time_{mode}_single_device_s" for mode in ("fused", "eager")},
    **{f"time_share_{mode}_single_device": f"time_{mode}_single_device_percent" for mode in ("fused", "eager")},
}

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
    row_tree = build_row_tree(sources.tree, with_params=False)
    tree = sources.tree
    uncalled = set(analysis.uncalled_modules())
    modules = []
    for name in tree.names:
        depth = row_tree.depth(name)
        if max_depth is not None and depth > max_depth:
            continue
        parent = row_tree.parent[name]
        row: dict[str, Any] = {
            "name": _named(name),
            "type": type(tree.module(name)).__name__,
            "parent": None if parent is None else _named(parent),
            "depth": depth,
            "called": name not in uncalled,
        }
        kids = row_tree.children.get(name, ())
        for c in chosen:
            row[c.key] = export_number(values[c.key].get(name, 0 if c.additive else None))
        for c in chosen:
            if c.additive:
                value = values[c.key].get(name, 0)
                own = value - sum(values[c.key].get(k, 0) for k in kids)
                if isinstance(own, float) and abs(own) <= 1e-9 * abs(value):
                    own = 0  # the children hold it all: what is left is rounding residue
                row["self_" + c.key] = export_number(own)
        modules.append(row)
    op_columns = [c for c in chosen if c.operators is not None]
    operators = [
        {"module": _named(name), "operator": op, **{k: export_number(x) for k, x in v.items()}}
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
        # a statistic undefined for the whole model (the bound of a model that does no work) is null,
        # as in its own row
        "total": {c.key: export_number(values[c.key].get("", 0 if c.additive else None)) for c in chosen},
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


def to_csv(analysis: Any, *, level: str = "modules", raw: bool = False, **kwargs: Any) -> str:
    """One CSV row per module (``level="modules"``) or per module and operator
    (``"operators"``), exact numbers; the first line is the header, so ``csv.DictReader`` and
    ``pandas.read_csv`` read it with their defaults. Headers carry units (:func:`csv_fields`);
    what the numbers were computed from is in :func:`to_dict`'s ``meta`` (the command writes it
    beside the CSV with ``--csv-meta FILE``). A text cell that a spreadsheet would run as a formula
    is written with a leading ``'`` unless ``raw`` (:func:`csv_rows`). Arguments as :func:`to_dict`."""
    data = to_dict(analysis, **kwargs)
    fields, rows = _level_rows(data, level)
    return csv_rows(fields, rows, names=csv_fields(fields, getattr(analysis, "flops_per_mac", None)), raw=raw)


def csv_fields(keys: Iterable[str], flops_per_mac: int | None) -> dict[str, str]:
    """The CSV header of each column key, with its unit: ``time`` -> ``time_s``, ``time_share`` ->
    ``time_percent``, ``flops`` -> ``macs`` under fvcore's convention (``flops_per_mac=1``) or
    ``flops`` (2; None: unknown, kept as ``flops``); ``self_<key>`` follows ``<key>``."""
    flops = "macs" if flops_per_mac == 1 else "flops"
    names = {}
    for key in keys:
        base, own = (key[5:], "self_") if key.startswith("self_") else (key, "")
        names[key] = own + _CSV_NAMES.get(base, base).format(flops=flops)
    return names


def csv_rows(
    fields: Sequence[str],
    rows: Iterable[Mapping[str, Any]],
    names: Mapping[str, str] | None = None,
    *,
    raw: bool = False,
) -> str:
    """CSV text, the header first (``names`` renames fields there): booleans as ``true``/``false``,
    None as an empty cell, floats to 12 significant digits, the model's own name (``""``) as
    :data:`ROOT` in the columns naming modules.

    A text cell beginning with a character that makes a spreadsheet read it as a formula (``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return: :data:`FORMULA_STARTS`) is written with a ``'``
    in front, OWASP's advice against CSV injection: a module named ``=HYPERLINK(...)`` is shown, not
    run. ``raw=True`` writes every cell as it is, for tools that read the names back exactly. Numbers
    are never changed: ``-3`` stays a number."""
    names = names or {}
    cell = _as_cell if raw else _inert
    lines = [_csv_line([cell(names.get(f, f)) for f in fields])]
    lines += [_csv_line([cell(_csv_cell(f, row.get(f))) for f in fields]) for row in rows]
    return "".join(lines)


def _csv_line(cells: Sequence[Any]) -> str:
    """One CSV line ending in ``\n``. Written with ``\r\n`` as the writer's line end, whose characters it
    quotes in a cell: with ``\n`` alone, a cell holding ``\r`` went unquoted and read back as two lines."""
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerow(cells)
    return out.getvalue()[:-2] + "\n"


def _as_cell(value: Any) -> Any:
    return value


def _inert(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula, with ``'`` in front (:func:`csv_rows`)."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def export_number(x: Any) -> Any:
    """A number as machine exports write it: integral values as ints, other floats to 12
    significant digits (what a sum of floats holds; past it is rounding residue), None and
    text as they are."""
    x = exact(x)
    if isinstance(x, float) and math.isfinite(x):
        x = exact(float(f"{x:.{_DIGITS}g}"))
    return x


def _named(name: str) -> str:
    return name or ROOT


def _csv_cell(key: str, value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if value == "" and key in _MODULE_FIELDS:
        return ROOT
    return export_number(value) if isinstance(value, float) else value


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
            root_label=ROOT,
        )
    if level != "modules":
        raise OpcountValueError(f"unknown level {level!r}; choose 'modules' or 'operators'")
    values = {c.key: c.modules(sources) for c in chosen}
    row_tree = build_row_tree(sources.tree, with_params=False)
    shown = [n for n in sources.tree.names if max_depth is None or row_tree.depth(n) <= max_depth]
    cells = format_cells(sources, chosen, values, shown, number_format, "N/A")
    tree = sources.tree
    rows = [[_md_name(n), type(tree.module(n)).__name__, *(cells[n].get(c.key, "") for c in chosen)] for n in shown]
    aligns = ["left", "left", *(["right"] * len(chosen))]
    table: str = tabulate.tabulate(
        rows,
        headers=["module", "type", *(c.header for c in chosen)],
        tablefmt="pipe",
        colalign=aligns,
        disable_numparse=True,
    )
    return table


def _md_name(name: str) -> str:
    """A module name as a markdown cell: code, with ``|`` escaped (it would end the cell)."""
    return "`" + _named(name).replace("|", "\\|") + "`"
