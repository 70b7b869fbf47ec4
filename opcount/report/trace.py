"""The roofline as a timeline: Chrome's trace-event format, which Perfetto (ui.perfetto.dev) and
chrome://tracing load.

One complete event (``"ph": "X"``) per operator call, lasting its predicted speed-of-light time,
laid end to end in call order from 0, so the events' durations sum to the roofline's total; each
module call is an enclosing event from its first operator's start to its last one's end, so a
module's event lasts its time. Times are in microseconds, as the format wants (Google's "Trace
Event Format" document). Pure: a :class:`~opcount.roofline.RooflineReport` in, plain data out.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..errors import OpcountTypeError
from .exports import ROOT
from .rows import check_kind

if TYPE_CHECKING:
    from ..roofline.report import LayerTime, RooflineReport

__all__ = ["to_chrome_trace", "to_chrome_trace_json"]

_US = 1e6  # the format's unit: microseconds
_PID, _TID = 1, 1


def to_chrome_trace(report: RooflineReport, *, name: str | None = None) -> dict[str, Any]:
    """``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``: an operator event
    (``cat: "operator"``, named by its operator key, ``args`` with its module, flops, bytes, bound
    and unit) per call that computes or moves bytes, and a module event (``cat: "module"``, the
    model named ``"."``) around each run of calls in one module. Calls that do neither (views)
    take no time and have no event; a call the roofline splits in two (a convolution backward's
    bias sum) is one event. A pipelined call hidden behind its group lasts 0. ``name`` labels the
    process (default: the hardware)."""
    check_kind("report", report, ("hardware", "layers", "dtype", "total_time"), "a RooflineReport (opcount.roofline)")
    if name is not None and not isinstance(name, str):
        raise OpcountTypeError(f"name must be a str or None, got {type(name).__name__}")
    events: list[dict[str, Any]] = [_metadata("process_name", name or report.hardware.name)]
    events.append(_metadata("thread_name", f"speed of light on {report.hardware.name} ({report.dtype})"))
    open_scopes: list[tuple[str, float]] = []  # the module stack: (name, start)
    clock = 0.0
    for times in _calls(report.layers):
        scope = _scope(times[0])
        depth = _common(open_scopes, scope)
        while len(open_scopes) > depth:
            events.append(_module_event(*open_scopes.pop(), clock))
        open_scopes.extend((module, clock) for module in scope[depth:])
        duration = sum(t.effective_time for t in times) * _US
        events.append(_operator_event(times, clock, duration))
        clock += duration
    while open_scopes:
        events.append(_module_event(*open_scopes.pop(), clock))
    other = {"hardware": report.hardware.name, "dtype": report.dtype, "total_time_s": report.total_time}
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def to_chrome_trace_json(report: RooflineReport, *, name: str | None = None) -> str:
    """:func:`to_chrome_trace` as JSON text (write it to ``model.trace.json`` and open it in Perfetto)."""
    return json.dumps(to_chrome_trace(report, name=name))


def _calls(layers: tuple[LayerTime, ...]) -> list[list[LayerTime]]:
    """The layers grouped by the operator call they came from (consecutive, the same call)."""
    groups: list[list[LayerTime]] = []
    for t in layers:
        if groups and t.layer.call is not None and groups[-1][0].layer.call is t.layer.call:
            groups[-1].append(t)
        else:
            groups.append([t])
    return groups


def _scope(t: LayerTime) -> tuple[str, ...]:
    """The modules running when the call ran, the model first: the call's scope (what called what),
    else the layer's owners (hand-made layers)."""
    chain = t.layer.call.scope if t.layer.call is not None else t.layer.owners
    return tuple(dict.fromkeys(("", *chain)))


def _common(stack: list[tuple[str, float]], scope: tuple[str, ...]) -> int:
    depth = 0
    while depth < min(len(stack), len(scope)) and stack[depth][0] == scope[depth]:
        depth += 1
    return depth


def _metadata(kind: str, value: str) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": _PID, "tid": _TID, "args": {"name": value}}


def _module_event(module: str, start: float, end: float) -> dict[str, Any]:
    return {
        "name": module or ROOT,
        "cat": "module",
        "ph": "X",
        "ts": start,
        "dur": end - start,
        "pid": _PID,
        "tid": _TID,
        "args": {"module": module or ROOT},
    }


def _operator_event(times: list[LayerTime], start: float, duration: float) -> dict[str, Any]:
    first = times[0]
    layer = first.layer
    args = {
        "module": layer.module or ROOT,
        "kind": layer.call.kind if layer.call is not None else layer.op,
        "flops": sum(t.layer.flops for t in times),
        "bytes": sum(t.layer.bytes for t in times),
        "bound": first.limited_by,
        "unit": layer.unit,
        "time_s": sum(t.effective_time for t in times),
    }
    return {
        "name": layer.op,
        "cat": "operator",
        "ph": "X",
        "ts": start,
        "dur": duration,
        "pid": _PID,
        "tid": _TID,
        "args": args,
    }
