"""Speed-of-light latency: the roofline per operator call, operator, module and model (AMAIX).

Each operator call is a *layer* (AMAIX's task): it does ``flops`` operations and moves ``bytes``
to and from main memory on one compute unit, so it takes at least

    time = max(flops / peak(unit, dtype), bytes / bandwidth)

and the model takes the sum over its layers (no overlap between layers, no launch overhead).

Conventions
-----------
- **2 FLOPs per multiply-add.** Hardware peaks are quoted that way (a tensor core's "989 TFLOPS"
  counts the multiply and the add), so the roofline always counts a multiply-add as 2 flops,
  whatever ``FlopCountAnalysis``' default (1) is. Other operators count as their flop handles
  say (an add or a ReLU: 1 per element).
- **Handles.** The flops come from a :class:`~opcount.analysis.FlopCountAnalysis`: the one
  passed as ``model`` (its preset and ``set_op_handle`` overrides price the compute), else the
  default preset's. A handle marked ``macs`` counts multiply-adds (its result, whatever the
  analysis' ``flops_per_mac``, is doubled); any other handle, a plain callable or a
  ``spec_handle`` included, is taken as plain flops, as it returns them
  (``spec_handle(fn, macs=True)`` marks a user's formula as multiply-adds).
- **Bytes** come from :class:`~opcount.memory.MemoryTrafficAnalysis` (read once, write once,
  views free); ``fuse=True`` and ``resident_params=True`` are its options.
- **dtype.** The model is traced in its own dtype (usually float32). ``dtype=`` says what it
  would run in: floating-point tensors' bytes are scaled by ``itemsize(dtype) / itemsize(traced)``
  (integer tensors such as indices keep their size) and the peaks of that dtype are used.
- **Units.** Multiply-add operators (conv, matmul family, einsum, attention: the handles marked
  ``macs``) run on ``"tensor"`` when the hardware lists a tensor peak for the dtype (float32 may
  run as TF32 with ``allow_tf32=True``); everything else, and multiply-adds without a tensor peak,
  run on ``"vector"``. A dtype the vector unit does not list runs at its float32 rate.
  ``unit=callable(OpCall) -> name | None`` overrides the mapping (AMAIX's ``map``).

AMAIX refinements
-----------------
- ``scale_ops``, ``scale_ifmap``, ``scale_weight``, ``scale_ofmap``: multiply a layer's flops, its
  activation reads (ifmap), its parameter reads (weight) and its writes (ofmap). Each is a
  number, a ``callable(OpCall) -> float``, or a mapping from operator (``"conv"``,
  ``"aten::addmm"``, or ``"*"`` for the rest) to either. :func:`nvdla_scale_ops` is AMAIX's
  utilization factor ceil(c/Tc) ceil(k/Tk) Tc Tk / (c k) (dark operations of a Tc x Tk MAC array).
- ``pipeline=[["conv1", "bn1", "relu"], ...]``: each group of modules runs as a layer pipeline;
  its time is the largest member time (fill and drain ignored). The dominant member keeps its
  layers' times; the others are hidden (effective time 0), so module times still sum to the total.
- ``fuse=[["conv1", "bn1", "relu"], ...]``: within each group, a tensor produced by one member is
  not read back from memory by the others, and is not written at all when nobody outside the
  group reads it. ``fuse=True`` fuses every elementwise epilogue into its producer instead.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from .analysis import FlopCountAnalysis, op_key
from .handles.memory import Access, Traffic, flat_tensors
from .hardware import TENSOR, VECTOR, Hardware
from .hardware import hardware as lookup_hardware
from .ir import DTYPE_BYTES, OpCall, TensorSpec
from .memory import MemoryTrafficAnalysis, alias_roots
from .report import check_max_depth
from .rollup import grouped
from .tracing import Trace
from .units import seconds, si, size

__all__ = [
    "FLOPS_PER_MAC",
    "Layer",
    "LayerTime",
    "RooflineReport",
    "Summary",
    "mac_array_scale",
    "nvdla_scale_ops",
    "roofline",
    "speed_of_light",
]

FLOPS_PER_MAC = 2
BOUNDS = ("compute", "memory")

ScaleFn = Callable[[OpCall], float]
Scale = float | ScaleFn | Mapping[str, float | ScaleFn] | None
Groups = Sequence[Sequence[str]]


# ================================================================================================
# Layers and their times (pure: no tracing)
# ================================================================================================
@dataclass(frozen=True)
class Layer:
    """One roofline task: ``flops`` (2 per multiply-add) and the bytes it moves, on one unit.

    ``precision`` is the key of the unit's peak table (a dtype name, or ``"tf32"``).
    ``owners`` are the modules it belongs to, root (``""``) first; pipeline groups and module
    rows select layers by them. ``call`` is the operator call it came from, if any.
    """

    name: str
    flops: float
    ifmap_bytes: float = 0.0
    weight_bytes: float = 0.0
    ofmap_bytes: float = 0.0
    unit: str = VECTOR
    precision: str = "float32"
    op: str = ""
    owners: tuple[str, ...] = ()
    call: OpCall | None = field(default=None, compare=False, repr=False)

    @property
    def bytes(self) -> float:
        return self.ifmap_bytes + self.weight_bytes + self.ofmap_bytes

    @property
    def module(self) -> str:
        return self.owners[-1] if self.owners else ""


@dataclass(frozen=True)
class LayerTime:
    """A layer's roofline: ``time = max(compute_time, memory_time)``; ``effective_time`` is what it
    adds to the model total (0 for a pipelined layer hidden behind its group's dominant member)."""

    layer: Layer
    peak: float
    compute_time: float
    memory_time: float
    effective_time: float
    group: int | None = None

    @property
    def time(self) -> float:
        return max(self.compute_time, self.memory_time)

    @property
    def bound(self) -> str:
        return "compute" if self.compute_time >= self.memory_time else "memory"

    @property
    def intensity(self) -> float:
        """FLOPs per byte (inf when no bytes move)."""
        return _ratio(self.layer.flops, self.layer.bytes)

    @property
    def throughput(self) -> float:
        """Attainable FLOP/s: flops / time (the layer's point on the roofline chart)."""
        return _ratio(self.layer.flops, self.time, zero=0.0)

    # The layer's own figures, readable on the LayerTime too (``lt.flops`` as ``lt.layer.flops``).
    @property
    def flops(self) -> float:
        return self.layer.flops

    @property
    def ifmap_bytes(self) -> float:
        return self.layer.ifmap_bytes

    @property
    def weight_bytes(self) -> float:
        return self.layer.weight_bytes

    @property
    def ofmap_bytes(self) -> float:
        return self.layer.ofmap_bytes

    @property
    def unit(self) -> str:
        return self.layer.unit

    @property
    def precision(self) -> str:
        return self.layer.precision


@dataclass(frozen=True)
class Summary:
    """Layers rolled up (an operator, a module, the model).

    ``time`` sums effective times (pipelining applied); ``compute_time`` and ``memory_time`` sum the
    layers' own terms. ``bound`` is the bound of the layers holding most of the own time;
    ``units`` the units used, most time first.
    """

    name: str
    calls: int
    flops: float
    bytes: float
    time: float
    compute_time: float
    memory_time: float
    compute_bound_time: float
    memory_bound_time: float
    units: tuple[str, ...]

    @property
    def intensity(self) -> float:
        return _ratio(self.flops, self.bytes)

    @property
    def throughput(self) -> float:
        return _ratio(self.flops, self.time, zero=0.0)

    @property
    def bound(self) -> str:
        if self.calls == 0:
            return ""
        return "compute" if self.compute_bound_time >= self.memory_bound_time else "memory"


def _ratio(a: float, b: float, zero: float = math.nan) -> float:
    if b > 0:
        return a / b
    return math.inf if a > 0 else zero


def _by_op(layers: Iterable[LayerTime]) -> dict[str, list[LayerTime]]:
    ops: dict[str, list[LayerTime]] = {}
    for t in layers:
        ops.setdefault(t.layer.op, []).append(t)
    return ops


def _summarize(name: str, times: Iterable[LayerTime]) -> Summary:
    calls = 0
    flops = nbytes = time = ct = mt = cb = mb = 0.0
    per_unit: dict[str, float] = {}
    for t in times:
        calls += 1
        flops += t.layer.flops
        nbytes += t.layer.bytes
        time += t.effective_time
        ct += t.compute_time
        mt += t.memory_time
        if t.bound == "compute":
            cb += t.time
        else:
            mb += t.time
        per_unit[t.layer.unit] = per_unit.get(t.layer.unit, 0.0) + t.time
    units = tuple(u for u, _ in sorted(per_unit.items(), key=lambda kv: -kv[1]))
    return Summary(name, calls, flops, nbytes, time, ct, mt, cb, mb, units)


class RooflineReport:
    """Speed-of-light times of every layer, rolled up by operator and module.

    ``layers``: one :class:`LayerTime` per operator call that does work or moves bytes, in
    execution order. ``total_time`` is the model's time (sum of effective times, seconds).
    ``unsupported``: operators with neither a flop nor a memory formula (counted as free).
    """

    def __init__(
        self,
        hardware: Hardware,
        dtype: str,
        layers: Sequence[LayerTime],
        groups: Sequence[tuple[str, ...]] = (),
        unsupported: Mapping[str, int] | None = None,
        fused: Sequence[tuple[str, ...]] | bool = False,
    ) -> None:
        self.hardware = hardware
        self.dtype = dtype
        self.layers: tuple[LayerTime, ...] = tuple(layers)
        self.pipeline: tuple[tuple[str, ...], ...] = tuple(groups)
        self.fused = fused
        self.unsupported: Counter[str] = Counter(unsupported or {})
        self.uncalled: frozenset[str] = frozenset()
        self._modules: dict[str, Summary] | None = None

    # ----- totals --------------------------------------------------------------------------
    @property
    def total_time(self) -> float:
        return sum(t.effective_time for t in self.layers)

    @property
    def total_flops(self) -> float:
        return sum(t.layer.flops for t in self.layers)

    @property
    def total_bytes(self) -> float:
        return sum(t.layer.bytes for t in self.layers)

    def total(self) -> Summary:
        return _summarize("", self.layers)

    def cycles(self, seconds: float) -> float | None:
        """``seconds`` in clock cycles of the hardware (None when it has no clock)."""
        return None if self.hardware.clock_hz is None else seconds * self.hardware.clock_hz

    # ----- roll-ups ------------------------------------------------------------------------
    def by_operator(self) -> dict[str, Summary]:
        """One row per operator key (``conv``, ``addmm``, ...), most time first."""
        rows = [_summarize(op, ts) for op, ts in _by_op(self.layers).items()]
        return {r.name: r for r in sorted(rows, key=lambda r: -r.time)}

    def by_module(self) -> dict[str, Summary]:
        """One row per module that holds layers (the model is ``""``), in first-call order."""
        if self._modules is None:
            groups = grouped((t.layer.owners, t) for t in self.layers)
            self._modules = {name: _summarize(name, ts) for name, ts in groups.items()}
        return self._modules

    def by_module_and_operator(self) -> dict[str, dict[str, Summary]]:
        """Module -> operator -> row, for every module that holds layers."""
        groups = grouped((t.layer.owners, t) for t in self.layers)
        return {m: {op: _summarize(op, ops) for op, ops in _by_op(ts).items()} for m, ts in groups.items()}

    # The analyses' protocol, so report tables can show roofline columns next to theirs.
    def uncalled_modules(self) -> set[str]:
        return set(self.uncalled)

    def unsupported_ops(self, module_name: str = "") -> Counter[str]:
        """Operators without a flop or memory formula (model-wide; counted as free)."""
        return Counter(self.unsupported)

    def module(self, name: str = "") -> Summary:
        """The row of one module (an empty row if it holds no layer)."""
        return self.by_module().get(name) or _summarize(name, ())

    def leaf_modules(self) -> dict[str, Summary]:
        """Rows of the innermost modules that ran layers (where the time is spent)."""
        leaves: dict[str, list[LayerTime]] = {}
        for t in self.layers:
            leaves.setdefault(t.layer.module, []).append(t)
        return {name: _summarize(name, ts) for name, ts in leaves.items()}

    def top(self, n: int = 10, by: str = "module") -> list[Summary]:
        """The ``n`` rows taking the most time: innermost modules (``by="module"``) or operators."""
        rows = self.leaf_modules() if by == "module" else self.by_operator() if by == "operator" else None
        if rows is None:
            raise ValueError(f"by must be 'module' or 'operator', got {by!r}")
        return sorted(rows.values(), key=lambda r: -r.time)[:n]

    # ----- text ----------------------------------------------------------------------------
    def modules(self, max_depth: int | None = None, within: str = "") -> list[Summary]:
        """Module rows: the innermost modules that ran layers, or every module down to ``max_depth``
        levels below the model (``max_depth=0``: the model's own row); only those inside module
        ``within`` (its descendants) when given."""
        check_max_depth(max_depth, optional=True)
        chains = self._chains()  # module -> its owners, the model first: depth and ancestry
        if max_depth is None:
            rows = list(self.leaf_modules().values())
        else:
            lowest = min(max_depth, 1)  # the model's row stands for the whole breakdown at depth 0
            rows = [s for n, s in self.by_module().items() if lowest <= len(chains[n]) - 1 <= max_depth]
        if within:
            rows = [s for s in rows if within in chains[s.name][:-1]]
        return rows

    def _chains(self) -> dict[str, tuple[str, ...]]:
        chains: dict[str, tuple[str, ...]] = {}
        for t in self.layers:
            chain = tuple(dict.fromkeys(("", *t.layer.owners)))
            for depth, name in enumerate(chain):
                chains.setdefault(name, chain[: depth + 1])
        return chains

    def table(self, by: str = "module", top: int | None = 15, max_depth: int | None = None, within: str = "") -> str:
        """A text table: ``by="module"`` (see :meth:`modules`), ``"operator"`` or ``"layer"``
        (every call); ``top`` keeps the slowest rows."""
        import tabulate

        if by == "layer":
            rows = [_layer_row(t) for t in self.layers]
            rows.sort(key=lambda r: -r[-1])
        else:
            if by == "module":
                summaries = self.modules(max_depth, within)
            elif by == "operator":
                summaries = list(self.by_operator().values())
            else:
                raise ValueError(f"by must be 'module', 'operator' or 'layer', got {by!r}")
            rows = [_summary_row(s) for s in sorted(summaries, key=lambda s: -s.time)]
        total = self.total_time
        rows = rows[:top] if top is not None else rows
        body = [[*r[:-1], seconds(r[-1]), f"{100 * r[-1] / total:.1f}%" if total > 0 else ""] for r in rows]
        headers = [by, "unit", "flops", "bytes", "flop/byte", "bound", "time", "share"]
        return tabulate.tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)

    def summary(self) -> str:
        """One paragraph: hardware, dtype, totals and how the time splits between bounds."""
        total = self.total()
        share = 100 * total.compute_bound_time / (total.compute_bound_time + total.memory_bound_time or 1)
        cycles = self.cycles(self.total_time)
        text = (
            f"{self.hardware.name} ({self.dtype}): {seconds(self.total_time)} speed of light"
            + (f" ({cycles:,.0f} cycles)" if cycles is not None else "")
            + f"; {si(total.flops)}FLOP (2 per multiply-add), {size(total.bytes)} moved, "
            f"{_fmt(total.intensity)} FLOP/B; "
            f"{share:.0f}% of the time in compute-bound layers"
        )
        if self.unsupported:
            text += f"; unsupported (counted free): {', '.join(sorted(self.unsupported))}"
        return text

    def __repr__(self) -> str:
        return f"<RooflineReport {self.summary()}>"


