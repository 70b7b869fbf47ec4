"""The speed of light of a phase: the time no engine beats, from plain numbers, and sums over decode steps.

A phase cannot finish before its matrix-product FLOPs have run at the tensor unit's peak, before
its compulsory bytes (each weight read once, an embedding table's looked-up rows only, the KV
cache read once, the new KV written, the inputs read and the outputs written) have crossed the
memory bus at full bandwidth, or before its communication has ended:

    time_bound = max(flops / peak, compulsory_bytes / bandwidth, communication)

Decode steps' figures are affine in the step (the cache grows by one token a step), so a sum of
maxima over ``steps`` steps is a closed form (:func:`sum_of_max`), exact whatever ``steps``.
"""

from __future__ import annotations

import numpy as np

from ..errors import OpcountValueError


def time_bound(
    flops: float, peak: float, compulsory_bytes: float, bandwidth: float, communication: float = 0.0
) -> float:
    """``max(flops / peak, compulsory_bytes / bandwidth, communication)`` in seconds: ``flops`` at
    ``peak`` FLOP/s (both counting a multiply-add as 2), bytes at ``bandwidth`` bytes/s, and the
    seconds of communication that cannot overlap (0 on one device)."""
    for name, value in (("flops", flops), ("compulsory_bytes", compulsory_bytes), ("communication", communication)):
        if not value >= 0:
            raise OpcountValueError(f"time_bound: {name} must be >= 0, got {value!r}")
    for name, value in (("peak", peak), ("bandwidth", bandwidth)):
        if not value > 0:
            raise OpcountValueError(f"time_bound: {name} must be > 0, got {value!r}")
    return max(flops / peak, compulsory_bytes / bandwidth, communication)


def sum_of_max(first: tuple[np.ndarray, np.ndarray], last: tuple[np.ndarray, np.ndarray], steps: int) -> np.ndarray:
    """``sum(max(a(j), b(j)) for j in range(steps))`` elementwise, ``a`` and ``b`` linear in ``j``
    from ``first = (a(0), b(0))`` to ``last = (a(steps - 1), b(steps - 1))``:
    ``max(a, b) = b + max(a - b, 0)``, an arithmetic series plus :func:`positive_part_sum`."""
    (a0, b0), (a1, b1) = first, last
    if steps == 1:
        out: np.ndarray = np.maximum(a0, b0)
        return out
    db = (b1 - b0) / (steps - 1)
    da = (a1 - a0) / (steps - 1)
    total: np.ndarray = steps * b0 + db * (steps * (steps - 1) / 2) + positive_part_sum(a0 - b0, da - db, steps)
    return total


def positive_part_sum(start: np.ndarray, slope: np.ndarray, steps: int) -> np.ndarray:
    """``sum(max(start + slope * j, 0) for j in range(steps))`` elementwise, in closed form: the
    terms are positive on one interval of j (a suffix when the slope is positive, a prefix when it
    is negative), an arithmetic series there. Where a term is near 0 at the interval's end,
    counting it or not changes the sum by that near-0 term only."""
    with np.errstate(divide="ignore", invalid="ignore"):
        root = np.where(slope != 0, -start / np.where(slope != 0, slope, 1), 0.0)  # where the term is 0
    rising = slope > 0
    falling = slope < 0
    # the first and last positive j of 0..steps-1
    lo = np.where(rising, np.clip(np.ceil(root), 0, steps), 0)
    hi = np.where(falling, np.clip(np.floor(root), -1, steps - 1), steps - 1)
    flat = slope == 0
    lo = np.where(flat & (start <= 0), steps, lo)  # a constant term that is never positive: no steps
    count = np.maximum(hi - lo + 1, 0)
    out: np.ndarray = np.where(count > 0, count * start + slope * (lo + hi) * count / 2, 0.0)
    return out
