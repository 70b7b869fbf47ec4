"""A traced phase on a layout, worked out once whatever the device it is priced on: each call's pipeline stage
and the share of it a device runs (:func:`.placement.share_of`; a call moving the cache at its part's share,
:mod:`.cache_shares`), the cache parts' shares, the last call of each reduced module and experts block (where
its collective is sent) and each stage's peak working set (:mod:`.activations`).

A search deploys one phase on many layouts, and prices it on several devices from one trace; what depends on
the trace and the layout alone is kept with the phase (:attr:`.phases.PhaseCost.layouts`, a dict its pricings
on other devices share with it), one entry a layout, and what depends on the trace alone (the calls touching the
cache, the tensors' lifetimes) once for all layouts. Only the per-device arithmetic (:mod:`.times`, the
collectives' seconds, the fit against a device's memory) is done again per deployment.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ...handles.memory import Traffic
from ...ir import OpCall
from ..phases import PhaseCost
from . import cache_shares as device_cache
from .activations import Lifetimes
from .placement import Placement, share_of
from .times import KernelCalls, Shares

T = TypeVar("T")
PerCall = Sequence[tuple[OpCall, Traffic | None]]


class TracedCalls:
    """What one trace says whatever the layout: its calls, the distinct scopes they run in (``scopes``, and each
    call's index into them), the last call each module runs (modules in the order they first run), the calls
    touching the cache with the cache tensors each moves, and (once asked) its activations' lifetimes."""

    def __init__(self, calls: Sequence[OpCall]) -> None:
        self.calls = calls
        index: dict[tuple[str, ...], int] = {}
        self.scope_of = [index.setdefault(call.scope, len(index)) for call in calls]
        self.scopes = list(index)
        self.last: dict[str, int] = {}  # a module -> its last call; ordered by each module's first call
        for i, call in enumerate(calls):
            for owner in call.scope:
                self.last[owner] = i
        self.cached = [(i, names) for i, call in enumerate(calls) if (names := device_cache.buffers(call))]
        self._lifetimes: tuple[PerCall, Any, Lifetimes] | None = None

    def lifetimes(self, per_call: PerCall, itemsize: Any) -> Lifetimes:
        """The activations' lifetimes in ``per_call`` (this trace's calls with their traffic), kept for the
        last ``per_call`` and ``itemsize`` asked (a phase has one of each)."""
        kept = self._lifetimes
        if kept is None or kept[0] is not per_call or kept[1] is not itemsize:
            kept = self._lifetimes = (per_call, itemsize, Lifetimes(per_call, itemsize))
        return kept[2]

    def runs(self, per_call: PerCall) -> bool:
        """Whether ``per_call`` holds this trace's calls, in order (a traffic analysis of this trace)."""
        return len(per_call) == len(self.calls) and all(c is d for (c, _), d in zip(per_call, self.calls, strict=True))


class CallShares:
    """One trace (:class:`TracedCalls`) on one ``placement``, at ``tokens`` tokens a step: each call's stage and
    :class:`.times.Share`, the cache parts' shares (``kv``), the last call of each module whose output is
    communicated (``last``), and each stage's peak working set per traffic of the trace (:meth:`peaks`)."""

    def __init__(self, placement: Placement, traced: TracedCalls, tokens: int) -> None:
        self.placement, self.traced, self.tokens = placement, traced, tokens
        s = placement.sharding
        self.kv = placement.kv_shares([traced.calls[i] for i, _ in traced.cached])  # the calls moving the cache
        # each scope's stage and share worked out once for the calls it runs (a layer's dozen operators)
        scope_stage = [placement.stage(scope) for scope in traced.scopes]
        scope_share = [share_of(placement, scope, tokens) for scope in traced.scopes]
        self.stages = [scope_stage[j] for j in traced.scope_of]
        self.shares = [scope_share[j] for j in traced.scope_of]
        for i, names in traced.cached:
            share = self.shares[i]
            self.shares[i] = share._replace(held=device_cache.call_share(traced.calls[i], self.kv, names))
        self.arrays = Shares.of(self.stages, self.shares)  # as the kernels' figures read them (:mod:`.times`)
        self.last = {o: traced.calls[i] for o, i in traced.last.items() if o in s.reduced or o in s.experts}
        self._peaks: tuple[PerCall, list[float]] | None = None

    def peaks(self, per_call: PerCall) -> list[float]:
        """The most bytes of activations alive at once on a device of each stage (:mod:`.activations`), for
        ``per_call``: this trace's calls with their traffic."""
        kept = self._peaks
        if kept is None or kept[0] is not per_call:  # kept for the last asked: a phase has one
            lifetimes = self.traced.lifetimes(per_call, self.placement.pricing)
            if self.traced.runs(per_call):
                stages, works = self.stages, [share.work for share in self.shares]
            else:  # another trace's calls: each at its own scope's
                p, tokens = self.placement, self.tokens
                stages = [p.stage(call.scope) for call, _ in per_call]
                works = [share_of(p, call.scope, tokens).work for call, _ in per_call]
            kept = self._peaks = (per_call, lifetimes.peaks(stages, works, self.placement.parallel.pp))
        return kept[1]


_CALLS = "calls"  # the key of the trace's own figures among the phase's layouts (keyed by layout)


def traced_calls(cost: PhaseCost) -> TracedCalls:
    """The phase's trace as every layout reads it, worked out once (kept with the phase)."""
    calls = cost.flops.trace().calls
    return _kept(cost.layouts, _CALLS, lambda t: t.calls is calls, lambda: TracedCalls(calls))


def call_shares(cost: PhaseCost, placement: Placement) -> CallShares:
    """The phase on ``placement``, worked out once per layout (kept with the phase)."""
    traced = traced_calls(cost)
    return _kept(
        cost.layouts,
        placement.parallel,
        lambda c: c.placement is placement and c.traced is traced and c.tokens == cost.tokens,
        lambda: CallShares(placement, traced, cost.tokens),
    )


def kernel_calls(cost: PhaseCost) -> KernelCalls:
    """The phase's kernels as every layout reads them, worked out once per device and kernels priced (kept with
    the phase); the phase must be priced on hardware."""
    schedule, report = cost.schedule, cost.roofline
    assert schedule is not None and report is not None  # the caller prices only a phase on hardware
    calls = cost.flops.trace().calls
    return _kept(
        cost.layouts,
        (_KERNELS, id(schedule)),  # the entry holds the schedule: its id names no other while kept
        lambda k: k.schedule is schedule and k.report is report,
        lambda: KernelCalls(schedule, report, calls),
    )


_KERNELS = "kernels"


def _kept(memo: dict[Any, Any], key: Any, valid: Callable[[Any], bool], make: Callable[[], T]) -> T:
    """``memo[key]`` where ``valid`` says it is still what ``make`` would build (the same trace, the same
    model's placement), else built and kept."""
    found = memo.get(key)
    if found is None or not valid(found):
        found = memo[key] = make()
    result: T = found
    return result
