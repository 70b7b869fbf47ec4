"""Memory traffic: bytes read and written per operator and module, and arithmetic intensity.

These follow chainer-computational-cost's mread / mwrite unless noted:

- **Bytes** are elements times the size of each tensor's own dtype: float32 4, float16 and
  bfloat16 2, int8 1. A float16 model moves half the bytes of the same model in float32.
- **Read once, write once.** Each operator reads each of its inputs once, parameters included,
  and writes each of its outputs once. Windows that overlap (convolution, pooling) and tiles
  that a blocked kernel re-reads are not counted again; padding is not read.
- **Broadcasting** is free: an operand is read at its own size (a bias of C values is read as
  C values, not expanded to the output's size; chainer-computational-cost instead reads every operand at the
  output's size).
- **Views move nothing**: view, reshape, flatten, transpose, permute, expand, squeeze, basic
  slicing and select only change metadata (chainer-computational-cost counts transpose as a copy; PyTorch makes
  it a view, and the copy, if any, is the later ``contiguous``).
- **Copies** read and write the output's size: concat and stack, padding, roll, ``contiguous``;
  indexing copies (``index``, ``gather``, ``index_select``, ``embedding``) read only the source
  elements they copy, plus their indices.
- **Resampling** reads min(input, taps x output) elements: bilinear has 4 taps, so an upscale
  reads its input once and a downscale only the taps it needs.
- **Batch norm** in eval reads its folded scale and shift once: 2 x C values, not mean,
  variance, weight and bias separately.
- **In place** (``relu_``, ``add_``, ``hardswish_``): the same bytes as out of place. The op
  still reads its operands and writes its result once; "in place" only means the result goes
  into the first operand's storage instead of a new allocation, so no extra memory is used.
- **Options.** ``resident_params=True``: parameters and buffers stay resident in fast memory,
  so a weight is read only by the first call that uses it (a shared module or a tied weight is
  read once per model, not once per call). ``fuse=True``: a tensor whose only consumer is a
  fusable operator (elementwise or eval batch norm) is never materialized: its producer does
  not write it and the consumer does not read it, so conv -> batch_norm -> relu is one memory
  pass (read the conv's input, weights and the folded scale/shift; write the relu's output).
  Fusion follows the data flow, not the order of the trace.
- **Views keep the name of what they view.** An access to a view of a parameter or buffer
  (``weight.t()``, ``conv.weight.view(...)``, ``proj_weight[head]``, an expanded bias, a
  same-dtype ``.to`` of a scalar buffer) carries that tensor's name, so it is a weight read
  wherever weights and activations are told apart (a roofline's weight bytes, an LLM's weight
  formats and speed of light), whatever view it goes through. ``named_views=PREFIXES`` does
  the same for tensors the model held only while it was traced, by name prefix (an LLM's cache,
  ``kv_cache.``, registered for the pass): ``state[:, head]``, ``narrow``, ``select``, a
  ``copy_`` into a slice.
- **Arithmetic intensity** is flops / bytes (read + written), per operator and per module; with
  the default 1 flop per multiply-add it is MACs per byte.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from .analysis import NO_INPUTS, JitModelAnalysis, Statistics
from .errors import HandleError, OpcountValueError
from .handles import MEMORY
from .handles.counts import count_of, describe
from .handles.memory import (
    NOTHING,
    VIEW,
    Access,
    Traffic,
    flat_tensors,
    generic_traffic,
)
from .handles.op_keys import op_key
from .ir import OpCall, TensorSpec
from .rollup import copied
from .tracing import Trace

KINDS = ("read", "write", "both")

__all__ = [
    "KINDS",
    "Access",
    "MemoryTrafficAnalysis",
    "Traffic",
    "arithmetic_intensity",
    "generic_traffic",
    "module_intensity",
]


def _free_families() -> tuple[frozenset[str], frozenset[str]]:
    """(views, operators that touch no tensor data at all) among the explicitly free operators.
    Free operators of other families count as consumers of their inputs: fusion stays safe."""
    families = MEMORY.zero_families()
    views = frozenset(op for op, family in families.items() if family == "views")
    return views, frozenset(op for op, family in families.items() if family in ("metadata", "allocations"))


def _check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise OpcountValueError(f"unknown kind {kind!r}; choose 'read', 'write' or 'both'")
    return kind


@dataclass
class TrafficStatistics(Statistics):
    """``counts`` holds bytes read + written; ``reads`` and ``writes`` each direction; ``keys``
    and ``traffic`` each call's operator key and traffic, the conventions applied."""

    reads: dict[str, Counter[str]]
    writes: dict[str, Counter[str]]
    keys: list[str]
    traffic: list[Traffic | None]