def _layer_row(t: LayerTime) -> list[Any]:
    name = f"{t.layer.module or '(model)'}:{t.layer.op}"
    return [name, t.layer.unit, si(t.layer.flops), si(t.layer.bytes), _fmt(t.intensity), t.bound, t.effective_time]


def _summary_row(s: Summary) -> list[Any]:
    return [s.name or "(model)", "+".join(s.units), si(s.flops), si(s.bytes), _fmt(s.intensity), s.bound, s.time]


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else "" if math.isnan(x) else f"{x:.3g}"


def speed_of_light(
    layers: Sequence[Layer], hw: Hardware | str, *, pipeline: Groups | None = None, dtype: str = ""
) -> RooflineReport:
    """The roofline of given layers on ``hw``: each layer's time, pipelining applied.

    Pipeline members are matched against each layer's ``owners`` (and ``name``); every group
    must match layers, and a layer may belong to one group only.
    """
    hw = lookup_hardware(hw)
    own = []
    for layer in layers:
        peak = hw.peak_of(layer.unit, layer.precision)
        if peak is None:
            raise ValueError(
                f"layer {layer.name!r}: {hw.name} has no {layer.unit} peak for {layer.precision} "
                f"(it has {', '.join(f'{u}: {sorted(t)}' for u, t in hw.peak.items())})"
            )
        compute = layer.flops / peak
        memory = layer.bytes / hw.bandwidth
        own.append(LayerTime(layer, peak, compute, memory, max(compute, memory)))
    groups = [tuple(g) for g in pipeline or ()]
    return RooflineReport(hw, dtype, _pipelined(own, groups), groups)


