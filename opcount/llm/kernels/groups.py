"""Which operator calls of a phase run as which kernel, and which of their reads and writes cross
a kernel's boundary: the half of :mod:`.kernels` that depends on data flow and module scopes, never
on sizes, so one grouping serves every point of a fitted region (:mod:`opcount.llm.sweep.prices`).

A grouping names accesses as :class:`Ref` (a call, and a position among its reads or writes); what each
access costs at a point is :class:`.estimate.CallPrices`' business.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ...handles.attention import SDPA_KEY, SDPA_VALUE
from ...handles.memory import Access, Traffic, flat_tensors
from ...handles.registry import FLOPS
from ...ir import OpCall, TensorSpec
from ...memory import alias_roots, data_flow

ATTENTION_KINDS = frozenset(
    {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_scaled_dot_product_cudnn_attention",
    }
)


class Ref(NamedTuple):
    """One access of a call: ``position`` among the reads (or among the writes) of call ``call``."""

    call: int
    position: int


@dataclass(frozen=True)
class Kernel:
    """One kernel: the operator ``calls`` it runs (indices into the phase's calls) and its ``kind``
    (gemm, grouped_gemm, attention or other); its figures are its schedule's, at its index."""

    name: str
    kind: str
    calls: tuple[int, ...]


class TensorReads(NamedTuple):
    """A tensor a kernel reads from outside: its reads (read once: their largest), ``streamed`` where
    it streams past every tile of queries (attention's K and V, and what a K made in the kernel is
    made from)."""

    refs: tuple[Ref, ...]
    streamed: bool


class Move(NamedTuple):
    """One access of a compulsory tensor: a read or a ``write`` of call ``call``, ``position`` among
    its reads or writes."""

    write: bool
    call: int
    position: int


class CompulsoryTensor(NamedTuple):
    """A tensor no engine avoids moving: the weight's or cache's ``name`` (None for an input or an
    output), its ``moves``, and where the whole named tensor is (``whole``: the call, and the position
    among that call's tensors), which caps the sum of its views."""

    name: str | None
    moves: tuple[Move, ...]
    whole: Ref | None


@dataclass
class _Forming:
    """A fused kernel while calls join it."""

    name: str
    kind: str
    calls: list[int]


@dataclass(frozen=True)
class KernelGroups:
    """The kernels of a phase, in launch order, and what each moves.

    ``groups``: the kernels. ``reads``: per kernel, the tensors it reads from outside. ``writes``:
    per kernel, the writes that leave it. ``compulsory``: the tensors no engine avoids moving (each
    weight, cache and input read once, each returned output written once; a weight or cache read
    through several views: each view): its bytes are the largest access, charged to the first call
    moving that much. ``weight_writes``: the writes of weights and caches (every one compulsory)."""

    mode: str
    groups: tuple[Kernel, ...]
    reads: tuple[tuple[TensorReads, ...], ...]
    writes: tuple[tuple[Ref, ...], ...]
    compulsory: tuple[CompulsoryTensor, ...]
    weight_writes: tuple[Ref, ...]

    @property
    def kernel_of(self) -> dict[int, int]:
        return {i: k for k, kernel in enumerate(self.groups) for i in kernel.calls}


def moved_by(call: OpCall, t: Traffic | None) -> Traffic:
    """What a call moves: its traffic, or (an operator with no memory handle) each input read whole."""
    return t or Traffic(read=tuple(Access(s, s.nbytes) for s in flat_tensors(call.inputs)))


def group_kernels(
    calls: Sequence[OpCall],
    moved: Sequence[Traffic | None],
    outputs: Collection[TensorSpec],
    timed: Sequence[bool],
    mode: str,
    moe_blocks: Sequence[str] = (),
    chains: Sequence[str] = (),
) -> KernelGroups:
    """The kernels of the calls of one trace (``moved``: their traffic; ``outputs``: what the model
    returns; ``timed``: the calls the roofline prices, the others launching nothing; ``chains``:
    modules whose products of two activations run as one kernel, :func:`.estimate.schedule_kernels`)."""
    roots = alias_roots(calls, moved)

    def root(spec: TensorSpec | None) -> int | None:
        if spec is None or spec.id is None:
            return None
        return roots.get(spec.id, spec).id

    fused = mode == "fused"
    groups = _group(calls, root, moe_blocks, chains) if fused else _eager(calls, timed)
    producer, readers = data_flow(calls, moved, roots)
    returned = {root(s) for s in outputs}

    reads: list[tuple[TensorReads, ...]] = []
    writes: list[tuple[Ref, ...]] = []
    for kernel in groups:
        kind, members = kernel.kind, kernel.calls
        inside = set(members)
        read: dict[object, list[Ref]] = {}
        written: list[Ref] = []
        for i in members:
            t = moved_by(calls[i], moved[i])
            if t.alias:
                continue
            for n, a in enumerate(t.read):
                r = root(a.tensor)
                if r is not None and producer.get(r) in inside and a.tensor is not None and a.tensor.param is None:
                    continue  # made on chip by this kernel
                key: object = r if r is not None else (i, n)
                if a.tensor is not None and a.tensor.param is not None and a.tensor.id != r:
                    key = (r, a.tensor.id)  # a named view (a cache read head by head): its own part
                read.setdefault(key, []).append(Ref(i, n))
            for n, a in enumerate(t.write):
                r = root(a.tensor)
                users = readers.get(r, set()) if r is not None else set()
                param = a.tensor is not None and a.tensor.param is not None
                if not param and r not in returned and users and users <= inside:
                    continue  # consumed on chip
                written.append(Ref(i, n))
        kv: set[object] = set()
        if kind == "attention":  # K and V stream past every tile of queries they do not stay on chip for
            sdpa = calls[members[-1]]
            kv = {root(s) for s in (sdpa.inputs[SDPA_KEY], sdpa.inputs[SDPA_VALUE]) if isinstance(s, TensorSpec)}
            made = [r for r in kv if isinstance(r, int) and producer.get(r) in inside]
            while made:  # K made in the kernel (rotary): what it is made from streams past each tile
                t_made = moved[producer[made.pop()]]
                for a in t_made.read if t_made is not None else ():
                    r = root(a.tensor)
                    if r is not None and r not in kv:
                        kv.add(r)
                        if producer.get(r) in inside:
                            made.append(r)
        reads.append(tuple(TensorReads(tuple(refs), key in kv) for key, refs in read.items()))
        writes.append(tuple(written))
    compulsory, weight_writes = _compulsory(calls, moved, roots, producer, returned)
    kernels = tuple(Kernel(g.name, g.kind, tuple(g.calls)) for g in groups)
    return KernelGroups(mode, kernels, tuple(reads), tuple(writes), compulsory, weight_writes)


def _compulsory(
    calls: Sequence[OpCall],
    moved: Sequence[Traffic | None],
    roots: dict[int, TensorSpec],
    producer: dict[int, int],
    returned: set[int | None],
) -> tuple[tuple[CompulsoryTensor, ...], tuple[Ref, ...]]:
    """Bytes no engine avoids: each weight and cache tensor read once (its largest read: an
    embedding table's looked-up rows, unless a tied output layer reads it all; read through several
    views, a state head by head, the sum of each view's largest read, never more than the tensor:
    an expanded view of a bias reads the bias), every cache write, the inputs read once and the
    returned outputs written once (0-d ones, counters and offsets, are kernel arguments)."""

    def base(s: TensorSpec | None) -> TensorSpec | None:
        return None if s is None else roots.get(s.id, s) if s.id is not None else s

    where: dict[int, Ref] = {}  # a weight's or cache's id -> where the whole tensor is first seen
    for i, call in enumerate(calls):
        for k, spec in enumerate((*flat_tensors(call.inputs), *flat_tensors(call.outputs))):
            if spec.param is not None and spec.id is not None:
                where.setdefault(spec.id, Ref(i, k))
    once: dict[object, list[Move]] = {}
    named: dict[object, TensorSpec] = {}  # a weight's or cache tensor's key -> the tensor
    weight_writes: list[Ref] = []
    for i, t in enumerate(moved):
        if t is None or t.alias:
            continue
        for n, a in enumerate(t.read):
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
            once.setdefault(key, []).append(Move(False, i, n))
        for n, a in enumerate(t.write):
            s, b = a.tensor, base(a.tensor)
            if s is None or b is None:
                continue
            if b.param is not None:
                weight_writes.append(Ref(i, n))
            elif b.id in returned and s.shape:
                once.setdefault(("output", b.id), []).append(Move(True, i, n))
    out: list[CompulsoryTensor] = []
    for key, moves in once.items():
        b = named.get(key)
        whole = None if b is None or b.id is None else where.get(b.id)
        out.append(CompulsoryTensor(None if b is None else b.param, tuple(moves), whole))
    return tuple(out), tuple(weight_writes)


def _eager(calls: Sequence[OpCall], timed: Sequence[bool]) -> list[_Forming]:
    """One kernel per call that moves bytes or computes (views launch nothing)."""
    out: list[_Forming] = []
    for i, call in enumerate(calls):
        if timed[i]:
            kind = "attention" if call.kind in ATTENTION_KINDS else "other"
            out.append(_Forming(call.scope[-1], kind, [i]))
    return out


def _group(
    calls: Sequence[OpCall],
    root: Callable[[TensorSpec | None], int | None],
    moe_blocks: Sequence[str],
    chains: Sequence[str] = (),
) -> list[_Forming]:
    """The fused kernels (:mod:`.kernels`' docstring), in launch order."""
    groups: list[_Forming] = []
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
            groups.append(_Forming(call.scope[-1], "attention", [*pending, i]))
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
            groups[chained[chain]].calls.extend([*pending, i])
            pending, last = [], chained[chain]
            continue
        if target is None and expert_key is not None:
            target = by_expert.get(expert_key)
        if target is not None:
            if pending:  # the calls since the last kernel run as its epilogue
                groups[last].calls.extend(pending)
                pending = []
            groups[target].calls.append(i)
            last = target
            if groups[target].kind == "gemm" and expert_key is not None:
                groups[target].kind = "grouped_gemm"
            continue
        groups.append(_Forming(call.scope[-1], "gemm", [*pending, i]))
        pending, last = [], len(groups) - 1
        if chain is not None:
            chained[chain] = last
        if source is not None:
            by_input[source] = last
        if expert_key is not None:
            by_expert[expert_key] = last
    if pending:
        if groups:
            groups[last if last >= 0 else -1].calls.extend(pending)
        else:
            groups.append(_Forming(calls[pending[0]].scope[-1], "other", pending))
    for group in groups:
        group.calls.sort()
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
    if not inside:  # an expert's slice of a stack outside a module named experts (JetMoE's, opcount.llm.moe.jetmoe)
        stacked = re.fullmatch(r"(.+)\[\d+\]", weight.param)
        return None if stacked is None else (stacked[1], "", weight.shape)
    block = next(e for e in experts if inside[-1] == e or inside[-1].startswith(e + "."))
    member = re.sub(r"\[\d+\]$", "", weight.param.removeprefix(block))  # one module's stacked weights
    member = re.sub(r"^\.\d+\.", ".", member)  # a module list's expert index
    return block, member, weight.shape