class MemoryTrafficAnalysis(JitModelAnalysis):
    """Bytes read and written per operator and module (conventions: :mod:`opcount.memory`).

    ``resident_params``: a parameter or buffer is read only by the first call that uses it.
    ``fuse``: an intermediate whose only consumer is elementwise (or eval batch norm) is neither
    written nor read. The queries take ``kind="read" | "write" | "both"`` (default both).

    ``set_op_handle`` takes handles that return a :class:`Traffic` or a ``(read, write)`` pair of
    byte counts (the latter take no part in ``resident_params`` and ``fuse``).
    """

    def __init__(
        self,
        model: nn.Module | Trace,
        inputs: Any = NO_INPUTS,
        kwargs: Mapping[str, Any] | None = None,
        *,
        resident_params: bool = False,
        fuse: bool = False,
        named_views: Collection[str] = (),
        **trace_options: Any,
    ) -> None:
        super().__init__(model, inputs, kwargs, **trace_options)
        self._base_ignored = MEMORY.zero
        self._ignored = set(MEMORY.zero)
        self._handles = dict(MEMORY.handles)
        self._resident = bool(resident_params)
        self._fuse = bool(fuse)
        self._named_views = tuple(named_views)

    @property
    def resident_params(self) -> bool:
        return self._resident

    @property
    def fuse(self) -> bool:
        return self._fuse

    # ----- queries (fvcore's surface plus ``kind``) --------------------------------------------
    def total(self, module_name: str = "", kind: str = "both") -> int:
        """Bytes moved by ``module_name`` (default: the model): read, written or both."""
        return sum(self._counts(kind)[self.canonical_module_name(module_name)].values())

    def by_operator(self, module_name: str = "", kind: str = "both") -> Counter[str]:
        """Bytes moved by ``module_name`` per operator."""
        return copied(self._counts(kind)[self.canonical_module_name(module_name)])

    def by_module(self, kind: str = "both") -> Counter[str]:
        """Bytes moved by every module (canonical names), summed over operators."""
        return Counter({name: sum(c.values()) for name, c in self._counts(kind).items()})

    def by_module_and_operator(self, kind: str = "both") -> dict[str, Counter[str]]:
        """Bytes moved by every module per operator (new containers, as every query's)."""
        return {name: copied(c) for name, c in self._counts(kind).items()}

    def _counts(self, kind: str) -> dict[str, Counter[str]]:
        stats = self._analyze()
        return {"both": stats.counts, "read": stats.reads, "write": stats.writes}[_check_kind(kind)]

    def per_call(self, kind: str = "both") -> list[tuple[OpCall, Mapping[str, Any] | None]]:
        """Every recorded call in execution order with its bytes (``{operator: bytes}``; None when
        unsupported), the conventions (``fuse``, ``resident_params``) applied."""
        _check_kind(kind)
        stats = self._analyze()
        result: list[tuple[OpCall, Mapping[str, Any] | None]] = []
        for call, key, t in zip(self._traced().calls, stats.keys, stats.traffic, strict=True):
            if t is None:
                result.append((call, None))
                continue
            moved = {"read": t.read_bytes, "write": t.write_bytes, "both": t.read_bytes + t.write_bytes}[kind]
            result.append((call, Counter({key: moved}) if moved else Counter()))
        return result

    def traffic_per_call(self) -> list[tuple[OpCall, Traffic | None]]:
        """Every recorded call with the tensors it reads and writes, the conventions applied."""
        return list(zip(self._traced().calls, self._analyze().traffic, strict=True))

    # ----- the work ----------------------------------------------------------------------------
    def _analyze(self) -> TrafficStatistics:
        if isinstance(self._stats, TrafficStatistics):  # None until analyzed; this class stores no other
            return self._stats
        trace = self._traced()
        keys, traffic = self._call_traffic(trace.calls)
        values = (
            None if t is None else Counter({(key, "read"): t.read_bytes, (key, "write"): t.write_bytes})
            for key, t in zip(keys, traffic, strict=True)
        )
        counts, unsupported = self._aggregate(trace.calls, values)
        reads, writes, both = {}, {}, {}
        for name, counter in counts.items():
            reads[name] = Counter({op: v for (op, rw), v in counter.items() if rw == "read"})
            writes[name] = Counter({op: v for (op, rw), v in counter.items() if rw == "write"})
            both[name] = reads[name] + writes[name]
        uncalled = set(self._tree.names) - trace.called
        stats = TrafficStatistics(both, unsupported, uncalled, reads, writes, keys, traffic)
        self._stats = stats
        self._warn(unsupported[""], uncalled)
        return stats

    def _call_traffic(self, calls: Sequence[OpCall]) -> tuple[list[str], list[Traffic | None]]:
        """Each call's result key and traffic, the cross-call conventions applied."""
        views, no_data = _free_families()
        keys: list[str] = []
        traffic: list[Traffic | None] = []
        for call in calls:
            handle = self._handles.get(call.kind)
            if handle is None and not self._is_ignored(call.kind):
                handle = self._family_handle(call.kind)
            if handle is None:
                keys.append(op_key(call.kind))
                if not self._is_ignored(call.kind):
                    traffic.append(None)
                else:
                    traffic.append(VIEW if call.kind in views else NOTHING)
                continue
            value, _, key = self._invoke(handle, call)
            keys.append(key)
            traffic.append(as_traffic(value, call))
        roots = alias_roots(calls, traffic)
        traffic = named_views(traffic, roots, self._named_views, state_names(self._traced().model))
        if self._fuse or self._resident:
            if self._fuse:
                traffic = fuse_chains(calls, traffic, roots, no_data, self._traced().outputs)
            if self._resident:
                traffic = resident_reads(traffic, roots)
        return keys, traffic