def _pipelined(times: list[LayerTime], groups: Sequence[tuple[str, ...]]) -> list[LayerTime]:
    """Hide every pipelined member but the slowest one of its group (AMAIX: t(pipe) = max of members)."""
    if not groups:
        return times
    member_of: dict[int, tuple[int, int]] = {}  # layer index -> (group, member)
    for g, names in enumerate(groups):
        if not names:
            raise ValueError(f"pipeline group {g} is empty")
        for m, name in enumerate(names):
            hits = [i for i, t in enumerate(times) if name in t.layer.owners or name == t.layer.name]
            if not hits:
                raise ValueError(f"pipeline group {g}: no layer belongs to {name!r}")
            for i in hits:
                if i in member_of:
                    other = groups[member_of[i][0]][member_of[i][1]]
                    raise ValueError(f"pipeline: layer {times[i].layer.name!r} is in both {other!r} and {name!r}")
                member_of[i] = (g, m)
    member_time: dict[tuple[int, int], float] = {}
    for i, (g, m) in member_of.items():
        member_time[(g, m)] = member_time.get((g, m), 0.0) + times[i].time
    dominant: dict[int, int] = {}
    for g, names in enumerate(groups):
        # The first slowest member dominates; ties keep the earlier one.
        dominant[g] = max(range(len(names)), key=lambda m: (member_time[(g, m)], -m))
    out = []
    for i, t in enumerate(times):
        if i not in member_of:
            out.append(t)
            continue
        g, m = member_of[i]
        effective = t.time if m == dominant[g] else 0.0
        out.append(LayerTime(t.layer, t.peak, t.compute_time, t.memory_time, effective, g))
    return out


