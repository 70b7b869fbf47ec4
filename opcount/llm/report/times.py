"""A phase's estimate attributed to the operator calls its kernels run, rolled up by module and operator:
the times of the LLM path's module table and ``--by-operator`` rows, which add up to the estimate.

Each kernel takes ``max(compute, memory) + launch`` (:mod:`.kernels`). That time is split over the
kernel's member calls by each call's share of what limits the kernel, the call's figures taken as
its own kernel's (the eager roofline, :attr:`.PhaseCost.roofline`): its compute seconds where the
kernel's compute is the larger, its bytes where its memory is. A fused GEMM that reads its weights
(decode) thus gives its time to its projections by their weights' bytes and almost none to the norm
in its prologue; one that computes (prefill) by their FLOPs. A kernel whose calls have none of the
binding figure splits by the other, and one with neither (a launch alone) evenly. The launch is
split with the rest.

Each call's seconds roll up into every module that owns it, as the other columns of a table do; the
model's own row is the schedule's estimate itself, so the table's ``whole model`` reads exactly the
summary's time (the parts sum to it up to float rounding). The ``bound`` of a module, an operator
or the model is what limits the kernels holding most of its time (where it has none, most of its calls).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...errors import OpcountValueError
from ...handles.op_keys import op_key
from ...handles.registry import FLOPS
from ...report.columns import Column, Sources
from ...units import seconds
from ..phases import PhaseCost

ROLE = "kernels"  # the report role the columns read (``extra={"kernels": KernelTimes(...)}``)


@dataclass(frozen=True)
class Row:
    """Calls rolled up: seconds of the estimate and what limits the kernels they ran in."""

    time: float
    limited_by: str


@dataclass(frozen=True)
class CallTime:
    """One call's part of its kernel: ``seconds`` of the estimate, ``limited_by`` (what limits the kernel),
    the operator and the modules that own it (the model first)."""

    call: int
    seconds: float
    limited_by: str
    op: str
    owners: tuple[str, ...]


def call_times(cost: PhaseCost) -> list[CallTime]:
    """Every member call of the chosen mode's kernels with its part of the kernel's time (module
    docstring), in launch order; needs hardware."""
    schedule, report = cost.schedule, cost.roofline
    if schedule is None or report is None:
        return []
    calls = cost.flops.trace().calls
    tree = cost.flops.module_tree
    timed = {id(t.layer.call): t for t in report.layers if t.layer.call is not None}
    compute, memory = schedule.compute_memory()
    launch = schedule.hardware.efficiency.launch_s
    out: list[CallTime] = []
    for k, kernel in enumerate(schedule.kernels):
        c, m = float(compute[k]), float(memory[k])
        limited_by = "compute" if c >= m and c > 0 else "memory"
        members = list(kernel.calls)
        own = [timed.get(id(calls[i])) for i in members]
        by_compute = [t.compute_time if t is not None else 0.0 for t in own]
        by_bytes = [t.layer.bytes if t is not None else 0.0 for t in own]
        weights = by_compute if limited_by == "compute" else by_bytes
        if not sum(weights):
            weights = by_bytes if limited_by == "compute" else by_compute
        if not sum(weights):
            weights = [1.0] * len(members)
        total, whole = sum(weights), max(c, m) + launch
        for i, w, t in zip(members, weights, own, strict=True):
            call = calls[i]
            op = t.layer.op if t is not None else _op(call.kind)
            out.append(CallTime(i, whole * w / total, limited_by, op, tree.owners(call.scope[-1])))
    return out


def _op(kind: str) -> str:
    """An operator's key, as the roofline names it (a view has no layer of its own)."""
    name: str | None = getattr(FLOPS.handles.get(kind), "name", None)
    return name or op_key(kind)


def _row(parts: Iterable[CallTime]) -> Row:
    time = {"compute": 0.0, "memory": 0.0}
    calls = {"compute": 0.0, "memory": 0.0}
    for p in parts:
        time[p.limited_by] += p.seconds
        calls[p.limited_by] += 1
    weigh = time if sum(time.values()) else calls
    return Row(sum(time.values()), "compute" if weigh["compute"] >= weigh["memory"] else "memory")