def as_traffic(value: object, call: OpCall) -> Traffic:
    """A handle's result as Traffic: a Traffic, or a ``(read, write)`` pair of byte counts
    (finite numbers >= 0 of any numeric type, :func:`~opcount.handles.counts.count_of`)."""
    if isinstance(value, Traffic):
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2:
        read, write = count_of(value[0]), count_of(value[1])
        if read is None or write is None:
            raise HandleError(
                f"the memory handle for {call.kind} in module '{call.scope[-1]}' on inputs {describe(call.inputs)} "
                f"returned {value!r}: bytes must be finite numbers >= 0"
            )
        return Traffic((Access(None, read),), (Access(None, write),))
    raise HandleError(
        f"the memory handle for {call.kind} returned {type(value).__name__}, not a Traffic or (read, write) pair"
    )


# ----- cross-call conventions: pure functions of the calls and their traffic --------------------
def alias_roots(calls: Sequence[OpCall], traffic: Sequence[Traffic | None]) -> dict[int, TensorSpec]:
    """Value id -> the tensor it is a view of (through chains of views), for every view output."""
    roots: dict[int, TensorSpec] = {}
    for call, t in zip(calls, traffic, strict=True):
        if t is None or not t.alias:
            continue
        source = next(flat_tensors(call.inputs), None)
        if source is None or source.id is None:
            continue
        root = roots.get(source.id, source)
        for out in flat_tensors(call.outputs):
            if out.id is not None:
                roots[out.id] = root
    return roots


def data_flow(
    calls: Sequence[OpCall], traffic: Sequence[Traffic | None], roots: Mapping[int, TensorSpec]
) -> tuple[dict[int, int], dict[int, set[int]]]:
    """By the id of the tensor a value views (``roots``, :func:`alias_roots`): the first call that
    writes it, weights left out (``producer``), and the calls that read it (``readers``); a view
    call itself neither writes nor reads. What fusion needs to keep a tensor on chip."""
    producer: dict[int, int] = {}
    readers: dict[int, set[int]] = {}
    for i, (call, t) in enumerate(zip(calls, traffic, strict=True)):
        if t is not None and t.alias:
            continue
        for spec in flat_tensors(call.inputs) if t is None else (a.tensor for a in t.read):
            r = _root_id(spec, roots)
            if r is not None:
                readers.setdefault(r, set()).add(i)
        for a in t.write if t is not None else ():
            r = _root_id(a.tensor, roots)
            if r is not None and a.tensor is not None and a.tensor.param is None:
                producer.setdefault(r, i)
    return producer, readers


def _root_id(spec: TensorSpec | None, roots: Mapping[int, TensorSpec]) -> int | None:
    if spec is None or spec.id is None:
        return None
    return roots.get(spec.id, spec).id


