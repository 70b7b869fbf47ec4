"""A phase's operator calls grouped into the kernels a serving engine runs, and each kernel priced.

**Fused** (``kernels="fused"``, as TensorRT-LLM, vLLM and SGLang run a decoder): every matrix
product (a call whose FLOP handle counts multiply-adds) anchors a kernel; the calls between two
anchors (norms, rotary, activations, residual adds, the cache writes) run as the prologue of the
next one, those after the last as its epilogue. Matrix products reading the same activation
(query, key and value projections; gate and up projections; a router and its experts) run as one
kernel that reads it once, and the same projection of every expert of a mixture-of-experts block
runs as one grouped GEMM. Attention is FlashAttention: scores and probabilities stay on chip,
Q, K and V are read once (K and V once per tile of queries when one head's K and V, as stored,
exceed the on-chip buffer), and a causal block computes only its kept (query, key) pairs,
``s x S - s (s - 1) / 2`` for ``s`` new tokens over ``S`` positions (``T (T + 1) / 2`` for a
prompt). A DSA indexer's products of activations (its scores, their weighted sum) run as one
kernel computing a prompt's kept pairs only, the module paths given by the caller
(:func:`.indexed.indexer_scopes`). The grouping reads
module scopes and data flow, never a family's module names.

Within a kernel a tensor produced by one member is not read back, and is not written at all
when no call outside the kernel reads it and the model does not return it; a tensor read by
several members is read once. Float32 intermediates (a norm's upcast) thus stay on chip, and one
that crosses a kernel boundary is priced as float32, as the model keeps it (other activations in
the activation dtype).

**Eager** (``kernels="eager"``): each operator call is its own kernel (views excepted), as
before; attention counts the full square.

Each kernel takes ``max(compute, memory) + launch``: its matrix-product FLOPs at the tensor peak
times the GEMM efficiency (padded to whole tiles) or the attention efficiency, its other FLOPs at
their unit's peak, its bytes at the bandwidth times the stream efficiency
(:mod:`opcount.hardware.efficiency`).

Which calls form which kernel, and which reads and writes cross its boundary, is a grouping
(:mod:`.groups`) that depends on data flow, not on sizes; each call's work and each access's
bytes are :class:`CallPrices`, one column per point; :func:`priced` sums them into the kernels'
figures at every point at once. A traced phase is one point (:func:`schedule_kernels`); a fitted region of a
sweep is many (:mod:`opcount.llm.sweep.prices`), the same sums.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...handles.attention import SDPA_KEY, SDPA_QUERY, SDPA_VALUE
from ...handles.memory import Access, Traffic, flat_tensors
from ...hardware.efficiency import tile_utilization
from ...hardware.lookup import Hardware
from ...hardware.spec import TENSOR
from ...ir import OpCall, TensorSpec
from ...memory import MemoryTrafficAnalysis
from ...roofline import RooflineReport
from ...roofline.bound import time_bound
from ...roofline.build import access_bytes, traced_dtype
from ...roofline.model import FLOPS_PER_MAC, gemm_channels
from . import MODES
from .groups import ATTENTION_KINDS, Kernel, KernelGroups, group_kernels, moved_by

__all__ = [
    "ATTENTION_KINDS",
    "MODES",
    "CallPrices",
    "Kernel",
    "KernelSchedule",
    "attention_work",
    "priced",
    "schedule_kernels",
]

TILE_QUERIES = 128  # FlashAttention-2's query block


@dataclass(frozen=True, kw_only=True)
class KernelSchedule:
    """The kernels of one phase on ``hardware`` and the figures of its bound.

    Per kernel (arrays in ``kernels``' order): seconds of matrix-product work at peak
    (``tensor_s``) and at the efficiency reached (``tensor_eff_s``), seconds of other work
    (``vector_s``), and ``bytes`` moved after fusion. ``matmul_flops`` (2 per multiply-add, causal
    attention counting its kept pairs) over ``matmul_peak`` (their FLOP/s, a harmonic mean where
    dtypes differ) and ``compulsory_bytes`` (:mod:`opcount.roofline.bound`) are the bound's;
    ``kernel_of`` maps a call to its kernel."""

    mode: str
    hardware: Hardware
    kernels: list[Kernel]
    kernel_of: dict[int, int]
    tensor_s: np.ndarray
    tensor_eff_s: np.ndarray
    vector_s: np.ndarray
    bytes: np.ndarray
    matmul_flops: float
    matmul_peak: float
    compulsory_bytes: float
    # per call: its matrix-product FLOPs and the compulsory bytes it is charged, of weights and
    # caches and of inputs and outputs (a tensor read by several calls is charged to the largest
    # read): what a device's share of the bound sums (:mod:`opcount.llm.deploy.times`)
    call_flops: np.ndarray = field(default_factory=lambda: np.zeros(0))
    call_weight_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))
    call_io_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def compute_memory(self) -> tuple[np.ndarray, np.ndarray]:
        """Per kernel, seconds of compute and of memory at the efficiencies reached."""
        bandwidth = self.hardware.bandwidth * self.hardware.efficiency.stream
        return self.tensor_eff_s + self.vector_s, self.bytes / bandwidth

    @property
    def launch_s(self) -> float:
        return len(self.kernels) * self.hardware.efficiency.launch_s

    @property
    def time(self) -> float:
        """The estimate: the sum over kernels of ``max(compute, memory)``, plus the launches."""
        compute, memory = self.compute_memory()
        return float(np.maximum(compute, memory).sum()) + self.launch_s

    def bound_terms(self) -> tuple[float, float]:
        """(compute seconds, memory seconds) of the bound."""
        return self.matmul_flops / self.matmul_peak, self.compulsory_bytes / self.hardware.bandwidth

    @property
    def time_bound(self) -> float:
        """The speed of light of the phase these kernels run (:func:`.bound.time_bound`)."""
        return time_bound(self.matmul_flops, self.matmul_peak, self.compulsory_bytes, self.hardware.bandwidth)

    @property
    def limited_by(self) -> str:
        """What limits the speed of light: ``compute`` or ``memory``."""
        compute, memory = self.bound_terms()
        return "compute" if compute >= memory else "memory"

    def kernel_name(self, call: int) -> str | None:
        k = self.kernel_of.get(call)
        return None if k is None else f"{self.kernels[k].kind} {self.kernels[k].name}"


@dataclass(frozen=True, kw_only=True)
class CallPrices:
    """Each call's figures at ``P`` points (one column a point): whether the roofline prices it
    (``timed``), seconds of matrix-product work at peak and at the efficiency reached, seconds of
    other work, the bound's matrix-product seconds at peak and FLOPs (causal blocks their kept
    pairs whatever the mode: the speed of light does not depend on how the kernels are grouped),
    how many times attention reads K and V (``passes``, 1 elsewhere), the bytes of each of its reads and writes (``reads[i]``: reads x points), and of
    each of its tensors whole where it is a weight or cache (``held[i]``: tensors x points, 0 for
    the others)."""

    timed: np.ndarray
    tensor_s: np.ndarray
    tensor_eff_s: np.ndarray
    vector_s: np.ndarray
    bound_s: np.ndarray
    flops: np.ndarray
    passes: np.ndarray
    reads: list[np.ndarray]
    writes: list[np.ndarray]
    held: list[np.ndarray]


class PhaseFigures:
    """The times a phase's kernel ``schedule`` gives its ``tokens``: what a traced phase and a fitted
    point both report (None without hardware)."""

    @property
    def schedule(self) -> KernelSchedule | None:
        raise NotImplementedError

    @property
    def tokens(self) -> int:
        raise NotImplementedError

    @property
    def time(self) -> float | None:
        """The estimate: seconds of the phase's kernels as an engine runs them."""
        return None if self.schedule is None else self.schedule.time

    @property
    def time_bound(self) -> float | None:
        """The speed of light: no engine runs the phase faster (:func:`.bound.time_bound`)."""
        return None if self.schedule is None else self.schedule.time_bound

    @property
    def limited_by(self) -> str | None:
        """What limits the speed of light: ``compute`` or ``memory``."""
        return None if self.schedule is None else self.schedule.limited_by

    @property
    def tokens_per_s(self) -> float | None:
        time = self.time
        return None if not time else self.tokens / time

    @property
    def tokens_per_s_bound(self) -> float | None:
        time = self.time_bound
        return None if not time else self.tokens / time

    # Former names (before docs/glossary.md's vocabulary), kept for scripts written against them.

    @property
    def plan(self) -> KernelSchedule | None:
        """Former name of :attr:`schedule`."""
        return self.schedule

    @property
    def bound(self) -> str | None:
        """Former name of :attr:`limited_by`."""
        return self.limited_by