# ================================================================================================
# AMAIX scaling factors
# ================================================================================================
def mac_array_scale(c: int, k: int, tc: int = 64, tk: int = 16) -> float:
    """Executed / useful multiply-adds of a Tc x Tk weight-stationary MAC array (AMAIX's scale_ops):
    ceil(c/Tc) ceil(k/Tk) Tc Tk / (c k), for c input and k output channels; 1 when both divide."""
    if c <= 0 or k <= 0 or tc <= 0 or tk <= 0:
        raise ValueError(f"channels and array sizes must be positive, got c={c}, k={k}, tc={tc}, tk={tk}")
    return math.ceil(c / tc) * math.ceil(k / tk) * tc * tk / (c * k)


_CONV = {
    "aten::_convolution",
    "aten::convolution",
    "aten::_convolution_mode",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
}
_CONV_T = {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"}
CONV_TRANSPOSED = 6


def gemm_channels(call: OpCall) -> tuple[int, int] | None:
    """(c, k): the reduction (input channels) and output-channel sizes of a conv or matrix product,
    None for other operators. Conv weights are [k, c/groups, ...] ([c, k/groups, ...] transposed)."""
    tensors = [s for s in call.inputs if isinstance(s, TensorSpec)]
    kind = call.kind
    if kind in _CONV or kind in _CONV_T:
        w = tensors[1].shape
        transposed = kind in _CONV_T or (
            kind in ("aten::_convolution", "aten::convolution")
            and getattr(call.inputs[CONV_TRANSPOSED], "value", False) is True
        )
        return (w[0], w[1]) if transposed else (w[1], w[0])
    if kind == "aten::linear":  # weight [k, c]
        return tensors[1].shape[1], tensors[1].shape[0]
    if kind in ("aten::addmm", "aten::baddbmm"):  # (bias, x, w): w [..., c, k]
        return tensors[2].shape[-2], tensors[2].shape[-1]
    if kind in ("aten::mm", "aten::bmm", "aten::matmul") and tensors[1].rank >= 2:
        return tensors[1].shape[-2], tensors[1].shape[-1]
    return None


def nvdla_scale_ops(tc: int = 64, tk: int = 16) -> ScaleFn:
    """AMAIX's scale_ops for a Tc x Tk MAC array (NVDLA full, fp16: Tc = 64, Tk = 16) as a
    ``callable(OpCall) -> float``: :func:`mac_array_scale` of a conv's or product's channels, 1 otherwise."""

    def scale(call: OpCall) -> float:
        ck = gemm_channels(call)
        return 1.0 if ck is None else mac_array_scale(ck[0], ck[1], tc, tk)

    scale.__doc__ = f"NVDLA-style MAC array utilization, Tc={tc}, Tk={tk}"
    return scale


def _scale_of(scale: Scale, call: OpCall, op: str, what: str) -> float:
    if scale is None:
        return 1.0
    if isinstance(scale, Mapping):
        scale = scale.get(call.kind, scale.get(op, scale.get("*", 1.0)))
    value = scale(call) if callable(scale) else scale
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{what} for {call.kind} in '{call.scope[-1]}' must be a finite number >= 0, got {value!r}")
    return float(value)


# ================================================================================================
# From a model: trace, flops, bytes, units
# ================================================================================================
_FLOATING = frozenset(d for d in DTYPE_BYTES if d.startswith(("float", "bfloat", "complex")))


Source = nn.Module | Trace | FlopCountAnalysis | MemoryTrafficAnalysis


def roofline(
    model: Source,
    inputs: Any = None,
    hardware: Hardware | str | None = None,
    dtype: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    allow_tf32: bool = False,
    unit: Callable[[OpCall], str | None] | None = None,
    scale_ops: Scale = None,
    scale_ifmap: Scale = None,
    scale_weight: Scale = None,
    scale_ofmap: Scale = None,
    pipeline: Groups | None = None,
    fuse: bool | Groups = False,
    resident_params: bool = False,
    itemsize: Callable[[TensorSpec], float | None] | None = None,
    **trace_options: Any,
) -> RooflineReport:
    """Speed-of-light time of ``model(*inputs, **kwargs)`` on ``hardware`` (a preset name, a
    TOML/JSON file or a :class:`~opcount.hardware.Hardware`). See the module docstring for the
    conventions and options. ``trace_options`` (``tracer``, ``mode``, ``device``, ``loss_fn``)
    say how a module is traced, as for :func:`opcount.trace`.
    ``model`` may instead be a :class:`~opcount.Trace` (analyzed without a forward pass), a
    :class:`FlopCountAnalysis` (its trace, and its handles price the compute), or a ready
    :class:`MemoryTrafficAnalysis` (its trace, handles and ``fuse`` / ``resident_params``
    settings are used); ``inputs``, ``kwargs`` and trace options are then not taken.
    ``dtype``: what the model would run in (default: the dtype it was traced in).
    ``itemsize``: bytes per element of a tensor as stored, where its role decides it (quantized
    weights, a KV cache in another dtype: see :mod:`opcount.llm.precision`); None keeps ``dtype``'s.
    """
    if hardware is None:
        raise TypeError("roofline() needs hardware: a preset name such as 'h100-sxm', a file or a Hardware")
    hw = lookup_hardware(hardware)
    memory, pricing = _sources(model, inputs, kwargs, trace_options, resident_params=resident_params, fuse=fuse)
    per_call = memory.traffic_per_call()
    calls = [c for c, _ in per_call]
    traffic = [t for _, t in per_call]
    traced = _traced_dtype(calls)
    dtype = dtype or traced
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(sorted(DTYPE_BYTES))}")
    if fuse is not True and fuse:
        traffic = fuse_modules(calls, traffic, _resolve_groups(memory, fuse, "fuse"), memory.trace().outputs)
    groups = _resolve_groups(memory, pipeline, "pipeline") if pipeline else []

    tree = memory.module_tree
    layers: list[Layer] = []
    unsupported: Counter[str] = Counter()
    for i, (call, t, (_, value)) in enumerate(zip(calls, traffic, pricing.per_call_at(FLOPS_PER_MAC))):
        handle = pricing.handle_of(call.kind)
        macs = bool(getattr(handle, "macs", False))
        op = getattr(handle, "name", None) or op_key(call.kind)
        flops = float(sum(value.values())) if value else 0.0
        if t is None or value is None:
            unsupported[call.kind] += 1
        t = t or Traffic()
        if flops == 0 and not t.read and not t.write:
            continue
        flops *= _scale_of(scale_ops, call, op, "scale_ops")
        ifmap, weight, ofmap = _split(t, dtype, traced, itemsize)
        ifmap *= _scale_of(scale_ifmap, call, op, "scale_ifmap")
        weight *= _scale_of(scale_weight, call, op, "scale_weight")
        ofmap *= _scale_of(scale_ofmap, call, op, "scale_ofmap")
        chosen = unit(call) if unit is not None else None
        u, precision = _assign(hw, macs, dtype, allow_tf32, chosen, call)
        owners = tree.owners(call.scope[-1])
        layers.append(Layer(f"{owners[-1]}#{i}", flops, ifmap, weight, ofmap, u, precision, op, owners, call))
    report = speed_of_light(layers, hw, pipeline=groups, dtype=dtype)
    report.unsupported = unsupported
    report.uncalled = frozenset(memory.uncalled_modules())
    report.fused = fuse if isinstance(fuse, bool) else tuple(tuple(g) for g in fuse)
    return report


