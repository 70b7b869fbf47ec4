"""A phase's operator calls grouped into the kernels a serving engine runs, and each kernel priced.

**Fused** (``kernels="fused"``, as TensorRT-LLM, vLLM and SGLang run a decoder): every matrix
product (a call whose FLOP handle counts multiply-adds) anchors a kernel; the calls between two
anchors (norms, rotary, activations, residual adds, the cache writes) run as the prologue of the
next one, those after the last as its epilogue. Matrix products reading the same activation
(query, key and value projections; gate and up projections; a router and its experts) run as one
kernel that reads it once, and the same projection of every expert of a mixture-of-experts block
runs as one grouped GEMM. Attention is FlashAttention: scores and probabilities stay on chip,
Q, K and V are read once (K and V once per tile of queries when one head's K and V exceed the
on-chip buffer), and a causal block computes only its kept (query, key) pairs,
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
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from ..handles.attention import SDPA_KEY, SDPA_QUERY, SDPA_VALUE
from ..handles.memory import Access, Traffic, flat_tensors
from ..handles.registry import FLOPS
from ..hardware.efficiency import tile_utilization
from ..hardware.lookup import Hardware
from ..hardware.spec import TENSOR
from ..ir import OpCall, TensorSpec
from ..memory import MemoryTrafficAnalysis, alias_roots
from ..roofline import RooflineReport
from ..roofline.build import access_bytes, traced_dtype
from ..roofline.model import FLOPS_PER_MAC, gemm_channels
from .bound import time_bound

MODES = ("fused", "eager")
ATTENTION_KINDS = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
    }
)
TILE_QUERIES = 128  # FlashAttention-2's query block


@dataclass
class Kernel:
    """One kernel: the operator ``calls`` it runs (indices into the phase's calls, anchor first
    among the matrix products), its ``kind`` (gemm, grouped_gemm, attention or other), seconds of
    matrix-product work at peak (``tensor_s``) and at the efficiency reached (``tensor_eff_s``),
    seconds of other work (``vector_s``), and ``bytes`` moved after fusion."""

    name: str
    kind: str
    calls: list[int] = field(default_factory=list)
    tensor_s: float = 0.0
    tensor_eff_s: float = 0.0
    vector_s: float = 0.0
    bytes: float = 0.0


@dataclass
class KernelPlan:
    """The kernels of one phase on ``hardware`` and the figures of its bound.

    ``matmul_flops`` (2 per multiply-add, causal attention counting its kept pairs) over
    ``matmul_peak`` (their FLOP/s, a harmonic mean where dtypes differ) and ``compulsory_bytes``
    (:mod:`opcount.llm.bound`) are the bound's; ``kernel_of`` maps a call to its kernel."""

    mode: str
    hardware: Hardware
    kernels: list[Kernel]
    kernel_of: dict[int, int]
    matmul_flops: float
    matmul_peak: float
    compulsory_bytes: float
    # per call: its matrix-product FLOPs and the compulsory bytes it is charged, of weights and
    # caches and of inputs and outputs (a tensor read by several calls is charged to the largest
    # read): what a device's share of the bound sums (:mod:`.device_times`)
    call_flops: list[float] = field(default_factory=list)
    call_weight_bytes: list[float] = field(default_factory=list)
    call_io_bytes: list[float] = field(default_factory=list)

    def compute_memory(self) -> tuple[np.ndarray, np.ndarray]:
        """Per kernel, seconds of compute and of memory at the efficiencies reached."""
        bandwidth = self.hardware.bandwidth * self.hardware.efficiency.stream
        compute = np.array([k.tensor_eff_s + k.vector_s for k in self.kernels], dtype=np.float64)
        memory = np.array([k.bytes for k in self.kernels], dtype=np.float64) / bandwidth
        return compute, memory

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
    def binds(self) -> str:
        """What binds the speed of light: ``compute`` or ``memory``."""
        compute, memory = self.bound_terms()
        return "compute" if compute >= memory else "memory"

    def kernel_name(self, call: int) -> str | None:
        k = self.kernel_of.get(call)
        return None if k is None else f"{self.kernels[k].kind} {self.kernels[k].name}"