def schedule_kernels(
    traffic: MemoryTrafficAnalysis,
    report: RooflineReport,
    mode: str = "fused",
    *,
    dtype: str,
    itemsize: Callable[[TensorSpec], float | None] | None = None,
    moe_blocks: Sequence[str] = (),
    chains: Sequence[str] = (),
    kept: dict[Any, Any] | None = None,
) -> KernelSchedule:
    """The kernels of the phase whose trace ``traffic`` holds and whose eager roofline is ``report``;
    in each module of ``chains`` the products of two activations run as one kernel (a DSA indexer's
    scores and their weighted sum: DeepGEMM's ``fp8_mqa_logits``), a prompt's causally (its kept pairs).
    ``kept``: what scheduling this trace on any device reads the same, kept for the next device (the calls'
    bytes, :func:`call_prices`; the kernels, keyed by what groups them: the mode and the calls the roofline
    times, as the grouping reads the data flow, not the device)."""
    per_call = traffic.traffic_per_call()
    calls = [c for c, _ in per_call]
    moved = [t for _, t in per_call]
    prices = call_prices(calls, moved, report, mode, dtype=dtype, itemsize=itemsize, chains=chains, kept=kept)
    timed = [bool(t) for t in prices.timed[:, 0]]
    key = (mode, tuple(timed), tuple(moe_blocks), tuple(chains))
    kernels = None if kept is None else kept.get(key)
    if not isinstance(kernels, KernelGroups):
        kernels = group_kernels(calls, moved, traffic.trace().outputs, timed, mode, moe_blocks, chains)
        if kept is not None:
            kept[key] = kernels
    return priced(kernels, prices, report.hardware)[0]


