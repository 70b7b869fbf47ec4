"""A phase's rows per operator with the kernels its calls run in (``--by-operator`` on the LLM path).

Each row is one operator (``linear``, ``mul``, ``scaled_dot_product_attention``, ...): its calls,
its count in the analysis' convention, the bytes it moves as its own kernels (``bytes_eager``), its
part of the estimate of the phase's kernels and what limits them (``time_fused`` and ``bound_fused``,
or ``_eager``: :mod:`.kernel_times`; the rows sum to the estimate), and the kernels its calls ran
in, by kind (``gemm 96, attention 32``: 96 calls ran inside GEMM kernels, 32 inside attention kernels).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from ...handles.op_keys import op_key
from ...handles.registry import FLOPS
from ..phases import PhaseCost
from .times import KernelTimes


def operator_rows(cost: PhaseCost) -> list[dict[str, Any]]:
    """One row per operator that computes or moves bytes, in order of first call; needs hardware."""
    schedule, report = cost.schedule, cost.roofline
    if schedule is None or report is None:
        return []
    counts = cost.flops.by_operator()
    estimate = KernelTimes(cost).by_operator()
    mode = cost.kernels
    timed = {id(t.layer.call): t for t in report.layers if t.layer.call is not None}
    rows: dict[str, dict[str, Any]] = {}
    kinds: dict[str, Counter[str]] = defaultdict(Counter)
    for i, call in enumerate(cost.flops.trace().calls):
        t = timed.get(id(call))
        if t is None:
            continue  # a view: no kernel of its own, nothing moved
        handle = FLOPS.handles.get(call.kind)
        op = getattr(handle, "name", None) or op_key(call.kind)
        row = rows.setdefault(op, {"operator": op, "calls": 0, "flops": counts.get(op, 0), "bytes_eager": 0.0})
        row["calls"] += 1
        row["bytes_eager"] += t.layer.bytes
        k = schedule.kernel_of.get(i)
        kinds[op][schedule.kernels[k].kind if k is not None else "none"] += 1
    for op, row in rows.items():
        part = estimate.get(op)
        row[f"time_{mode}"] = part.time if part is not None else 0.0
        row[f"bound_{mode}"] = part.limited_by if part is not None else None
        row["kernels"] = ", ".join(f"{kind} {n}" for kind, n in kinds[op].most_common())
    return list(rows.values())
