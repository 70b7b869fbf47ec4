"""Reports: fvcore-compatible tables and model strings, a compact tree, and exports.

Everything here is pure: it reads an analysis' results (``by_module``, ``by_module_and_operator``,
``uncalled_modules``) and the model's structure, and returns text or plain data. It never
changes an analysis' settings (fvcore's printers switch the analysis' warnings off) nor any
global state (fvcore flips ``tabulate.PRESERVE_WHITESPACE``; we pass ``preserve_whitespace``).

A report is made of :class:`Column` s, named by key in :data:`COLUMNS`. :func:`register_column`
adds more (the roofline's time columns plug in there); a new column reads its analysis from
``extra={"<role>": analysis}`` through :meth:`Sources.get`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import tabulate
from torch import nn

from .rollup import roll_up
from .scopes import ModuleTree

__all__ = [
    "COLUMNS",
    "COMPACT",
    "EXACT",
    "FVCORE_STR",
    "FVCORE_TABLE",
    "Column",
    "NumberFormat",
    "Sources",
    "exact",
    "flop_count_str",
    "flop_count_table",
    "format_number",
    "module_table",
    "operator_table",
    "parameter_count",
    "parameter_count_table",
    "register_column",
    "resolve_columns",
    "csv_rows",
    "to_csv",
    "to_dict",
    "to_json",
    "to_markdown",
    "tree_str",
]

Values = Mapping[str, Any]  # row name -> number (None: undefined there)


# ================================================================================================
# Numbers
# ================================================================================================
_PREFIXES: tuple[tuple[str, float], ...] = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3))
_SCALE = {"": 1.0, **dict(_PREFIXES)}
UNITS = ("auto", "exact", "", "K", "M", "G", "T", "P")


@dataclass(frozen=True)
class NumberFormat:
    """How a count is written.

    ``unit``: ``"auto"`` picks K/M/G/T/P by magnitude; ``"K"`` ... ``"P"`` or ``""`` fixes one
    scale for every cell (easier to compare down a column); ``"exact"`` writes the number as is.
    ``digits``: decimals kept after scaling with trailing zeros dropped (fvcore's convention:
    4111514624 is ``4.112G``), or significant figures when ``significant`` (``4.11G``).
    """

    unit: str = "auto"
    digits: int = 3
    significant: bool = False

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unknown unit {self.unit!r}; choose one of {', '.join(map(repr, UNITS))}")
        if isinstance(self.digits, bool) or not isinstance(self.digits, int) or self.digits < int(self.significant):
            raise ValueError(f"digits must be an integer >= {int(self.significant)}, got {self.digits!r}")


FVCORE_TABLE = NumberFormat(digits=3)  # fvcore's flop_count_table
FVCORE_STR = NumberFormat(digits=2)  # fvcore's flop_count_str
COMPACT = NumberFormat(digits=3, significant=True)
EXACT = NumberFormat(unit="exact")


def format_number(x: float, fmt: NumberFormat = FVCORE_TABLE) -> str:
    """``x`` as text: ``format_number(4111514624) == "4.112G"``; with ``COMPACT``, ``"4.11G"``."""
    if fmt.unit == "exact":
        return str(exact(x))
    if fmt.significant:
        x = _round_significant(x, fmt.digits)
    prefix = _auto_prefix(x, fmt.significant) if fmt.unit == "auto" else fmt.unit
    if not prefix and fmt.unit == "auto" and not fmt.significant:
        return str(x)  # fvcore writes numbers up to 100 as they are
    value = x / _SCALE[prefix]
    decimals = _significant_decimals(value, fmt.digits) if fmt.significant else fmt.digits
    # A fixed unit keeps its trailing zeros: the column lines up and 9408 in M is 0.0M, not 0M.
    return _fixed(value, decimals, strip=fmt.unit == "auto") + prefix


def _auto_prefix(x: float, significant: bool) -> str:
    # fvcore switches a decade early (128 -> "0.128K"); significant figures read best in [1, 1000).
    for prefix, scale in _PREFIXES:
        if (abs(x) >= scale) if significant else (abs(x) > scale / 10):
            return prefix
    return ""


def _round_significant(x: float, digits: int) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _significant_decimals(value: float, digits: int) -> int:
    if value == 0 or not math.isfinite(value):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(value))))


def _fixed(value: float, decimals: int, strip: bool = True) -> str:
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if strip and "." in text else text


def exact(x: Any) -> Any:
    """A number as a plain Python int when it is integral (numpy and torch scalars too), else a
    float; machine formats write these unrounded."""
    if x is None or isinstance(x, (bool, int)):
        return x
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x


def _render_count(x: Any, fmt: NumberFormat) -> str:
    return "" if x is None else format_number(x, fmt)


def _render_percent(x: Any, fmt: NumberFormat) -> str:
    if x is None:
        return ""
    return str(exact(x)) if fmt.unit == "exact" else f"{x:.1f}%"


def _render_ratio(x: Any, fmt: NumberFormat) -> str:
    if x is None:
        return ""
    return str(exact(x)) if fmt.unit == "exact" else _fixed(x, _significant_decimals(x, 3))


# ================================================================================================
# Sources and columns
# ================================================================================================
@dataclass(frozen=True)
class Sources:
    """The analyses a report reads, by role. ``flops`` also gives the model and its module tree;
    ``extra`` holds the analyses of registered columns (e.g. ``{"roofline": ...}``)."""

    flops: Any
    activations: Any = None
    memory: Any = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def get(self, role: str) -> Any:
        if role in ("flops", "activations", "memory"):
            return getattr(self, role)
        return self.extra.get(role)

    @property
    def tree(self) -> ModuleTree:
        return self.flops.module_tree

    @property
    def model(self) -> nn.Module:
        return self.flops.model


@dataclass(frozen=True)
class Column:
    """One statistic of a report.

    ``needs``: the roles of the analyses it reads (a module that one of them never saw called
    gets a blank cell). ``modules``: its value per row name; ``operators``: per module and
    operator, None when it has no such breakdown. ``render``: value -> cell text.
    ``additive``: the value of a module is the sum over its operators and children, so machine
    exports also give the module's own share (``self_<key>``).
    """

    key: str
    header: str
    needs: tuple[str, ...]
    modules: Callable[[Sources], Values]
    operators: Callable[[Sources], Mapping[str, Values]] | None = None
    render: Callable[[Any, NumberFormat], str] = _render_count
    additive: bool = True


def _flops(s: Sources) -> Values:
    return s.flops.by_module()


def _bytes(kind: str) -> tuple[Callable[[Sources], Values], Callable[[Sources], Mapping[str, Values]]]:
    def modules(s: Sources) -> Values:
        return s.memory.by_module(kind=kind)

    def operators(s: Sources) -> Mapping[str, Values]:
        return s.memory.by_module_and_operator(kind=kind)

    return modules, operators


def _ratio(num: Values, den: Values) -> dict[str, float | None]:
    return {name: (num.get(name, 0) / d if d else None) for name, d in den.items()}


def _percent_modules(s: Sources) -> Values:
    flops = s.flops.by_module()
    total = flops.get("", 0)
    return {name: (100 * v / total if total else None) for name, v in flops.items()}


def _percent_operators(s: Sources) -> Mapping[str, Values]:
    total = s.flops.by_module().get("", 0)
    return {
        m: {op: (100 * v / total if total else None) for op, v in ops.items()}
        for m, ops in s.flops.by_module_and_operator().items()
    }


def _intensity_operators(s: Sources) -> Mapping[str, Values]:
    flops, moved = s.flops.by_module_and_operator(), s.memory.by_module_and_operator(kind="both")
    return {m: _ratio(flops.get(m, {}), ops) for m, ops in moved.items()}


COLUMNS: dict[str, Column] = {}


def register_column(column: Column, *, replace: bool = False) -> Column:
    """Make ``column`` available by its key to every report (``columns=(..., key)``)."""
    if column.key in COLUMNS and not replace:
        raise ValueError(f"a column {column.key!r} is already registered")
    COLUMNS[column.key] = column
    return column


for _column in (
    Column("params", "#parameters", (), lambda s: _parameter_count(s.tree)),
    Column("flops", "#flops", ("flops",), _flops, lambda s: s.flops.by_module_and_operator()),
    Column(
        "activations",
        "#activations",
        ("activations",),
        lambda s: s.activations.by_module(),
        lambda s: s.activations.by_module_and_operator(),
    ),
    Column("bytes_read", "#bytes read", ("memory",), *_bytes("read")),
    Column("bytes_written", "#bytes written", ("memory",), *_bytes("write")),
    Column("bytes", "#bytes", ("memory",), *_bytes("both")),
    Column(
        "intensity",
        "flops/byte",
        ("flops", "memory"),
        lambda s: _ratio(s.flops.by_module(), s.memory.by_module(kind="both")),
        _intensity_operators,
        _render_ratio,
        additive=False,
    ),
    Column("percent", "% flops", ("flops",), _percent_modules, _percent_operators, _render_percent, additive=False),
):
    register_column(_column)


def _columns(keys: Iterable[str | Column], sources: Sources) -> list[Column]:
    chosen = []
    for key in keys:
        column = key if isinstance(key, Column) else COLUMNS.get(key)
        if column is None:
            raise ValueError(f"unknown column {key!r}; choose from {', '.join(COLUMNS)}")
        for role in column.needs:
            if sources.get(role) is None:
                how = f"{role}=..." if role in ("activations", "memory") else f"extra={{{role!r}: ...}}"
                raise ValueError(f"column {column.key!r} needs the {role} analysis; pass {how}")
        chosen.append(column)
    if len({c.key for c in chosen}) != len(chosen):
        raise ValueError(f"a column is named twice in {[c.key for c in chosen]}")
    return chosen


def resolve_columns(keys: Iterable[str | Column], sources: Sources) -> list[Column]:
    """The columns named by ``keys``; a ValueError names an unknown one, or one whose analysis
    ``sources`` lacks."""
    return _columns(keys, sources)


def _uncalled(sources: Sources, column: Column) -> set[str]:
    found: set[str] = set()
    for role in column.needs:
        query = getattr(sources.get(role), "uncalled_modules", None)  # optional for extra analyses
        found |= set(query()) if query is not None else set()
    return found


# ================================================================================================
# Rows: the module tree plus parameter rows, in fvcore's order
# ================================================================================================
def _parameters(tree: ModuleTree) -> list[tuple[str, str, nn.Parameter]]:
    """(qualified name, module name, parameter) in ``named_parameters()`` order: modules in
    registration order, each parameter under the first name it is reachable by."""
    seen: set[int] = set()
    found = []
    for module_name in tree.names:
        for local, p in tree.module(module_name).named_parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                found.append((f"{module_name}.{local}" if module_name else local, module_name, p))
    return found


def _parameter_count(tree: ModuleTree) -> Counter[str]:
    params = _parameters(tree)
    totals = roll_up(tree, (((module_name,), {"": p.numel()}) for _, module_name, p in params))
    counts = Counter({name: c[""] for name, c in totals.items() if c})  # modules holding parameters
    for name, _, p in params:  # and a row per parameter
        counts[name] += p.numel()
    return counts


@dataclass(frozen=True)
class _Layout:
    """Row names with their parents. Siblings come in fvcore's order: those holding parameters
    first, in ``named_parameters()`` order, then the others in registration order."""

    order: tuple[str, ...]
    parent: Mapping[str, str | None]
    children: Mapping[str, tuple[str, ...]]
    shapes: Mapping[str, tuple[int, ...]]  # parameter rows

    def depth(self, name: str) -> int:
        depth = 0
        while (name := self.parent[name]) is not None:  # type: ignore[assignment]
            depth += 1
        return depth


def _layout(tree: ModuleTree, with_params: bool) -> _Layout:
    order: dict[str, None] = {}
    parent: dict[str, str | None] = {name: tree.parent(name) for name in tree.names}
    shapes: dict[str, tuple[int, ...]] = {}
    if with_params:
        for name, module_name, p in _parameters(tree):
            order.update(dict.fromkeys(tree.owners(module_name)))
            order[name] = None
            parent[name] = module_name
            shapes[name] = tuple(p.shape)
    order.update(dict.fromkeys(tree.names))
    children: dict[str, list[str]] = {}
    for name in order:
        if (up := parent[name]) is not None:
            children.setdefault(up, []).append(name)
    return _Layout(tuple(order), parent, {k: tuple(v) for k, v in children.items()}, shapes)


def _keep_nonzero(layout: _Layout, values: Mapping[str, Values]) -> set[str]:
    """Rows with a nonzero value, or with a kept descendant; the root always stays."""
    kept: set[str] = set()

    def visit(name: str) -> bool:
        child_kept = [visit(child) for child in layout.children.get(name, ())]
        if name == "" or any(child_kept) or any(v.get(name) for v in values.values()):
            kept.add(name)
            return True
        return False

    visit("")
    return kept


def _cells(
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
    uncalled = {c.key: _uncalled(sources, c) for c in columns}
    cells: dict[str, dict[str, str]] = {}
    for name in rows:
        cells[name] = {}
        for c in columns:
            if name in values[c.key]:
                value = values[c.key][name]
                missing = name in uncalled[c.key] and not value
                cells[name][c.key] = uncalled_text if missing else c.render(value, fmt)
    return cells


# ================================================================================================
# Tables (fvcore's layout)
# ================================================================================================
def _pipe(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return tabulate.tabulate(rows, headers=list(headers), tablefmt="pipe", preserve_whitespace=True)


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


def check_max_depth(max_depth: Any, *, optional: bool = False) -> None:
    """Reject a ``max_depth`` that is not an int >= 0 (or None, where ``optional``): a negative
    depth would print a report with no module in it, a float or a string fail deep inside."""
    if optional and max_depth is None:
        return
    if type(max_depth) is not int or max_depth < 0:  # bool is not a depth either
        allowed = "an int >= 0 or None" if optional else "an int >= 0"
        raise ValueError(f"max_depth must be {allowed} (module levels shown), got {max_depth!r}")


def _indented_rows(
    layout: _Layout,
    cells: dict[str, dict[str, str]],
    keys: Sequence[str],
    max_depth: int,
) -> list[list[str]]:
    """fvcore's table body: one row per shown row name, indented by level; a row whose only
    child agrees with it is merged into the child (``layer1`` + ``layer1.0`` -> ``layer1.0``)."""

    def kids(name: str) -> list[str]:
        return [c for c in layout.children.get(name, ()) if c in cells]

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
    add(root or "model", root, 0)
    strip = len(root) + 1 if root else 0  # a merged root's name prefixes every row: drop it

    def fill(name: str, level: int) -> None:
        if level > max_depth:
            return
        for child in kids(name):
            child = fast_forward(child)
            add(child[strip:], child, level)
            fill(child, level + 1)

    fill(root, 1)
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
) -> str:
    """A per-module table in fvcore's layout with the chosen columns (keys of :data:`COLUMNS`).

    Modules whose values are all zero are left out unless a descendant is shown; a module
    the analysis never saw called gets blank analysis cells; with ``"params"`` the parameters
    are rows too, showing their shapes (or are left out, ``show_param_shapes=False``).
    """
    check_max_depth(max_depth)
    sources = Sources(analysis, activations, memory, extra or {})
    chosen = _columns(columns, sources)
    values = {c.key: c.modules(sources) for c in chosen}
    with_params = "params" in values
    layout = _layout(sources.tree, with_params)
    kept = _keep_nonzero(layout, values)
    cells = _cells(sources, chosen, values, [n for n in layout.order if n in kept], number_format, "")
    for name, shape in layout.shapes.items():
        if name in cells:
            if show_param_shapes:
                cells[name]["params"] = str(shape)
            else:
                del cells[name]
    headers = [c.header + (" or shape" if c.key == "params" and show_param_shapes else "") for c in chosen]
    rows = _indented_rows(layout, cells, [c.key for c in chosen], max_depth)
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
    )


def parameter_count(model: nn.Module) -> Counter[str]:
    """Parameters of the model (key ``""``), of every module holding any, and of every
    parameter by its qualified name (fvcore.nn.parameter_count)."""
    return _parameter_count(ModuleTree(model))


def parameter_count_table(model: nn.Module, max_depth: int = 3) -> str:
    """fvcore.nn.parameter_count_table: parameters per module (``1.2M``) and parameter shapes."""
    check_max_depth(max_depth)
    tree = ModuleTree(model)
    counts = _parameter_count(tree)
    layout = _layout(tree, with_params=True)

    def size(x: int) -> str:
        for prefix, scale in _PREFIXES[2:]:  # G, M, K, one decimal, as fvcore's parameter table
            if x > scale / 10:
                return f"{x / scale:.1f}{prefix}"
        return str(x)

    rows = [["model", size(counts[""])]]

    def fill(name: str, level: int) -> None:
        if level >= max_depth:
            return
        pad = " " * (level + 1)
        for child in layout.children.get(name, ()):
            if child not in counts:
                continue
            if child in layout.shapes:
                rows.append([pad + child, pad + str(layout.shapes[child])])
            else:
                rows.append([pad + child, pad + size(counts[child])])
                fill(child, level + 1)

    fill("", 0)
    return _pipe(["name", "#elements or shape"], rows)


# ================================================================================================
# Model strings and the compact tree
# ================================================================================================
_NA_NOTE = (
    "N/A indicates a possibly missing statistic due to how the module was called. "
    "Missing values are still included in the parent's total."
)


def flop_count_str(
    flops: Any,
    activations: Any = None,
    *,
    columns: Sequence[str | Column] | None = None,
    memory: Any = None,
    extra: Mapping[str, Any] | None = None,
    number_format: NumberFormat = FVCORE_STR,
) -> str:
    """fvcore.nn.flop_count_str: ``str(model)`` with ``#params`` and ``#flops`` (and ``#acts``)
    on every module that has any; ``N/A`` for modules never called directly.

    With ``columns`` (keys of :data:`COLUMNS`, their analyses passed as in :func:`module_table`)
    each module line carries those statistics instead, additive ones with their share of the
    model's (``#params: 9.41K (0.1%), #flops: 118M (2.9%), time: 24.3 us (3.1%)``), as ptflops
    and DeepSpeed's profiler print a model."""
    if columns is not None:
        return _annotated_repr(Sources(flops, activations, memory, extra or {}), columns, number_format)
    sources = Sources(flops, activations)
    tree = sources.tree
    stats: dict[str, dict[str, Any]] = {
        "#params": _parameter_count(tree),
        "#flops": flops.by_module(),
    }
    uncalled = {"#flops": set(flops.uncalled_modules())}
    if activations is not None:
        stats["#acts"] = activations.by_module()
        uncalled["#acts"] = set(activations.uncalled_modules())
    any_uncalled = set().union(*uncalled.values())
    lines: dict[str, str] = {}
    for name in tree.names:
        values = {key: stat.get(name, 0) for key, stat in stats.items()}
        # fvcore keeps the root only when no module is uncalled; kept here for identical output
        keep = name in any_uncalled or (name == "" and not any_uncalled) or any(v != 0 for v in values.values())
        if keep:
            texts = {key: format_number(v, FVCORE_STR) for key, v in values.items()}
            for key, names in uncalled.items():
                if name in names and not values[key]:  # see _cells: containers keep their values
                    texts[key] = "N/A"
            lines[name] = ", ".join(f"{k}: {v}" for k, v in texts.items())
    text = _repr_with_lines(sources.model, "", lines)
    return (_NA_NOTE + "\n" + text) if any_uncalled else text