def call_prices(
    calls: Sequence[OpCall],
    moved: Sequence[Traffic | None],
    report: RooflineReport,
    mode: str,
    *,
    dtype: str,
    itemsize: Callable[[TensorSpec], float | None] | None = None,
    traced: str | None = None,
    chains: Sequence[str] = (),
    kept: dict[Any, Any] | None = None,
) -> CallPrices:
    """The figures of each call as one point (``report``: the calls' eager roofline; ``traced``: the
    dtype the model was traced in, by default read from ``calls``; ``kept``: the calls' bytes, which read
    no device, kept from an earlier pricing of the same calls or for the next)."""
    hw = report.hardware
    traced = traced or traced_dtype(calls)

    def stored(spec: TensorSpec) -> float | None:
        # an activation the model computes in float32 while traced in a narrower dtype (a norm's
        # upcast, a router's softmax) is float32 in memory if it leaves its kernel
        if spec.param is None and spec.dtype == "float32" and traced != "float32":
            return 4.0
        return itemsize(spec) if itemsize is not None else None

    def price(a: Access) -> float:
        return access_bytes(a, dtype, traced, stored)

    timed = {id(t.layer.call): t for t in report.layers if t.layer.call is not None}
    fused = mode == "fused"
    eff = hw.efficiency
    # Per call: (matmul seconds at peak, at the efficiency reached, other seconds, the bound's matmul seconds
    # and flops, K and V passes)
    work: list[tuple[float, float, float, float, float, float]] = []
    key = ("bytes", dtype, traced)
    found = None if kept is None else kept.get(key)
    if not (isinstance(found, tuple) and found[0] is itemsize):  # the bytes at another itemsize are not these
        found = (itemsize, _call_bytes(calls, moved, price))
        if kept is not None:
            kept[key] = found
    reads, writes, held = found[1]
    for call in calls:
        lt = timed.get(id(call))
        passes = _kv_passes(call, hw, stored) if call.kind in ATTENTION_KINDS else 1.0
        if lt is None:
            work.append((0.0, 0.0, 0.0, 0.0, 0.0, passes))
        elif call.kind in ATTENTION_KINDS:
            macs, softmax = attention_work(call, causal=fused)  # the eager kernel computes the whole square
            vector = hw.peak_of("vector", lt.layer.precision) or hw.peak_of("vector", "float32") or lt.peak
            flops = FLOPS_PER_MAC * macs
            pairs = FLOPS_PER_MAC * attention_work(call, causal=True)[0]  # the causal pairs kept
            work.append(
                (flops / lt.peak, flops / (lt.peak * eff.attention), softmax / vector, pairs / lt.peak, pairs, passes)
            )
        elif lt.layer.unit == TENSOR:
            ck = gemm_channels(call)
            out = next(flat_tensors(call.outputs), None)
            shape = 1.0
            if ck is not None and out is not None and ck[1]:
                shape = tile_utilization(out.numel // ck[1], ck[1])
            gemm = eff.gemm_at(lt.layer.precision)
            share = _causal_share(call) if call.scope[-1] in chains else 1.0
            seconds = (share if fused else 1.0) * lt.compute_time
            work.append(
                (seconds, seconds / (gemm * shape), 0.0, share * lt.compute_time, share * lt.layer.flops, passes)
            )
        else:
            work.append((0.0, 0.0, lt.compute_time, 0.0, 0.0, passes))
    columns = np.array(work, dtype=np.float64).reshape(-1, 6)
    is_timed = np.array([[id(c) in timed] for c in calls], dtype=bool).reshape(-1, 1)
    tensor_s, tensor_eff_s, vector_s, bound_s, matmul, kv_passes = np.split(columns, 6, axis=1)  # each calls x 1
    return CallPrices(
        timed=is_timed, tensor_s=tensor_s, tensor_eff_s=tensor_eff_s, vector_s=vector_s, bound_s=bound_s,
        flops=matmul, passes=kv_passes, reads=reads, writes=writes, held=held,
    )  # fmt: skip


def _call_bytes(
    calls: Sequence[OpCall], moved: Sequence[Traffic | None], price: Callable[[Access], float]
) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """Each call's bytes at ``price``: of its reads, of its writes, of its tensors whole where a weight or cache."""
    reads: list[np.ndarray] = []
    writes: list[np.ndarray] = []
    held: list[np.ndarray] = []
    for call, t in zip(calls, moved, strict=True):
        tensors = (*flat_tensors(call.inputs), *flat_tensors(call.outputs))
        whole = [[price(Access(s, s.nbytes)) if s.param is not None else 0.0] for s in tensors]
        held.append(np.array(whole, dtype=np.float64).reshape(-1, 1))
        m = moved_by(call, t)
        reads.append(np.array([[0.0 if m.alias else price(a)] for a in m.read], dtype=np.float64).reshape(-1, 1))
        writes.append(np.array([[0.0 if m.alias else price(a)] for a in m.write], dtype=np.float64).reshape(-1, 1))
    return reads, writes, held


def priced(kernels: KernelGroups, prices: CallPrices, hw: Hardware) -> list[KernelSchedule]:
    """The schedule at each point (column) of ``prices``: every sum runs call by call in launch order
    (``np.add.accumulate``, sequential), so one point priced alone and many priced together agree
    to the last bit."""
    points = prices.flops.shape[1]
    count = len(kernels.groups)
    figures = np.zeros((4, count, points))  # tensor_s, tensor_eff_s, vector_s, bytes
    zero = np.zeros(points)
    for k, kernel in enumerate(kernels.groups):
        kind, members = kernel.kind, kernel.calls
        rows = list(members)
        for j, source in enumerate((prices.tensor_s, prices.tensor_eff_s, prices.vector_s)):
            figures[j, k] = _total(source[rows])
        passes = prices.passes[members[-1]] if kind == "attention" else None
        read = zero
        for refs, streamed in kernels.reads[k]:  # one TensorReads each
            most = zero
            for i, n in refs:  # a tensor read by several members is read once
                most = np.maximum(most, prices.reads[i][n])
            read = read + (most * passes if streamed and passes is not None else most)
        written = zero
        for i, n in kernels.writes[k]:
            written = written + prices.writes[i][n]
        figures[3, k] = read + written
    flops = _total(prices.flops)
    seconds = _total(prices.bound_s)
    with np.errstate(divide="ignore", invalid="ignore"):
        peak = np.where(seconds != 0, flops / np.where(seconds != 0, seconds, 1.0), 1.0)
    weights, io = _charged(kernels, prices)
    compulsory = _total(weights) + _total(io)
    structure = list(kernels.groups)
    kernel_of = kernels.kernel_of
    schedules = []
    for p in range(points):
        tensor_s, tensor_eff_s, vector_s, moved = figures[:, :, p]
        schedule = KernelSchedule(
            mode=kernels.mode, hardware=hw, kernels=structure, kernel_of=kernel_of, tensor_s=tensor_s,
            tensor_eff_s=tensor_eff_s, vector_s=vector_s, bytes=moved, matmul_flops=float(flops[p]),
            matmul_peak=float(peak[p]), compulsory_bytes=float(compulsory[p]), call_flops=prices.flops[:, p],
            call_weight_bytes=weights[:, p], call_io_bytes=io[:, p],
        )  # fmt: skip
        schedules.append(schedule)
    return schedules


def _total(rows: np.ndarray) -> np.ndarray:
    """The sum of ``rows`` (rows x points) down each column, in row order."""
    if len(rows) == 0:
        return np.zeros(rows.shape[1])
    out: np.ndarray = np.add.accumulate(rows, axis=0)[-1]
    return out


def _charged(kernels: KernelGroups, prices: CallPrices) -> tuple[np.ndarray, np.ndarray]:
    """Per call and point, the compulsory bytes of weights and caches and of inputs and outputs
    charged to it: each tensor's largest access (the first of them where several tie); the views
    of one weight or cache together never more than the whole tensor."""
    shape = prices.flops.shape
    weights, io = np.zeros(shape), np.zeros(shape)
    columns = np.arange(shape[1])
    for i, n in kernels.weight_writes:
        weights[i] += prices.writes[i][n]
    largest: list[tuple[np.ndarray, np.ndarray]] = []  # per tensor: (its bytes, the call charged) per point
    parts: dict[str, np.ndarray] = {}  # a weight or cache -> its views' bytes, summed
    for tensor in kernels.compulsory:
        moves = tensor.moves
        candidates = np.stack([(prices.writes if m.write else prices.reads)[m.call][m.position] for m in moves])
        best = candidates.argmax(axis=0)
        largest.append((candidates[best, columns], np.array([m.call for m in moves])[best]))
        if tensor.name is not None:
            parts[tensor.name] = parts.get(tensor.name, 0.0) + largest[-1][0]
    for (name, _, whole), (nbytes, charged) in zip(kernels.compulsory, largest, strict=True):
        if name is None:
            io[charged, columns] += nbytes
            continue
        summed = parts[name]
        # where the whole tensor is unknown (no id to find it by), its views are not capped
        cap = np.full(shape[1], np.inf) if whole is None else prices.held[whole[0]][whole[1]]
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.minimum(1.0, cap / np.where(summed != 0, summed, 1.0))
        weights[charged, columns] += np.where(summed != 0, nbytes * share, 0.0)
    return weights, io


def attention_work(call: OpCall, causal: bool) -> tuple[float, float]:
    """(multiply-adds, softmax flops) of an attention call: ``pairs x (E + Ev)`` per head and
    sequence, the softmax ``3 pairs - rows``; a causal block of ``s`` new tokens over ``S``
    positions keeps ``s S - s (s - 1) / 2`` pairs (the new tokens sit at the end)."""
    q, k, v = (call.inputs[i] for i in (SDPA_QUERY, SDPA_KEY, SDPA_VALUE))
    out = next(flat_tensors(call.outputs), None)
    if not (isinstance(q, TensorSpec) and isinstance(k, TensorSpec) and isinstance(v, TensorSpec) and out):
        return 0.0, 0.0
    s, total = q.shape[-2], k.shape[-2]
    heads = math.prod(out.shape[:-2])
    pairs = s * total - s * (s - 1) // 2 if causal and s > 1 else s * total
    return float(heads * pairs * (q.shape[-1] + v.shape[-1])), float(heads * (3 * pairs - s))


def _causal_share(call: OpCall) -> float:
    """The share of a DSA indexer's (query, key) products a causal kernel computes: ``[b, s, heads,
    T]`` scores of ``s`` queries, the last of ``T`` positions, keep ``s T - s (s - 1) / 2`` pairs."""
    out = next(flat_tensors(call.outputs), None)
    if out is None or len(out.shape) != 4 or out.shape[1] <= 1:
        return 1.0
    s, total = out.shape[1], out.shape[-1]
    return (s * total - s * (s - 1) // 2) / (s * total)


def _kv_passes(call: OpCall, hw: Hardware, stored: Callable[[TensorSpec], float | None]) -> float:
    """How many times attention reads K and V: once when one head's K and V fit the on-chip buffer
    (every query tile finds them there), else once per tile of queries; Q is read once. K and V are
    sized as they are stored (``stored``: the KV dtype for the cache's, ``--kv-dtype fp8`` one byte an
    element), not in the dtype the model was traced in."""
    k, v = call.inputs[SDPA_KEY], call.inputs[SDPA_VALUE]
    if not (isinstance(k, TensorSpec) and isinstance(v, TensorSpec)) or hw.buffer_bytes is None:
        return 1.0

    def row(t: TensorSpec) -> float:  # one position of one head
        size = stored(t)
        return t.shape[-1] * (size if size is not None else t.itemsize)

    per_head = k.shape[-2] * row(k) + v.shape[-2] * row(v)
    if per_head <= hw.buffer_bytes:
        return 1.0
    q = call.inputs[SDPA_QUERY]
    rows = q.shape[-2] if isinstance(q, TensorSpec) else 1
    return float(math.ceil(rows / TILE_QUERIES))