class KernelTimes:
    """The estimate of ``cost``'s chosen kernels (``mode``) by module, module and operator, and
    operator (:func:`call_times`); ``time`` is the schedule's estimate, the model's row."""

    def __init__(self, cost: PhaseCost) -> None:
        if cost.schedule is None or cost.roofline is None:
            raise OpcountValueError("KernelTimes needs a phase priced on hardware (hardware=...)")
        self.mode = cost.kernels
        self.time = cost.schedule.time
        self.parts = call_times(cost)
        self._uncalled = cost.roofline.uncalled_modules()

    def by_module(self) -> dict[str, Row]:
        """Module -> its row, for every module owning a kernel's call; the model's (``""``) is the estimate."""
        groups: dict[str, list[CallTime]] = {}
        for p in self.parts:
            for owner in p.owners:
                groups.setdefault(owner, []).append(p)
        rows = {name: _row(parts) for name, parts in groups.items()}
        rows[""] = Row(self.time, rows[""].limited_by if "" in rows else "memory")
        return rows

    def by_module_and_operator(self) -> dict[str, dict[str, Row]]:
        groups: dict[str, dict[str, list[CallTime]]] = {}
        for p in self.parts:
            for owner in p.owners:
                groups.setdefault(owner, {}).setdefault(p.op, []).append(p)
        return {m: {op: _row(parts) for op, parts in ops.items()} for m, ops in groups.items()}

    def by_operator(self) -> dict[str, Row]:
        """Operator -> its row, in order of first call."""
        groups: dict[str, list[CallTime]] = {}
        for p in sorted(self.parts, key=lambda p: p.call):
            groups.setdefault(p.op, []).append(p)
        return {op: _row(parts) for op, parts in groups.items()}

    # The analyses' protocol, for the report's blank cells and its unsupported operators.
    def uncalled_modules(self) -> set[str]:
        return set(self._uncalled)

    def unsupported_ops(self, module_name: str = "") -> Counter[str]:
        return Counter()


def columns(mode: str) -> dict[str, Column]:
    """The table's time columns of ``mode``'s estimate, by the key a user names (``time``,
    ``time_share``, ``bound``); their own keys and headers say the mode (``time_fused``,
    ``time (fused)``), in the table, JSON and CSV alike."""

    def times(s: Sources) -> Mapping[str, Any]:
        return {name: row.time for name, row in s.get(ROLE).by_module().items()}

    def op_times(s: Sources) -> Mapping[str, Mapping[str, Any]]:
        return {m: {op: r.time for op, r in ops.items()} for m, ops in s.get(ROLE).by_module_and_operator().items()}

    def shares(s: Sources) -> Mapping[str, Any]:
        total = s.get(ROLE).time
        return {name: 100 * t / total if total > 0 else None for name, t in times(s).items()}

    def op_shares(s: Sources) -> Mapping[str, Mapping[str, Any]]:
        total = s.get(ROLE).time
        return {
            m: {op: 100 * t / total if total > 0 else None for op, t in ops.items()} for m, ops in op_times(s).items()
        }

    def limits(s: Sources) -> Mapping[str, Any]:
        return {name: row.limited_by for name, row in s.get(ROLE).by_module().items()}

    def op_limits(s: Sources) -> Mapping[str, Mapping[str, Any]]:
        return {
            m: {op: r.limited_by for op, r in ops.items()} for m, ops in s.get(ROLE).by_module_and_operator().items()
        }

    return {
        "time": Column(f"time_{mode}", f"time ({mode})", (ROLE,), times, op_times, _seconds_cell),
        "time_share": Column(
            f"time_share_{mode}", f"% time ({mode})", (ROLE,), shares, op_shares, _percent_cell, additive=False
        ),
        "bound": Column(f"bound_{mode}", f"bound ({mode})", (ROLE,), limits, op_limits, _text_cell, additive=False),
    }


def _seconds_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else seconds(x)


def _percent_cell(x: Any, fmt: Any) -> str:
    return "" if x is None else f"{x:.1f}%"


def _text_cell(x: Any, fmt: Any) -> str:
    return "" if x is None else str(x)
