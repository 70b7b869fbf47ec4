"""A simulation's schedule as a timeline: :class:`Schedule` records the engine's steps as the scheduler runs
them (its ``on_step`` observer), :func:`chrome_trace` lays them out in Chrome's trace-event format, which
Perfetto (ui.perfetto.dev) and chrome://tracing load, with the conventions of opcount's operator timeline
(:mod:`opcount.report.trace`): complete events (``"ph": "X"``), microseconds, names in metadata events.

One process, ``engine``, holds one track of steps: an event a step, lasting its priced time, with its decode
sequences, prompt tokens and chunks. A second, ``requests``, holds a track a request with its spans: queued
(arrival to the first step that ran it), prefill (to its first token) and decode (to its last token), a
preemption and its recompute inside the span it interrupted (``args`` count the request's preemptions). Only
the first ``limit`` steps are kept (100,000 by default: a file of some tens of MB), the requests that started
in them, their spans cut at the last kept step's end."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...errors import OpcountValueError
from .step_cost import Step

DEFAULT_LIMIT = 100_000  # steps kept: Perfetto opens a file of that many events at once
_US = 1e6  # the format's unit: microseconds
_ENGINE, _REQUESTS = 1, 2  # the two processes (pid)
_STEPS = 1  # the engine's one track (tid)


class Schedule:
    """The first ``limit`` steps of a run (start, seconds, work), how many there were in all, and the start of
    the first step that ran each request; called by the scheduler after each step."""

    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise OpcountValueError(f"a schedule keeps a whole number of steps from 1, got {limit!r}")
        self.limit = limit
        self.steps: list[tuple[float, float, Step]] = []
        self.total = 0
        self.started: dict[int, float] = {}

    def __call__(self, start: float, seconds: float, step: Step, requests: list[int]) -> None:
        self.total += 1
        if len(self.steps) >= self.limit:
            return
        self.steps.append((start, seconds, step))
        for index in requests:
            self.started.setdefault(index, start)

    @property
    def end(self) -> float:
        """The end of the last step kept (seconds)."""
        return self.steps[-1][0] + self.steps[-1][1] if self.steps else 0.0


def chrome_trace(schedule: Schedule, requests: Sequence[Mapping[str, float]], *, name: str = "") -> dict[str, Any]:
    """``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``: a step event (``cat: "step"``)
    per step kept and a request's spans (``cat: "request"``) from ``requests``, the simulation's rows a request
    (its index, arrival, TTFT and E2E latency in seconds); ``name`` labels the engine's process."""
    events: list[dict[str, Any]] = [
        _metadata("process_name", _ENGINE, _STEPS, f"engine{f': {name}' if name else ''}"),
        _metadata("thread_name", _ENGINE, _STEPS, "steps"),
        _metadata("process_name", _REQUESTS, 0, "requests"),
    ]
    for n, (start, seconds, step) in enumerate(schedule.steps):
        prefill = sum(new for _, new in step.chunks)
        label = f"{step.decode} decode" + (f" + {prefill} prefill" if prefill else "")
        args = {
            "step": n, "decode": step.decode, "kv_tokens": step.kv_tokens, "prefill_tokens": prefill,
            "chunks": len(step.chunks), "seconds": seconds,
        }  # fmt: skip
        events.append(_event(label, "step", _ENGINE, _STEPS, start, start + seconds, args))
    end = schedule.end
    for row in requests:
        index = int(row["index"])
        started = schedule.started.get(index)
        if started is None:  # it first ran after the last step kept
            continue
        tid = index + 1
        events.append(_metadata("thread_name", _REQUESTS, tid, f"request {index}"))
        arrival = row["arrival"]
        first, last = arrival + row["ttft"], arrival + row["e2el"]
        args = {"request": index, "preemptions": int(row.get("preempted", 0))}
        for span, begin, until in (("queued", arrival, started), ("prefill", started, first), ("decode", first, last)):
            until = min(until, end)
            if until > begin:
                events.append(_event(span, "request", _REQUESTS, tid, begin, until, args))
    other = {
        "steps": schedule.total, "steps_kept": len(schedule.steps), "truncated": schedule.total > len(schedule.steps),
        "end_s": end,
    }  # fmt: skip
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": other}


def _metadata(kind: str, pid: int, tid: int, value: str) -> dict[str, Any]:
    return {"ph": "M", "name": kind, "pid": pid, "tid": tid, "args": {"name": value}}


def _event(name: str, cat: str, pid: int, tid: int, start: float, end: float, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": name, "cat": cat, "ph": "X", "ts": start * _US, "dur": (end - start) * _US, "pid": pid, "tid": tid,
        "args": args,
    }  # fmt: skip
