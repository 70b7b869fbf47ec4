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

ItemSize = Callable[[TensorSpec], float | None]


class Lifetimes:
    """The activations of a phase's calls (``per_call``: each call with the tensors it reads and writes) as the
    layouts read them, worked out once: the tensors each call writes first, with their bytes at ``itemsize``
    (whole, before a device's share), and those each call touches last."""

    def __init__(self, per_call: Sequence[tuple[OpCall, Traffic | None]], itemsize: ItemSize) -> None:
        last: dict[int, int] = {}
        for i, (_, t) in enumerate(per_call):
            for s in _activations(t, both=True):
                last[s.id] = i  # type: ignore[index]  # _activations keeps tensors with an id
        self.ends: dict[int, list[int]] = defaultdict(list)
        for uid, i in last.items():
            self.ends[i].append(uid)
        self.born: list[list[tuple[int, int]]] = []  # per call: (tensor, bytes) of those it writes first
        seen: set[int] = set()
        for _, t in per_call:
            born = []
            for s in _activations(t, both=False):
                if s.id is not None and s.id not in seen:
                    seen.add(s.id)
                    born.append((s.id, _bytes(s, itemsize)))
            self.born.append(born)

    def peaks(self, stage: Sequence[int], share: Sequence[float], stages: int) -> list[float]:
        """The most bytes of activations alive at once on a device of each of ``stages`` stages, each call on
        the stage ``stage`` says, each tensor at the ``share`` of the call writing it (one each, in order)."""
        held: dict[int, tuple[int, float]] = {}  # tensor -> (stage, bytes)
        live, peak = [0.0] * stages, [0.0] * stages
        for i, born in enumerate(self.born):
            where, part = stage[i], share[i]
            for uid, whole in born:
                nbytes = whole * part
                held[uid] = (where, nbytes)
                live[where] += nbytes
            peak[where] = max(peak[where], live[where])
            for uid in self.ends.get(i, ()):
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


def _bytes(spec: TensorSpec, itemsize: ItemSize) -> int:
    size = itemsize(spec)
    return math.ceil(spec.numel * (size if size is not None else spec.itemsize))  # whole bytes, as the phase counts