def _sources(
    model: Source,
    inputs: Any,
    kwargs: Mapping[str, Any] | None,
    trace_options: Mapping[str, Any],
    *,
    resident_params: bool,
    fuse: bool | Groups,
) -> tuple[MemoryTrafficAnalysis, FlopCountAnalysis]:
    """The bytes and the flops of one trace: what ``model`` has, the rest made from its trace."""
    if isinstance(model, nn.Module):
        memory = MemoryTrafficAnalysis(
            model, inputs, kwargs, resident_params=resident_params, fuse=fuse is True, **trace_options
        )
        return memory, FlopCountAnalysis(memory.trace())
    if not isinstance(model, (Trace, FlopCountAnalysis, MemoryTrafficAnalysis)):
        raise TypeError(
            "model must be an nn.Module, an opcount.Trace, a FlopCountAnalysis or a MemoryTrafficAnalysis, "
            f"got {type(model).__name__}"
        )
    given = [name for name, v in (("inputs", inputs), ("kwargs", kwargs)) if v is not None] + sorted(trace_options)
    if given:
        raise TypeError(f"roofline() of a {type(model).__name__} takes no {', '.join(given)}: it is traced already")
    if isinstance(model, MemoryTrafficAnalysis):
        if fuse is True or resident_params:
            raise ValueError("give fuse=True / resident_params to the MemoryTrafficAnalysis, not to roofline()")
        return model, FlopCountAnalysis(model.trace())
    traced = model if isinstance(model, Trace) else model.trace()
    memory = MemoryTrafficAnalysis(traced, resident_params=resident_params, fuse=fuse is True)
    return memory, model if isinstance(model, FlopCountAnalysis) else FlopCountAnalysis(traced)