_SHORT_LABELS = {"params": "#params", "flops": "#flops", "activations": "#acts"}  # fvcore's


def _annotated_repr(sources: Sources, columns: Sequence[str | Column], fmt: NumberFormat) -> str:
    """``repr(model)`` with the chosen columns on every module that has a nonzero value, or
    that was never called (``N/A``); the model's own line always."""
    chosen = _columns(columns, sources)
    values = {c.key: c.modules(sources) for c in chosen}
    uncalled = {c.key: _uncalled(sources, c) for c in chosen}
    lines: dict[str, str] = {}
    for name in sources.tree.names:
        parts, shown = [], name == ""
        for c in chosen:
            value = values[c.key].get(name, 0 if c.additive else None)
            if name in uncalled[c.key] and not value:
                parts.append(f"{_SHORT_LABELS.get(c.key, c.header)}: N/A")
                shown = True
            elif value is not None:
                total = values[c.key].get("")
                share = f" ({100 * value / total:.1f}%)" if c.additive and _positive(total) else ""
                parts.append(f"{_SHORT_LABELS.get(c.key, c.header)}: {c.render(value, fmt)}{share}")
                shown = shown or bool(value)
        if shown:
            lines[name] = ", ".join(parts)
    text = _repr_with_lines(sources.model, "", lines)
    return (_NA_NOTE + "\n" + text) if any(": N/A" in line for line in lines.values()) else text


