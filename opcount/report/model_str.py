"""The model drawn as a tree: fvcore's ``flop_count_str`` (``repr(model)`` with each module's
statistics, any columns too) and ``tree_str``, a compact tree with aligned columns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from ..units import COMPACT, FVCORE_STR, NumberFormat, format_number
from .columns import Column, Sources, resolve_columns, uncalled_rows
from .parameters import parameter_counts
from .rows import build_row_tree, check_max_depth, format_cells, keep_nonzero

__all__ = ["flop_count_str", "tree_str"]

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
        "#params": parameter_counts(tree),
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
                if name in names and not values[key]:  # see format_cells: containers keep their values
                    texts[key] = "N/A"
            lines[name] = ", ".join(f"{k}: {v}" for k, v in texts.items())
    text = _repr_with_lines(sources.model, "", lines)
    return (_NA_NOTE + "\n" + text) if any_uncalled else text


_SHORT_LABELS = {"params": "#params", "activations": "#acts"}  # fvcore's; counts say their unit (#MACs)


def _annotated_repr(sources: Sources, columns: Sequence[str | Column], fmt: NumberFormat) -> str:
    """``repr(model)`` with the chosen columns on every module that has a nonzero value, or
    that was never called (``N/A``); the model's own line always."""
    chosen = resolve_columns(columns, sources)
    values = {c.key: c.modules(sources) for c in chosen}
    uncalled = {c.key: uncalled_rows(sources, c) for c in chosen}
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
    # what repr() prints; subclasses may override it. torch leaves _get_name unannotated.
    head: str = module._get_name() + "("  # type: ignore[no-untyped-call]
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
    chosen = resolve_columns(columns, sources)
    values = {c.key: c.modules(sources) for c in chosen}
    row_tree = build_row_tree(sources.tree, with_params=False)
    kept = keep_nonzero(row_tree, values)
    cells = format_cells(sources, chosen, values, [n for n in row_tree.order if n in kept], number_format, "N/A")
    tree = sources.tree

    def label(name: str) -> str:
        up = row_tree.parent[name]
        local = "model" if up is None else name[len(up) + 1 :] if up else name
        return f"{local} ({type(tree.module(name)).__name__})"

    lines: list[tuple[str, list[str]]] = []

    # Pre-order with a stack (a model may nest deeper than Python's recursion limit): each row with
    # its own prefix, the prefix of its children's, and its level.
    pending = [("", "", "", 0)]
    while pending:
        name, first, rest, level = pending.pop()
        lines.append((first + label(name), [cells[name].get(c.key, "") for c in chosen]))
        kids = [c for c in row_tree.children.get(name, ()) if c in cells] if level < max_depth else []
        for i, child in reversed(list(enumerate(kids))):
            last = i == len(kids) - 1
            pending.append((child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "), level + 1))
    header = ("module", [c.header for c in chosen])
    widths = [max(len(row[0]) for row in [header, *lines])]
    widths += [max(len(row[1][i]) for row in [header, *lines]) for i in range(len(chosen))]
    text = "\n".join(
        "  ".join(
            [row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(row[1], widths[1:], strict=True))]
        ).rstrip()
        for row in [header, *lines]
    )
    if any("N/A" in row[1] for row in lines):
        text += "\nN/A: never called directly (unused, or run through .forward()); its cost is in its caller's."
    return text