def _traced_dtype(calls: Sequence[OpCall]) -> str:
    """The dtype of the first floating-point parameter the model uses (else of any float tensor)."""
    fallback = None
    for call in calls:
        for t in flat_tensors(call.inputs):
            if t.dtype in _FLOATING:
                if t.param is not None:
                    return t.dtype
                fallback = fallback or t.dtype
    return fallback or "float32"


def _split(
    t: Traffic, dtype: str, traced: str, itemsize: Callable[[TensorSpec], float | None] | None = None
) -> tuple[float, float, float]:
    """(ifmap, weight, ofmap) bytes in ``dtype``: parameter reads are weights, other reads ifmap."""
    ifmap = weight = 0.0
    for a in t.read:
        nbytes = _in_dtype(a, dtype, traced, itemsize)
        if a.tensor is None or a.tensor.param is not None:
            weight += nbytes
        else:
            ifmap += nbytes
    return ifmap, weight, sum(_in_dtype(a, dtype, traced, itemsize) for a in t.write)


def _in_dtype(
    a: Access, dtype: str, traced: str, itemsize: Callable[[TensorSpec], float | None] | None = None
) -> float:
    """Bytes of one access once floating-point data is stored in ``dtype`` (or as ``itemsize``
    prices its tensor); an access of no known tensor (a handle's plain byte count) is taken to be
    in the traced dtype."""
    if itemsize is not None and a.tensor is not None:
        size = itemsize(a.tensor)
        if size is not None:
            return a.nbytes * size / DTYPE_BYTES[a.tensor.dtype]
    source = a.tensor.dtype if a.tensor is not None else traced
    if source not in _FLOATING:
        return a.nbytes
    return a.nbytes * DTYPE_BYTES[dtype] / DTYPE_BYTES[source]