def plan(
    traffic: MemoryTrafficAnalysis,
    report: RooflineReport,
    mode: str = "fused",
    *,
    dtype: str,
    itemsize: Callable[[TensorSpec], float | None] | None = None,
    moe_blocks: Sequence[str] = (),
    chains: Sequence[str] = (),
) -> KernelPlan:
    """The kernels of the phase whose trace ``traffic`` holds and whose eager roofline is ``report``;
    in each module of ``chains`` the products of two activations run as one kernel (a DSA indexer's
    scores and their weighted sum: DeepGEMM's ``fp8_mqa_logits``), a prompt's causally (its kept pairs)."""
    hw = report.hardware
    per_call = traffic.traffic_per_call()
    calls = [c for c, _ in per_call]
    moved = [t for _, t in per_call]
    roots = alias_roots(calls, moved)
    traced = traced_dtype(calls)

    def root(spec: TensorSpec | None) -> int | None:
        if spec is None or spec.id is None:
            return None
        return roots.get(spec.id, spec).id

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
    # Per call: (matmul seconds at peak, at the efficiency reached, other seconds, matmul flops)
    work: list[tuple[float, float, float, float]] = []
    for call in calls:
        lt = timed.get(id(call))
        if lt is None:
            work.append((0.0, 0.0, 0.0, 0.0))
            continue
        eff = hw.efficiency
        if call.kind in ATTENTION_KINDS:
            macs, softmax = attention_work(call, causal=True)
            if not fused:  # the eager kernel computes the whole square
                macs, softmax = attention_work(call, causal=False)
            vector = hw.peak_of("vector", lt.layer.precision) or hw.peak_of("vector", "float32") or lt.peak
            flops = FLOPS_PER_MAC * macs
            work.append((flops / lt.peak, flops / (lt.peak * eff.attention), softmax / vector, flops))
        elif lt.layer.unit == TENSOR:
            ck = gemm_channels(call)
            out = next(flat_tensors(call.outputs), None)
            shape = 1.0
            if ck is not None and out is not None and ck[1]:
                shape = tile_utilization(out.numel // ck[1], ck[1])
            gemm = eff.gemm_at(lt.layer.precision)
            kept = _causal_share(call) if fused and call.scope[-1] in chains else 1.0
            work.append((kept * lt.compute_time, kept * lt.compute_time / (gemm * shape), 0.0, kept * lt.layer.flops))
        else:
            work.append((0.0, 0.0, lt.compute_time, 0.0))

    groups = _group(calls, moved, root, moe_blocks, chains) if fused else _eager(calls, timed)
    producer: dict[int, int] = {}
    readers: dict[int, set[int]] = {}
    for i, (call, t) in enumerate(zip(calls, moved, strict=True)):
        if t is not None and t.alias:
            continue
        for spec in flat_tensors(call.inputs) if t is None else (a.tensor for a in t.read):
            r = root(spec)
            if r is not None:
                readers.setdefault(r, set()).add(i)
        for a in t.write if t is not None else ():
            r = root(a.tensor)
            if r is not None and a.tensor is not None and a.tensor.param is None:
                producer.setdefault(r, i)
    returned = {root(s) for s in traffic.trace().outputs}

    kernels: list[Kernel] = []
    kernel_of: dict[int, int] = {}
    for name, kind, members in groups:
        kernel = Kernel(name, kind, members)
        inside = set(members)
        read: dict[object, float] = {}
        written = 0.0
        for i in members:
            kernel_of[i] = len(kernels)
            tensor_s, tensor_eff_s, vector_s, _ = work[i]
            kernel.tensor_s += tensor_s
            kernel.tensor_eff_s += tensor_eff_s
            kernel.vector_s += vector_s
            t = moved[i] or Traffic(read=tuple(Access(s, s.nbytes) for s in flat_tensors(calls[i].inputs)))
            if t.alias:
                continue
            for n, a in enumerate(t.read):
                r = root(a.tensor)
                if r is not None and producer.get(r) in inside and a.tensor is not None and a.tensor.param is None:
                    continue  # made on chip by this kernel
                key: object = r if r is not None else (i, n)
                if a.tensor is not None and a.tensor.param is not None and a.tensor.id != r:
                    key = (r, a.tensor.id)  # a named view (a cache read head by head): its own part
                read[key] = max(read.get(key, 0.0), price(a))
            for a in t.write:
                r = root(a.tensor)
                users = readers.get(r, set()) if r is not None else set()
                param = a.tensor is not None and a.tensor.param is not None
                if not param and r not in returned and users and users <= inside:
                    continue  # consumed on chip
                written += price(a)
        if kind == "attention":  # K and V stream past every tile of queries they do not stay on chip for
            sdpa = calls[members[-1]]
            kv = {root(s) for s in (sdpa.inputs[SDPA_KEY], sdpa.inputs[SDPA_VALUE]) if isinstance(s, TensorSpec)}
            made = [r for r in kv if r is not None and producer.get(r) in inside]
            while made:  # K made in the kernel (rotary): what it is made from streams past each tile
                t_made = moved[producer[made.pop()]]
                for a in t_made.read if t_made is not None else ():
                    r = root(a.tensor)
                    if r is not None and r not in kv:
                        kv.add(r)
                        if producer.get(r) in inside:
                            made.append(r)
            passes = _kv_passes(sdpa, hw)
            read = {k: v * passes if k in kv else v for k, v in read.items()}
        kernel.bytes = sum(read.values()) + written
        kernels.append(kernel)

    flops = sum(w[3] for w in work)
    seconds = sum(w[0] for w in work)
    weights, io = _compulsory(
        moved, lambda s: None if s is None else roots.get(s.id, s) if s.id is not None else s, producer, returned, price
    )
    peak = flops / seconds if seconds else 1.0
    return KernelPlan(
        mode, hw, kernels, kernel_of, flops, peak, sum(weights) + sum(io), [w[3] for w in work], weights, io
    )


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


def _kv_passes(call: OpCall, hw: Hardware) -> float:
    """How many times attention reads K and V: once when one head's K and V fit the on-chip buffer
    (every query tile finds them there), else once per tile of queries; Q is read once."""
    k, v = call.inputs[SDPA_KEY], call.inputs[SDPA_VALUE]
    if not (isinstance(k, TensorSpec) and isinstance(v, TensorSpec)) or hw.buffer_bytes is None:
        return 1.0
    per_head = (k.shape[-2] * k.shape[-1] * k.itemsize) + (v.shape[-2] * v.shape[-1] * v.itemsize)
    if per_head <= hw.buffer_bytes:
        return 1.0
    q = call.inputs[SDPA_QUERY]
    rows = q.shape[-2] if isinstance(q, TensorSpec) else 1
    return float(math.ceil(rows / TILE_QUERIES))


Group = tuple[str, str, list[int]]


def _eager(calls: Sequence[OpCall], timed: Mapping[int, object]) -> list[Group]:
    """One kernel per call that moves bytes or computes (views launch nothing)."""
    out: list[Group] = []
    for i, call in enumerate(calls):
        if id(call) in timed:
            kind = "attention" if call.kind in ATTENTION_KINDS else "other"
            out.append((call.scope[-1], kind, [i]))
    return out


def _group(
    calls: Sequence[OpCall],
    moved: Sequence[Traffic | None],
    root: Callable[[TensorSpec | None], int | None],
    moe_blocks: Sequence[str],
    chains: Sequence[str] = (),
) -> list[Group]:
    """The fused kernels (module docstring): (name, kind, call indices) in launch order."""
    groups: list[Group] = []
    pending: list[int] = []
    by_input: dict[int, int] = {}  # activation read -> the GEMM kernel reading it
    by_expert: dict[tuple[str, str, tuple[int, ...]], int] = {}  # an experts' projection -> its grouped GEMM
    last = -1  # the kernel most recently given a call
    experts = tuple(f"{b}.experts" for b in moe_blocks)
    chained: dict[str, int] = {}  # a module of ``chains`` -> the kernel of its products of activations
    for i, call in enumerate(calls):
        handle = FLOPS.handles.get(call.kind)
        if not getattr(handle, "macs", False):
            pending.append(i)
            continue
        if call.kind in ATTENTION_KINDS:
            groups.append((call.scope[-1], "attention", [*pending, i]))
            pending, last = [], len(groups) - 1
            continue
        tensors = list(flat_tensors(call.inputs))
        acts = [t for t in tensors if t.param is None]
        weight = next((t for t in tensors if t.param is not None), None)
        source = root(acts[0]) if len(acts) == 1 else None
        expert_key = _expert_key(call, weight, experts)
        target = by_input.get(source) if source is not None else None
        chain = call.scope[-1] if weight is None and call.scope[-1] in chains else None
        if chain is not None and chain in chained:  # the calls since the chain's last product run inside it
            groups[chained[chain]][2].extend([*pending, i])
            pending, last = [], chained[chain]
            continue
        if target is None and expert_key is not None:
            target = by_expert.get(expert_key)
        if target is not None:
            if pending:  # the calls since the last kernel run as its epilogue
                groups[last][2].extend(pending)
                pending = []
            groups[target][2].append(i)
            last = target
            if groups[target][1] == "gemm" and expert_key is not None:
                groups[target] = (groups[target][0], "grouped_gemm", groups[target][2])
            continue
        groups.append((call.scope[-1], "gemm", [*pending, i]))
        pending, last = [], len(groups) - 1
        if chain is not None:
            chained[chain] = last
        if source is not None:
            by_input[source] = last
        if expert_key is not None:
            by_expert[expert_key] = last
    if pending:
        if groups:
            groups[last if last >= 0 else -1][2].extend(pending)
        else:
            groups.append((calls[pending[0]].scope[-1], "other", pending))
    for _, _, members in groups:
        members.sort()
    return groups


def _expert_key(
    call: OpCall, weight: TensorSpec | None, experts: Sequence[str]
) -> tuple[str, str, tuple[int, ...]] | None:
    """(experts module, projection, weight shape) of a matrix product run by the experts of a
    mixture-of-experts block, None for any other: the same projection of every expert runs as one
    grouped GEMM. The projection is the weight's name within the experts without the expert's
    index, whether the experts are a module list (``experts.3.w2.weight``) or one module holding
    every expert's weights (``experts.down_proj[3]``)."""
    if weight is None or weight.param is None:
        return None
    inside = [s for s in call.scope if any(s == e or s.startswith(e + ".") for e in experts)]
    if not inside:  # an expert's slice of a stack outside a module named experts (JetMoE's, opcount.llm.jetmoe)
        stacked = re.fullmatch(r"(.+)\[\d+\]", weight.param)
        return None if stacked is None else (stacked[1], "", weight.shape)
    block = next(e for e in experts if inside[-1] == e or inside[-1].startswith(e + "."))
    member = re.sub(r"\[\d+\]$", "", weight.param.removeprefix(block))  # one module's stacked weights
    member = re.sub(r"^\.\d+\.", ".", member)  # a module list's expert index
    return block, member, weight.shape


def _compulsory(
    moved: Sequence[Traffic | None],
    base: Callable[[TensorSpec | None], TensorSpec | None],
    producer: dict[int, int],
    returned: set[int | None],
    price: Callable[[Access], float],
) -> tuple[list[float], list[float]]:
    """Bytes no engine avoids: each weight and cache tensor read once (its largest read: an
    embedding table's looked-up rows, unless a tied output layer reads it all; read through several
    views, a state head by head, the sum of each view's largest read, never more than the tensor:
    an expanded view of a bias reads the bias), every cache write,
    the inputs read once and the returned outputs written once (0-d ones, counters and offsets, are
    kernel arguments). Per call: the bytes of weights and caches, and of inputs and outputs, charged
    to it, each tensor to the call reading (or writing) the most of it."""
    # a tensor read, output or a named tensor's view read once -> (its bytes, the call charged)
    once: dict[object, tuple[float, int]] = {}
    named: dict[object, TensorSpec] = {}  # a weight's or cache tensor's key -> the tensor
    weights, io = [0.0] * len(moved), [0.0] * len(moved)
    for i, t in enumerate(moved):
        if t is None or t.alias:
            continue
        for a in t.read:
            s, b = a.tensor, base(a.tensor)
            if s is None or b is None:
                continue
            key: object
            if b.param is not None:  # a weight or a cache tensor, itself or one of its views
                key = (b.param, s.id)
                named[key] = b
            elif b.id not in producer and s.shape:
                key = b.id  # a model input; a 0-d one (a position offset) is a kernel argument, not a read
            else:
                continue
            if price(a) > once.get(key, (0.0, i))[0]:
                once[key] = (price(a), i)
        for a in t.write:
            s, b = a.tensor, base(a.tensor)
            if s is None or b is None:
                continue
            if b.param is not None:
                weights[i] += price(a)
            elif b.id in returned and s.shape:
                key = ("output", b.id)
                if price(a) > once.get(key, (0.0, i))[0]:
                    once[key] = (price(a), i)
    parts: dict[str, float] = {}  # a named tensor -> the bytes read of its parts, summed
    for key, b in named.items():
        parts[b.param or ""] = parts.get(b.param or "", 0.0) + once[key][0]
    for key, (nbytes, i) in once.items():
        b = named.get(key)
        if b is None:
            io[i] += nbytes
        elif parts[b.param or ""]:  # its parts, never more than the whole tensor
            weights[i] += nbytes * min(1.0, price(Access(b, b.nbytes)) / parts[b.param or ""])
    return weights, io