def _positive(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0


def _repr_with_lines(module: nn.Module, name: str, lines: Mapping[str, str]) -> str:
    """``repr(module)`` (nn.Module.__repr__'s layout) with ``lines[name]`` after each extra_repr."""
    extra = module.extra_repr()
    own = (extra.split("\n") if extra else []) + ([lines[name]] if name in lines else [])
    # _modules, not named_children(): repr shows every name of a shared child, and None children.
    children = []
    for key, child in module._modules.items():
        child_name = f"{name}.{key}" if name else key
        text = "None" if child is None else _repr_with_lines(child, child_name, lines)
        children.append(f"({key}): " + text.replace("\n", "\n  "))
    body = own + children
    head = module._get_name() + "("  # what repr() prints; subclasses may override it
    if len(own) == 1 and not children:
        return head + own[0] + ")"
    if body:
        return head + "\n  " + "\n  ".join(body) + "\n)"
    return head + ")"


def tree_str(
    analysis: Any,
    *,
    columns: Sequence[str | Column] = ("params", "flops"),
    max_depth: int = 3,
    activations: Any = None,
    memory: Any = None,
    extra: Mapping[str, Any] | None = None,
    number_format: NumberFormat = COMPACT,
) -> str:
    """The module tree, one line per module with aligned columns (3 significant figures):

    ``model (ResNet)  11.7M  1.82G`` / ``├─ conv1 (Conv2d)  9.41K  118M`` / ...

    Modules whose values are all zero (and whose descendants' are) are left out; ``N/A``
    marks a module the analysis never saw called.
    """
    check_max_depth(max_depth)
    sources = Sources(analysis, activations, memory, extra or {})
    chosen = _columns(columns, sources)
    values = {c.key: c.modules(sources) for c in chosen}
    layout = _layout(sources.tree, with_params=False)
    kept = _keep_nonzero(layout, values)
    cells = _cells(sources, chosen, values, [n for n in layout.order if n in kept], number_format, "N/A")
    tree = sources.tree

    def label(name: str) -> str:
        up = layout.parent[name]
        local = "model" if up is None else name[len(up) + 1 :] if up else name
        return f"{local} ({type(tree.module(name)).__name__})"

    lines: list[tuple[str, list[str]]] = []

    def walk(name: str, first: str, rest: str, level: int) -> None:
        lines.append((first + label(name), [cells[name].get(c.key, "") for c in chosen]))
        kids = [c for c in layout.children.get(name, ()) if c in cells] if level < max_depth else []
        for i, child in enumerate(kids):
            last = i == len(kids) - 1
            walk(child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), level + 1)

    walk("", "", "", 0)
    header = ("module", [c.header for c in chosen])
    widths = [max(len(row[0]) for row in [header, *lines])]
    widths += [max(len(row[1][i]) for row in [header, *lines]) for i in range(len(chosen))]
    text = "\n".join(
        "  ".join([row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(row[1], widths[1:]))]).rstrip()
        for row in [header, *lines]
    )
    if any("N/A" in row[1] for row in lines):
        text += "\nN/A: never called directly (unused, or run through .forward()); its cost is in its caller's."
    return text