def _assign(
    hw: Hardware, macs: bool, dtype: str, allow_tf32: bool, chosen: str | None, call: OpCall
) -> tuple[str, str]:
    if chosen is not None:
        if chosen not in hw.peak:
            raise ValueError(f"unit() chose {chosen!r} for {call.kind}; {hw.name} has units {', '.join(hw.units)}")
        candidates = [(chosen, dtype), (chosen, "float32")]
    else:
        candidates = []
        if macs:
            candidates.append((TENSOR, dtype))
            if dtype == "float32" and allow_tf32:
                candidates.append((TENSOR, "tf32"))
        candidates += [(VECTOR, dtype), (VECTOR, "float32")]
    candidates = list(dict.fromkeys(candidates))
    for u, precision in candidates:
        if hw.peak_of(u, precision) is not None:
            return u, precision
    raise ValueError(
        f"{hw.name} has no unit for {call.kind} in {dtype} (tried {', '.join(f'{u}/{p}' for u, p in candidates)}; "
        f"it has {', '.join(f'{u}: {sorted(t)}' for u, t in hw.peak.items())}); pass another dtype="
    )


def _resolve_groups(analysis: MemoryTrafficAnalysis, groups: Groups | bool, what: str) -> list[tuple[str, ...]]:
    if isinstance(groups, (str, bool)) or not all(isinstance(g, Sequence) and not isinstance(g, str) for g in groups):
        raise TypeError(f"{what} takes groups of module names, e.g. [['conv1', 'bn1', 'relu']]")
    resolved = []
    for group in groups:
        try:
            resolved.append(tuple(analysis.canonical_module_name(name) for name in group))
        except KeyError as e:
            raise ValueError(f"{what}: {e.args[0]}") from None
    return resolved