def fuse_chains(
    calls: Sequence[OpCall],
    traffic: Sequence[Traffic | None],
    roots: Mapping[int, TensorSpec],
    no_data: Collection[str] = (),
    outputs: Collection[TensorSpec] = (),
) -> list[Traffic | None]:
    """Drop the write and the read of every tensor whose only consumer is a fusable call.

    A consumer is any later call that takes the tensor (or a view of it) as an input, except
    views and ``no_data`` operators (``size``, ``empty_like``) which never touch the data; an
    unsupported call counts as a consumer, so it blocks fusion. The model's ``outputs`` (and
    the tensors they are views of) are consumed by its caller: they are always written.
    """
    returned = {_root_id(spec, roots) for spec in outputs}
    consumers: dict[int, set[int]] = {}
    for i, (call, t) in enumerate(zip(calls, traffic, strict=True)):
        if (t is not None and t.alias) or call.kind in no_data:
            continue
        for spec in flat_tensors(call.inputs):
            rid = _root_id(spec, roots)
            if rid is not None:
                consumers.setdefault(rid, set()).add(i)
    producers: dict[int, int] = {}
    for i, t in enumerate(traffic):
        for access in t.write if t is not None else ():
            written = access.tensor
            if written is not None and written.id is not None and written.param is None:
                producers.setdefault(written.id, i)
    fused: set[int] = set()
    for rid, p in producers.items():
        users = consumers.get(rid, set())
        if len(users) == 1 and rid not in returned:
            (c,) = users
            consumer = traffic[c]
            if c > p and consumer is not None and consumer.fusable:
                fused.add(rid)
    if not fused:
        return list(traffic)

    def keep(access: Access) -> bool:
        return _root_id(access.tensor, roots) not in fused

    return [
        t if t is None else Traffic(tuple(filter(keep, t.read)), tuple(filter(keep, t.write)), t.alias, t.fusable)
        for t in traffic
    ]


def state_names(model: nn.Module) -> frozenset[str]:
    """Every name a parameter or buffer of ``model`` goes by (a shared one under each of its names)."""
    named = (*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False))
    return frozenset(name for name, _ in named)


def named_views(
    traffic: Sequence[Traffic | None],
    roots: Mapping[int, TensorSpec],
    prefixes: Sequence[str],
    names: Collection[str] = frozenset(),
) -> list[Traffic | None]:
    """Each access to a view of a parameter or buffer named in ``names`` or whose name starts with
    one of ``prefixes``, its spec given that name (its own shape, dtype and id kept):
    pricing and the bound then see the named tensor, whatever view it is read or written through."""
    prefixes = tuple(prefixes)

    def named(a: Access) -> Access:
        s = a.tensor
        if s is None or s.param is not None or s.id is None:
            return a
        root = roots.get(s.id)
        if root is None or root.param is None:
            return a
        if not (root.param in names or (prefixes and root.param.startswith(prefixes))):
            return a
        return Access(replace(s, param=root.param), a.nbytes)

    return [
        t if t is None or t.alias else Traffic(tuple(map(named, t.read)), tuple(map(named, t.write)), False, t.fusable)
        for t in traffic
    ]


def resident_reads(traffic: Sequence[Traffic | None], roots: Mapping[int, TensorSpec]) -> list[Traffic | None]:
    """Keep only the first read of each parameter or buffer (by qualified name, through views)."""
    seen: set[str] = set()
    result: list[Traffic | None] = []
    for t in traffic:
        if t is None or not t.read:
            result.append(t)
            continue
        kept = []
        for access in t.read:
            spec = access.tensor
            root: TensorSpec | None = roots.get(spec.id, spec) if spec is not None and spec.id is not None else spec
            param = root.param if root is not None else None
            if param is not None:
                if param in seen:
                    continue
                seen.add(param)
            kept.append(access)
        result.append(Traffic(tuple(kept), t.write, t.alias, t.fusable))
    return result


# ----- arithmetic intensity -----------------------------------------------------------------
Table = Mapping[str, Mapping[str, float]]


def _table(x: JitModelAnalysis | Table) -> Table:
    return x.by_module_and_operator() if isinstance(x, JitModelAnalysis) else x


def arithmetic_intensity(
    flops: JitModelAnalysis | Table, memory: JitModelAnalysis | Table
) -> dict[str, dict[str, float]]:
    """Flops per byte moved, ``{module: {operator: flops / bytes}}``.

    Takes the analyses or their ``by_module_and_operator()`` tables (bytes: read + written).
    Operators that moved no counted bytes are left out (their intensity is undefined); an
    operator that moves bytes but does no flops has intensity 0.
    """
    f, m = _table(flops), _table(memory)
    result: dict[str, dict[str, float]] = {}
    for module, moved in m.items():
        ops = f.get(module, {})
        result[module] = {op: ops.get(op, 0) / b for op, b in moved.items() if b > 0}
    return result


def module_intensity(flops: JitModelAnalysis | Table, memory: JitModelAnalysis | Table) -> dict[str, float]:
    """Flops per byte moved of every module as a whole, ``{module: sum(flops) / sum(bytes)}``;
    modules that moved no bytes are left out."""
    f, m = _table(flops), _table(memory)
    result: dict[str, float] = {}
    for module, moved in m.items():
        total = sum(moved.values())
        if total > 0:
            result[module] = sum(f.get(module, {}).values()) / total
    return result
