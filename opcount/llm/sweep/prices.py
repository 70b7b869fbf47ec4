"""The kernels of a fitted region (:mod:`.sweep`) priced at every point at once, by arithmetic.

Which calls form which kernel, and which of their reads and writes cross a kernel's boundary, is
a grouping (:mod:`opcount.llm.kernels.groups`) that reads data flow and module scopes, not sizes: it is computed
once, from the region's template, and checked against the grouping of the region's check trace. What
changes with the point is each call's work and each access's bytes: they are computed once per
distinct record (the layers of a decoder repeat one another's records, and most records depend on
the batch alone), by the code that prices a traced phase (:func:`.kernels.call_prices`), and
gathered per point; :func:`.kernels.priced` then sums them into every point's kernels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...handles.memory import Traffic, flat_tensors
from ...hardware.lookup import Hardware
from ...ir import OpCall, TensorSpec
from ...memory import MemoryTrafficAnalysis, alias_roots, named_views, state_names
from ...roofline import roofline
from ...roofline.build import traced_dtype
from ...tracing import Trace
from ..kernels.estimate import CallPrices, KernelSchedule, call_prices, priced
from ..kernels.groups import group_kernels, moved_by
from .symbolic import FitError


def region_schedules(
    template: Trace,
    moved: Sequence[Traffic | None],
    check: Trace,
    distinct: Trace,
    which: Sequence[int],
    at: np.ndarray,
    *,
    hardware: Hardware,
    mode: str,
    dtype: str,
    itemsize: Callable[[TensorSpec], float | None],
    moe_blocks: Sequence[str],
    chains: Sequence[str] = (),
    named: Sequence[str] = (),
) -> list[KernelSchedule]:
    """The schedule at each point of a region: ``template`` (its first point's trace, whose traffic is
    ``moved``), ``check`` (the trace the fit was checked against), the ``distinct`` records of
    every unique record at every point, ``which`` unique record each template call is and, per
    unique record and point, ``at`` which distinct record it is (``chains``: as :func:`.estimate.schedule_kernels`'s;
    ``named``: the prefixes of the caches whose views are priced as the cache, as the traffic names them)."""
    memory = MemoryTrafficAnalysis(distinct)
    memory.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    report = roofline(memory, hardware=hardware, dtype=dtype, itemsize=itemsize)
    # a view of a weight or cache is named from the template's data flow: the distinct records keep the ids of
    # the template records they were rebuilt from, not the records that made their views
    roots = alias_roots(template.calls, moved)
    distinct_moved = named_views([t for _, t in memory.traffic_per_call()], roots, named, state_names(template.model))
    one = call_prices(
        distinct.calls, distinct_moved, report, mode, dtype=dtype, itemsize=itemsize,
        traced=traced_dtype(template.calls), chains=chains,
    )  # fmt: skip
    prices = _gathered(one, template.calls, moved, distinct.calls, distinct_moved, which, at)
    if not (prices.timed == prices.timed[:, :1]).all():
        raise FitError("an operator moves or computes nothing at some points of a region and something at others")
    timed = list(prices.timed[:, 0])
    kernels = group_kernels(template.calls, moved, template.outputs, timed, mode, moe_blocks, chains)
    checked = MemoryTrafficAnalysis(check, named_views=named)
    checked.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    at_check = [t for _, t in checked.traffic_per_call()]
    if group_kernels(check.calls, at_check, check.outputs, timed, mode, moe_blocks, chains) != kernels:
        raise FitError("the kernels group the operators differently at the check point")
    return priced(kernels, prices, hardware)


def _gathered(
    one: CallPrices,
    calls: Sequence[OpCall],
    moved: Sequence[Traffic | None],
    distinct: Sequence[OpCall],
    distinct_moved: Sequence[Traffic | None],
    which: Sequence[int],
    at: np.ndarray,
) -> CallPrices:
    """Each template call's figures at every point: its unique record's distinct record there."""
    rows = at[np.asarray(which)]  # calls x points: the distinct record
    names = ("timed", "tensor_s", "tensor_eff_s", "vector_s", "bound_s")
    columns = [getattr(one, name)[:, 0][rows] for name in names]
    flops, passes = one.flops[:, 0][rows], one.passes[:, 0][rows]
    reads: list[np.ndarray] = []
    writes: list[np.ndarray] = []
    held: list[np.ndarray] = []
    done: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray, tuple[object, ...]]] = {}
    for i, u in enumerate(which):
        if u not in done:
            js, where = np.unique(at[u], return_inverse=True)
            shapes = {_accesses(distinct[j], distinct_moved[j]) for j in js.tolist()}
            if len(shapes) != 1:
                raise FitError(f"operator {i} ({calls[i].kind}) reads or writes other tensors at other points")
            r = np.concatenate([one.reads[j] for j in js.tolist()], axis=1)[:, where.reshape(-1)]
            w = np.concatenate([one.writes[j] for j in js.tolist()], axis=1)[:, where.reshape(-1)]
            h = np.concatenate([one.held[j] for j in js.tolist()], axis=1)[:, where.reshape(-1)]
            done[u] = (r, w, h, shapes.pop())
        r, w, h, pattern = done[u]
        if _accesses(calls[i], moved[i]) != pattern:
            raise FitError(f"operator {i} ({calls[i].kind}) reads or writes other tensors than its like records")
        reads.append(r)
        writes.append(w)
        held.append(h)
    timed, tensor_s, tensor_eff_s, vector_s, bound_s = columns
    return CallPrices(
        timed=timed, tensor_s=tensor_s, tensor_eff_s=tensor_eff_s, vector_s=vector_s, bound_s=bound_s, flops=flops,
        passes=passes, reads=reads, writes=writes, held=held,
    )  # fmt: skip


def _accesses(call: OpCall, t: Traffic | None) -> tuple[object, ...]:
    """Which of the call's tensors (by position) each read and write touches: what must not change
    between records priced alike."""
    position: dict[int | None, int] = {}
    for s in (*flat_tensors(call.inputs), *flat_tensors(call.outputs)):
        position.setdefault(s.id, len(position))
    m = moved_by(call, t)

    def where(s: TensorSpec | None) -> object:
        return None if s is None else (position.get(s.id, -1), s.param is None)

    return m.alias, tuple(where(a.tensor) for a in m.read), tuple(where(a.tensor) for a in m.write)