def fuse_modules(
    calls: Sequence[OpCall],
    traffic: Sequence[Traffic | None],
    groups: Sequence[Sequence[str]],
    outputs: Sequence[TensorSpec] = (),
) -> list[Traffic | None]:
    """Layer fusion by module groups (AMAIX: an intermediate kept on chip has data scale 0).

    A call belongs to a group when one of the group's modules was running when it ran.
    Within a group, reads of a tensor the group produced are dropped; its write is dropped too
    when every reader is in the group and the model does not return it (``outputs``: the
    trace's output tensors, read after the model returns; a tensor nobody reads stays too).
    Views are followed; an unsupported call reads all its inputs.
    """
    group_of: dict[int, int] = {}
    for g, names in enumerate(groups):
        for i, call in enumerate(calls):
            # call.scope is the stack of modules running when the call ran, root first
            if any(name in call.scope for name in names) and group_of.setdefault(i, g) != g:
                raise ValueError(f"fuse: a call in '{call.scope[-1]}' belongs to groups {group_of[i]} and {g}")
    roots = alias_roots(calls, traffic)

    def root(spec: TensorSpec | None) -> int | None:
        if spec is None or spec.id is None:
            return None
        return roots.get(spec.id, spec).id

    producer: dict[int, int] = {}
    readers: dict[int, set[int]] = {}
    for i, (call, t) in enumerate(zip(calls, traffic)):
        if t is not None and t.alias:
            continue
        reads = flat_tensors(call.inputs) if t is None else (a.tensor for a in t.read)
        for spec in reads:
            r = root(spec)
            if r is not None:
                readers.setdefault(r, set()).add(i)
        for a in t.write if t is not None else ():
            r = root(a.tensor)
            if r is not None and a.tensor is not None and a.tensor.param is None:
                producer.setdefault(r, i)

    def local(a: Access, group: int) -> bool:
        r = root(a.tensor)
        return r is not None and r in producer and group_of.get(producer[r]) == group

    returned = {root(spec) for spec in outputs}

    def hidden(a: Access, group: int) -> bool:
        r = root(a.tensor)
        users = readers.get(r, set()) if r is not None else set()
        kept = r in returned
        return not kept and local(a, group) and bool(users) and all(group_of.get(u) == group for u in users)

    out: list[Traffic | None] = []
    for i, t in enumerate(traffic):
        group = group_of.get(i)
        if t is None or group is None:
            out.append(t)
            continue
        read = tuple(a for a in t.read if not local(a, group))
        write = tuple(a for a in t.write if not hidden(a, group))
        out.append(Traffic(read, write, t.alias, t.fusable))
    return out


# ================================================================================================
# Report columns: ``module_table(flops, columns=("flops", "time", "bound"), extra={"roofline": report})``
# ================================================================================================
def _seconds_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else seconds(x)


def _text_cell(x: Any, fmt: Any) -> str:
    return "" if x is None else str(x)


def _percent_cell(x: Any, fmt: Any) -> str:
    return "" if x is None else f"{x:.1f}%"


def _module_values(attr: Callable[[Summary, float], Any]) -> Callable[[Any], dict[str, Any]]:
    def values(sources: Any) -> dict[str, Any]:
        report: RooflineReport = sources.get("roofline")
        total = report.total_time
        return {name: attr(s, total) for name, s in report.by_module().items()}

    return values


def _operator_values(attr: Callable[[Summary, float], Any]) -> Callable[[Any], dict[str, dict[str, Any]]]:
    def values(sources: Any) -> dict[str, dict[str, Any]]:
        report: RooflineReport = sources.get("roofline")
        total = report.total_time
        return {m: {op: attr(s, total) for op, s in ops.items()} for m, ops in report.by_module_and_operator().items()}

    return values


def _register_columns() -> None:
    from .report import COLUMNS, Column, register_column

    specs: list[tuple[str, str, Callable[[Summary, float], Any], Callable[[Any, Any], str], bool]] = [
        ("time", "time", lambda s, total: s.time, _seconds_cell, True),
        ("time_share", "% time", lambda s, total: 100 * s.time / total if total > 0 else None, _percent_cell, False),
        ("bound", "bound", lambda s, total: s.bound or None, _text_cell, False),
        ("unit", "unit", lambda s, total: "+".join(s.units) or None, _text_cell, False),
    ]
    for key, header, attr, render, additive in specs:
        if key not in COLUMNS:
            register_column(
                Column(key, header, ("roofline",), _module_values(attr), _operator_values(attr), render, additive)
            )


_register_columns()
