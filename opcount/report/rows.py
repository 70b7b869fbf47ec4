"""Which rows a report shows and in what order: the module tree plus parameter rows in fvcore's
order, the rows left out for being zero, each row's cells as text, and the ``max_depth`` check
every report makes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import OpcountTypeError, OpcountValueError
from ..scopes import ModuleTree
from ..units import NumberFormat
from .columns import Column, Sources, Values, uncalled_rows
from .parameters import parameters_once

__all__ = ["RowTree", "build_row_tree", "check_max_depth", "format_cells", "keep_nonzero"]


@dataclass(frozen=True)
class RowTree:
    """Row names with their parents. Siblings come in fvcore's order: those holding parameters
    first, in ``named_parameters()`` order, then the others in registration order."""

    order: tuple[str, ...]
    parent: Mapping[str, str | None]
    children: Mapping[str, tuple[str, ...]]
    shapes: Mapping[str, tuple[int, ...]]  # parameter rows

    def depth(self, name: str) -> int:
        depth, parent = 0, self.parent[name]
        while parent is not None:
            depth, parent = depth + 1, self.parent[parent]
        return depth


def build_row_tree(tree: ModuleTree, with_params: bool) -> RowTree:
    """The rows over ``tree``: every module, and every parameter under its module when ``with_params``."""
    order: dict[str, None] = {}
    parent: dict[str, str | None] = {name: tree.parent(name) for name in tree.names}
    shapes: dict[str, tuple[int, ...]] = {}
    if with_params:
        for name, module_name, p in parameters_once(tree):
            order.update(dict.fromkeys(tree.owners(module_name)))
            order[name] = None
            parent[name] = module_name
            shapes[name] = tuple(p.shape)
    order.update(dict.fromkeys(tree.names))
    children: dict[str, list[str]] = {}
    for name in order:
        if (up := parent[name]) is not None:
            children.setdefault(up, []).append(name)
    return RowTree(tuple(order), parent, {k: tuple(v) for k, v in children.items()}, shapes)


def keep_nonzero(row_tree: RowTree, values: Mapping[str, Values]) -> set[str]:
    """Rows with a nonzero value, or with a kept descendant; the root always stays."""
    kept: set[str] = set()
    for name in reversed(row_tree.order):  # children before their parents, without recursion
        kids = row_tree.children.get(name, ())
        if name == "" or any(v.get(name) for v in values.values()) or any(c in kept for c in kids):
            kept.add(name)
    return kept


def format_cells(
    sources: Sources,
    columns: Sequence[Column],
    values: Mapping[str, Values],
    rows: Iterable[str],
    fmt: NumberFormat,
    uncalled_text: str,
) -> dict[str, dict[str, str]]:
    """Row -> column key -> text, for the columns that have a value for the row.

    A module never called gets ``uncalled_text`` when nothing is attributed to it: a container
    (ModuleList) is never called, but its children's costs are its own and are shown.
    """
    uncalled = {c.key: uncalled_rows(sources, c) for c in columns}
    cells: dict[str, dict[str, str]] = {}
    for name in rows:
        cells[name] = {}
        for c in columns:
            if name in values[c.key]:
                value = values[c.key][name]
                missing = name in uncalled[c.key] and not value
                cells[name][c.key] = uncalled_text if missing else c.render(value, fmt)
    return cells


def check_max_depth(max_depth: Any, *, optional: bool = False) -> None:
    """Reject a ``max_depth`` that is not an int >= 0 (or None, where ``optional``): a negative
    depth would print a report with no module in it, a float or a string fail deep inside."""
    if optional and max_depth is None:
        return
    if type(max_depth) is not int or max_depth < 0:  # bool is not a depth either
        allowed = "an int >= 0 or None" if optional else "an int >= 0"
        raise OpcountValueError(f"max_depth must be {allowed} (module levels shown), got {max_depth!r}")


def check_kind(arg: str, value: Any, attributes: Sequence[str], expected: str) -> None:
    """Refuse an argument that lacks what a report reads of it, naming the argument and what it
    should be: passed a model or a name instead, the report failed deep inside with an
    AttributeError about some attribute the caller never used. Checked by attributes, not by
    class, so that the report modules import no analysis (and no import cycle forms)."""
    if not all(hasattr(value, a) for a in attributes):
        raise OpcountTypeError(f"{arg} must be {expected}, got {type(value).__name__}")