# ================================================================================================
# The module x operator breakdown
# ================================================================================================
def _operator_rows(
    sources: Sources,
    columns: Sequence[Column],
    max_depth: int | None,
) -> list[tuple[str, str, dict[str, Any]]]:
    """(module, operator, {column key: value}) in module order, heaviest operator first."""
    for c in columns:
        if c.operators is None:
            raise ValueError(f"column {c.key!r} has no per-operator breakdown")
    tables = {c.key: c.operators(sources) for c in columns if c.operators is not None}
    layout = _layout(sources.tree, with_params=False)
    rows: list[tuple[str, str, dict[str, Any]]] = []
    for name in sources.tree.names:
        if max_depth is not None and layout.depth(name) > max_depth:
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
) -> str:
    """The long table: one row per module and operator (modules to ``max_depth`` levels,
    operators with a nonzero value, heaviest first)."""
    check_max_depth(max_depth, optional=True)
    sources = Sources(analysis, activations, memory, extra or {})
    chosen = _columns(columns, sources)
    rows = [
        [name or "model", op, *(c.render(v[c.key], number_format) for c in chosen)]
        for name, op, v in _operator_rows(sources, chosen, max_depth)
    ]
    return _pipe(["module", "operator", *(c.header for c in chosen)], rows)


# ================================================================================================
# Exports
# ================================================================================================
_EXACT_COLUMNS = ("params", "flops", "activations", "bytes_read", "bytes_written")


