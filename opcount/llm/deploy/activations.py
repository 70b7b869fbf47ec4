"""The activations one device of a parallel layout holds at its peak: the phase's working set
(tensors alive at once, parameters and the cache excluded, views adding nothing), each tensor at
the share of it that device computes (``1 / tp`` in a split attention or MLP), counted on the
pipeline stage that writes it until its last use."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence

from ...handles.memory import Traffic
from ...ir import OpCall, TensorSpec


def peaks_per_stage(
    per_call: Sequence[tuple[OpCall, Traffic | None]],
    itemsize: Callable[[TensorSpec], float | None],
    stage: Callable[[OpCall], int],
    share: Callable[[OpCall], float],
    stages: int,
) -> list[float]:
    """The most bytes of activations alive at once on a device of each stage."""
    last: dict[int, int] = {}
    for i, (_, t) in enumerate(per_call):
        for s in _activations(t, both=True):
            last[s.id] = i  # type: ignore[index]  # _activations keeps tensors with an id
    ends: dict[int, list[int]] = defaultdict(list)
    for uid, i in last.items():
        ends[i].append(uid)
    held: dict[int, tuple[int, float]] = {}  # tensor -> (stage, bytes)
    live, peak = [0.0] * stages, [0.0] * stages
    for i, (call, t) in enumerate(per_call):
        where, part = stage(call), share(call)
        for s in _activations(t, both=False):
            if s.id is not None and s.id not in held:
                nbytes = _bytes(s, itemsize) * part
                held[s.id] = (where, nbytes)
                live[where] += nbytes
        peak[where] = max(peak[where], live[where])
        for uid in ends.get(i, ()):
            if uid in held:
                owner, nbytes = held[uid]
                live[owner] -= nbytes
    return peak


def _activations(t: Traffic | None, both: bool) -> list[TensorSpec]:
    """The activations ``t`` writes (``both``: or reads): no parameter, no cache, an id to follow."""
    if t is None:
        return []
    accesses = (*t.read, *t.write) if both else t.write
    return [a.tensor for a in accesses if a.tensor is not None and a.tensor.param is None and a.tensor.id is not None]


def _bytes(spec: TensorSpec, itemsize: Callable[[TensorSpec], float | None]) -> int:
    size = itemsize(spec)
    return math.ceil(spec.numel * (size if size is not None else spec.itemsize))  # whole bytes, as the phase counts
