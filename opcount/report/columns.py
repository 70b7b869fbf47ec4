"""The columns a report can show, by key: the registry (:data:`COLUMNS`, :func:`register_column`)
and the built-in statistics (parameters, flops, activations, bytes, intensity, share of flops).

A :class:`Column` reads the analyses it needs from :class:`Sources` by role; a registered one
(the roofline's time columns, the sparsity columns) reads its own from ``extra={"<role>": ...}``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from torch import nn

from ..errors import OpcountTypeError, OpcountValueError
from ..scopes import ModuleTree
from ..units import NumberFormat, exact, format_number, unprefixed
from .parameters import parameter_counts

__all__ = [
    "COLUMNS",
    "Column",
    "Sources",
    "Values",
    "flops_unit",
    "register_column",
    "resolve_columns",
    "uncalled_rows",
    "with_unit",
]

Values = Mapping[str, Any]  # row name -> number (None: undefined there)


def _render_count(x: Any, fmt: NumberFormat) -> str:
    return "" if x is None else format_number(x, fmt)


def _render_percent(x: Any, fmt: NumberFormat) -> str:
    if x is None:
        return ""
    return str(exact(x)) if fmt.unit == "exact" else f"{x:.1f}%"


def _render_ratio(x: Any, fmt: NumberFormat) -> str:
    if x is None:
        return ""
    return str(exact(x)) if fmt.unit == "exact" else unprefixed(x, 3)


class ModuleStatistics(Protocol):
    """What a report reads from a counting analysis (``ActivationCountAnalysis``)."""

    def by_module(self) -> Mapping[str, Any]: ...

    def by_module_and_operator(self) -> Mapping[str, Mapping[str, Any]]: ...


class ModelStatistics(ModuleStatistics, Protocol):
    """The analysis a report is built on (``FlopCountAnalysis``): its counts, model and module tree."""

    @property
    def model(self) -> nn.Module: ...

    @property
    def module_tree(self) -> ModuleTree: ...


class TrafficStatistics(Protocol):
    """What a report reads from ``MemoryTrafficAnalysis``: bytes by ``kind`` (read, write, both)."""

    def by_module(self, kind: str = ...) -> Mapping[str, Any]: ...

    def by_module_and_operator(self, kind: str = ...) -> Mapping[str, Mapping[str, Any]]: ...


_S = TypeVar("_S")


def _given(analysis: _S | None, role: str) -> _S:
    """An optional analysis a column needs; resolve_columns has already refused a missing one."""
    if analysis is None:
        raise OpcountValueError(f"this column needs the {role} analysis")
    return analysis


@dataclass(frozen=True)
class Sources:
    """The analyses a report reads, by role. ``flops`` also gives the model and its module tree;
    ``extra`` holds the analyses of registered columns (e.g. ``{"roofline": ...}``)."""

    flops: ModelStatistics
    activations: ModuleStatistics | None = None
    memory: TrafficStatistics | None = None
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

    @property
    def traffic(self) -> TrafficStatistics:
        return _given(self.memory, "memory")

    @property
    def activation_counts(self) -> ModuleStatistics:
        return _given(self.activations, "activations")


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
        return s.traffic.by_module(kind=kind)

    def operators(s: Sources) -> Mapping[str, Values]:
        return s.traffic.by_module_and_operator(kind=kind)

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
    flops, moved = s.flops.by_module_and_operator(), s.traffic.by_module_and_operator(kind="both")
    return {m: _ratio(flops.get(m, {}), ops) for m, ops in moved.items()}


COLUMNS: dict[str, Column] = {}


def register_column(column: Column, *, replace: bool = False) -> Column:
    """Make ``column`` available by its key to every report (``columns=(..., key)``)."""
    if column.key in COLUMNS and not replace:
        raise OpcountValueError(f"a column {column.key!r} is already registered")
    COLUMNS[column.key] = column
    return column


for _column in (
    Column("params", "#parameters", (), lambda s: parameter_counts(s.tree)),
    Column("flops", "#flops", ("flops",), _flops, lambda s: s.flops.by_module_and_operator()),
    Column(
        "activations",
        "#activations",
        ("activations",),
        lambda s: s.activation_counts.by_module(),
        lambda s: s.activation_counts.by_module_and_operator(),
    ),
    Column("bytes_read", "#bytes read", ("memory",), *_bytes("read")),
    Column("bytes_written", "#bytes written", ("memory",), *_bytes("write")),
    Column("bytes", "#bytes", ("memory",), *_bytes("both")),
    Column(
        "intensity",
        "flops/byte",
        ("flops", "memory"),
        lambda s: _ratio(s.flops.by_module(), s.traffic.by_module(kind="both")),
        _intensity_operators,
        _render_ratio,
        additive=False,
    ),
    Column("percent", "% flops", ("flops",), _percent_modules, _percent_operators, _render_percent, additive=False),
):
    register_column(_column)


def flops_unit(flops_per_mac: object) -> str:
    """What a count is in: ``MACs`` under fvcore's convention (a multiply-add counts 1), ``FLOPs``
    when it counts 2; ``flops`` when the convention is unknown."""
    return {1: "MACs", 2: "FLOPs"}.get(flops_per_mac, "flops") if isinstance(flops_per_mac, int) else "flops"


def with_unit(column: Column, flops_per_mac: object) -> Column:
    """``column`` with the word ``flops`` of its header replaced by its unit (``#flops`` -> ``#MACs``)."""
    header = re.sub(r"\bflops\b", flops_unit(flops_per_mac), column.header)
    return column if header == column.header else dataclasses.replace(column, header=header)


def resolve_columns(keys: Iterable[str | Column], sources: Sources, *, units: bool = True) -> list[Column]:
    """The columns named by ``keys``, each header saying its count's unit (:func:`with_unit`;
    ``units=False`` keeps fvcore's ``#flops``); a ValueError names an unknown one, or one whose
    analysis ``sources`` lacks."""
    if isinstance(keys, str):  # iterated, "flops" was the columns 'f', 'l', ...
        raise OpcountTypeError(f"columns must be a list of column names, got the string {keys!r}: write [{keys!r}]")
    chosen = []
    for key in keys:
        column = key if isinstance(key, Column) else COLUMNS.get(key)
        if column is None:
            raise OpcountValueError(f"unknown column {key!r}; choose from {', '.join(COLUMNS)}")
        for role in column.needs:
            if sources.get(role) is None:
                how = f"{role}=..." if role in ("activations", "memory") else f"extra={{{role!r}: ...}}"
                raise OpcountValueError(f"column {column.key!r} needs the {role} analysis; pass {how}")
        chosen.append(with_unit(column, getattr(sources.flops, "flops_per_mac", None)) if units else column)
    if len({c.key for c in chosen}) != len(chosen):
        raise OpcountValueError(f"a column is named twice in {[c.key for c in chosen]}")
    return chosen


def uncalled_rows(sources: Sources, column: Column) -> set[str]:
    """The modules that one of ``column``'s analyses never saw called."""
    found: set[str] = set()
    for role in column.needs:
        query = getattr(sources.get(role), "uncalled_modules", None)  # optional for extra analyses
        found |= set(query()) if query is not None else set()
    return found
