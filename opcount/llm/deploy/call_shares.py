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
from .times import KernelCalls, Share

T = TypeVar("T")
PerCall = Sequence[tuple[OpCall, Traffic | None]]


class TracedCalls:
    """What one trace says whatever the layout: its calls, those touching the cache with the cache tensors each
    moves, and (once asked) the lifetimes of its activations at ``itemsize``."""

    def __init__(self, calls: Sequence[OpCall]) -> None:
        self.calls = calls
        self.cached = [(i, names) for i, call in enumerate(calls) if (names := device_cache.buffers(call))]
        self._lifetimes: tuple[PerCall, Any, Lifetimes] | None = None

    def lifetimes(self, per_call: PerCall, itemsize: Any) -> Lifetimes:
        """The activations' lifetimes in ``per_call`` (this trace's calls with their traffic), kept for the
        last ``per_call`` and ``itemsize`` asked (a phase has one of each)."""
        kept = self._lifetimes
        if kept is None or kept[0] is not per_call or kept[1] is not itemsize:
            kept = self._lifetimes = (per_call, itemsize, Lifetimes(per_call, itemsize))
        return kept[2]


class CallShares:
    """One trace (:class:`TracedCalls`) on one ``placement``, at ``tokens`` tokens a step: each call's stage and
    :class:`.times.Share`, the cache parts' shares (``kv``), the last call of each module whose output is
    communicated (``last``), and each stage's peak working set per traffic of the trace (:meth:`peaks`)."""

    def __init__(self, placement: Placement, traced: TracedCalls, tokens: int) -> None:
        self.placement, self.traced, self.tokens = placement, traced, tokens
        s = placement.sharding
        self.kv = placement.kv_shares([traced.calls[i] for i, _ in traced.cached])  # the calls moving the cache
        # a scope's share and stage, worked out once for the calls it runs (a layer's dozen operators)
        self._by_scope: dict[tuple[str, ...], tuple[int, Share]] = {}
        self.stages: list[int] = []
        self.shares: list[Share] = []
        for call in traced.calls:
            stage, share = self.of_scope(call.scope)
            self.stages.append(stage)
            self.shares.append(share)
        for i, names in traced.cached:
            share = self.shares[i]
            self.shares[i] = share._replace(held=device_cache.call_share(traced.calls[i], self.kv, names))
        self.last: dict[str, OpCall] = {}
        for call in traced.calls:
            for owner in call.scope:
                if owner in s.reduced or owner in s.experts:
                    self.last[owner] = call
        self._peaks: tuple[PerCall, list[float]] | None = None

    def of_scope(self, scope: tuple[str, ...]) -> tuple[int, Share]:
        """The stage running ``scope`` and the share of its work a device runs."""
        found = self._by_scope.get(scope)
        if found is None:
            found = self._by_scope[scope] = (self.placement.stage(scope), share_of(self.placement, scope, self.tokens))
        return found

    def peaks(self, per_call: PerCall) -> list[float]:
        """The most bytes of activations alive at once on a device of each stage (:mod:`.activations`), for
        ``per_call``: this trace's calls with their traffic."""
        kept = self._peaks
        if kept is None or kept[0] is not per_call:  # kept for the last asked: a phase has one
            lifetimes = self.traced.lifetimes(per_call, self.placement.pricing)
            where = [self.of_scope(call.scope) for call, _ in per_call]
            peaks = lifetimes.peaks([w[0] for w in where], [w[1].work for w in where], self.placement.parallel.pp)
            kept = self._peaks = (per_call, peaks)
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
