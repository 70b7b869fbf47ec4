"""Tables in fvcore's layout (module names indented by level, tabulate's pipe format): the
per-module table with any columns, fvcore's ``flop_count_table`` and ``parameter_count_table``,
and the module x operator table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tabulate
from torch import nn

from ..errors import OpcountValueError
from ..scopes import ModuleTree
from ..units import FVCORE_TABLE, NumberFormat
from .columns import Column, Sources, resolve_columns
from .parameters import parameter_counts
from .rows import RowTree, build_row_tree, check_max_depth, format_cells, keep_nonzero

__all__ = [
    "flop_count_table",
    "module_table",
    "operator_rows",
    "operator_table",
    "parameter_count_table",
]

_PARAMETER_SCALES = (("G", 1e9), ("M", 1e6), ("K", 1e3))  # fvcore's parameter table stops at G


def _pipe(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    table: str = tabulate.tabulate(rows, headers=list(headers), tablefmt="pipe", preserve_whitespace=True)
    return table


def _merge(a: Mapping[str, str], b: Mapping[str, str]) -> dict[str, str] | None:
    """The cells of two rows shown as one, or None when they disagree (fvcore's rule)."""
    if a.keys() != b.keys():
        return None
    merged = {}
    for key, x in a.items():
        y = b[key]
        if x and y and x != y:
            return None
        merged[key] = x or y
    return merged


def _indented_rows(
    row_tree: RowTree,
    cells: dict[str, dict[str, str]],
    keys: Sequence[str],
    max_depth: int,
) -> list[list[str]]:
    """fvcore's table body: one row per shown row name, indented by level; a row whose only
    child agrees with it is merged into the child (``layer1`` + ``layer1.0`` -> ``layer1.0``)."""

    def kids(name: str) -> list[str]:
        return [c for c in row_tree.children.get(name, ()) if c in cells]

    def fast_forward(name: str) -> str:
        while len(only := kids(name)) == 1 and (merged := _merge(cells[name], cells[only[0]])) is not None:
            cells[only[0]] = merged
            name = only[0]
        return name

    rows: list[list[str]] = []

    def add(label: str, name: str, level: int) -> None:
        pad = " " * level
        rows.append([pad + label] + [pad + cells[name][k] if k in cells[name] else "" for k in keys])

    root = fast_forward("")
    # fvcore names the root row "model"; a causal LM's body is a child named "model" too
    # (LlamaForCausalLM.model): two rows of one name, so the root reads "whole model" there
    add(root or ("whole model" if "model" in kids("") else "model"), root, 0)
    strip = len(root) + 1 if root else 0  # a merged root's name prefixes every row: drop it

    # Pre-order with a stack (a model may nest deeper than Python's recursion limit): (row, level).
    pending = [(child, 1) for child in reversed(kids(root))]
    while pending:
        child, level = pending.pop()
        if level > max_depth:
            continue
        child = fast_forward(child)
        add(child[strip:], child, level)
        pending.extend((grandchild, level + 1) for grandchild in reversed(kids(child)))
    return rows


def module_table(
    analysis: Any,
    *,
    columns: Sequence[str | Column] = ("params", "flops"),
    max_depth: int = 3,
    activations: Any = None,
    memory: Any = None,
    extra: Mapping[str, Any] | None = None,
    number_format: NumberFormat = FVCORE_TABLE,
    show_param_shapes: bool = True,
    units: bool = True,
) -> str:
    """A per-module table in fvcore's layout with the chosen columns (keys of :data:`COLUMNS`),
    counts headed by their unit (``#MACs``, ``#FLOPs``; ``units=False``: fvcore's ``#flops``).

    Modules whose values are all zero are left out unless a descendant is shown; a module
    the analysis never saw called gets blank analysis cells; with ``"params"`` the parameters
    are rows too, showing their shapes (or are left out, ``show_param_shapes=False``).
    """
    check_max_depth(max_depth)
    sources = Sources(analysis, activations, memory, extra or {})
    chosen = resolve_columns(columns, sources, units=units)
    values = {c.key: c.modules(sources) for c in chosen}
    with_params = "params" in values
    row_tree = build_row_tree(sources.tree, with_params)
    kept = keep_nonzero(row_tree, values)
    cells = format_cells(sources, chosen, values, [n for n in row_tree.order if n in kept], number_format, "")
    for name, shape in row_tree.shapes.items():
        if name in cells:
            if show_param_shapes:
                cells[name]["params"] = str(shape)
            else:
                del cells[name]
    headers = [c.header + (" or shape" if c.key == "params" and show_param_shapes else "") for c in chosen]
    rows = _indented_rows(row_tree, cells, [c.key for c in chosen], max_depth)
    return _pipe(["module", *headers], rows)


def flop_count_table(
    flops: Any,
    max_depth: int = 3,
    activations: Any = None,
    show_param_shapes: bool = True,
) -> str:
    """fvcore.nn.flop_count_table: parameters (or their shapes) and flops per module, and
    activations when given, to ``max_depth`` levels; numbers as ``4.112G``."""
    columns = ("params", "flops", "activations") if activations is not None else ("params", "flops")
    return module_table(
        flops,
        columns=columns,
        max_depth=max_depth,
        activations=activations,
        show_param_shapes=show_param_shapes,
        units=False,  # fvcore's text, to the character
    )


def parameter_count_table(model: nn.Module, max_depth: int = 3) -> str:
    """fvcore.nn.parameter_count_table: parameters per module (``1.2M``) and parameter shapes."""
    check_max_depth(max_depth)
    tree = ModuleTree(model)
    counts = parameter_counts(tree)
    row_tree = build_row_tree(tree, with_params=True)

    def size(x: int) -> str:
        for prefix, scale in _PARAMETER_SCALES:  # one decimal, as fvcore's parameter table
            if x > scale / 10:
                return f"{x / scale:.1f}{prefix}"
        return str(x)

    rows = [["model", size(counts[""])]]

    # Pre-order with a stack (a model may nest deeper than Python's recursion limit): (row, level).
    pending = [(child, 0) for child in reversed(row_tree.children.get("", ()))]
    while pending:
        child, level = pending.pop()
        if level >= max_depth or child not in counts:
            continue
        pad = " " * (level + 1)
        if child in row_tree.shapes:
            rows.append([pad + child, pad + str(row_tree.shapes[child])])
        else:
            rows.append([pad + child, pad + size(counts[child])])
            pending.extend((grandchild, level + 1) for grandchild in reversed(row_tree.children.get(child, ())))
    return _pipe(["name", "#elements or shape"], rows)


def operator_rows(
    sources: Sources,
    columns: Sequence[Column],
    max_depth: int | None,
) -> list[tuple[str, str, dict[str, Any]]]:
    """(module, operator, {column key: value}) in module order, heaviest operator first."""
    for c in columns:
        if c.operators is None:
            raise OpcountValueError(f"column {c.key!r} has no per-operator breakdown")
    tables = {c.key: c.operators(sources) for c in columns if c.operators is not None}
    row_tree = build_row_tree(sources.tree, with_params=False)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for name in sources.tree.names:
        if max_depth is not None and row_tree.depth(name) > max_depth:
            continue
        ops: dict[str, None] = {}
        for table in tables.values():
            ops.update(dict.fromkeys(table.get(name, {})))
        found = [(op, {k: t.get(name, {}).get(op) for k, t in tables.items()}) for op in ops]
        found = [(op, v) for op, v in found if any(x for x in v.values())]
        first = columns[0].key if columns else None
        found.sort(key=lambda item: (-(item[1].get(first) or 0) if first else 0, item[0]))
        rows.extend((name, op, v) for op, v in found)
    return rows


def operator_table(
    analysis: Any,
    *,
    columns: Sequence[str | Column] = ("flops", "percent"),
    max_depth: int | None = None,
    activations: Any = None,
    memory: Any = None,
    extra: Mapping[str, Any] | None = None,
    number_format: NumberFormat = FVCORE_TABLE,
    root_label: str = "model",
) -> str:
    """The long table: one row per module and operator (modules to ``max_depth`` levels,
    operators with a nonzero value, heaviest first); the model's own rows are named ``root_label``.
    A ``|`` in a module name is escaped (``\\|``): it would end the cell."""
    check_max_depth(max_depth, optional=True)
    sources = Sources(analysis, activations, memory, extra or {})
    chosen = resolve_columns(columns, sources)
    rows = [
        [(name or root_label).replace("|", "\\|"), op, *(c.render(v[c.key], number_format) for c in chosen)]
        for name, op, v in operator_rows(sources, chosen, max_depth)
    ]
    return _pipe(["module", "operator", *(c.header for c in chosen)], rows)