def _export_columns(sources: Sources, columns: Sequence[str | Column] | None) -> list[Column]:
    if columns is None:  # every exact statistic the given analyses have
        columns = [k for k in _EXACT_COLUMNS if all(sources.get(r) is not None for r in COLUMNS[k].needs)]
    return _columns(columns, sources)


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

    ``meta``: what the numbers were computed from (:func:`opcount.provenance.export_meta`: versions,
    model, inputs, tracer, preset, flops per mac, hardware), under the key ``"meta"``; a mapping
    replaces it, ``False`` leaves it out.
    """
    check_max_depth(max_depth, optional=True)
    sources = Sources(analysis, activations, memory, extra or {})
    chosen = _export_columns(sources, columns)
    values = {c.key: c.modules(sources) for c in chosen}
    layout = _layout(sources.tree, with_params=False)
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
        for name, op, v in _operator_rows(sources, op_columns, max_depth)
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
    raise ValueError(f"unknown level {level!r}; choose 'modules' or 'operators'")


def to_csv(analysis: Any, *, level: str = "modules", **kwargs: Any) -> str:
    """One CSV row per module (``level="modules"``) or per module and operator
    (``"operators"``), exact numbers, below ``# key: value`` lines saying what they were
    computed from (``meta=`` as in :func:`to_dict`). The model's own row is named ``"."``
    (:data:`opcount.provenance.CSV_ROOT`): an empty name would read back as NaN in pandas."""
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
    chosen = _columns(columns, sources)
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
        raise ValueError(f"unknown level {level!r}; choose 'modules' or 'operators'")
    values = {c.key: c.modules(sources) for c in chosen}
    layout = _layout(sources.tree, with_params=False)
    shown = [n for n in sources.tree.names if max_depth is None or layout.depth(n) <= max_depth]
    cells = _cells(sources, chosen, values, shown, number_format, "N/A")
    tree = sources.tree
    rows = [
        [f"`{n}`" if n else "model", type(tree.module(n)).__name__, *(cells[n].get(c.key, "") for c in chosen)]
        for n in shown
    ]
    aligns = ["left", "left", *(["right"] * len(chosen))]
    return tabulate.tabulate(
        rows,
        headers=["module", "type", *(c.header for c in chosen)],
        tablefmt="pipe",
        colalign=aligns,
        disable_numparse=True,
    )
