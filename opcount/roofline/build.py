"""The roofline of a model: its trace turned into layers (AMAIX's tasks), then timed.

:func:`roofline` takes the flops of each operator call from a
:class:`~opcount.analysis.FlopCountAnalysis` and its bytes from a
:class:`~opcount.memory.MemoryTrafficAnalysis` (one trace serves both), prices the bytes in the
dtype the model would run in, maps each call to a compute unit, applies AMAIX's scaling factors
and layer fusion (:func:`fuse_modules`: an intermediate kept on chip has data scale 0), and hands
the layers to :func:`~opcount.roofline.model.speed_of_light`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from torch import nn

from ..analysis import FlopCountAnalysis
from ..errors import HandleError, OpcountTypeError, OpcountValueError
from ..handles.backward_args import CONV_BACKWARD
from ..handles.counts import describe
from ..handles.memory import Access, Traffic, flat_tensors
from ..handles.op_keys import op_key
from ..handles.registry import FLOPS
from ..hardware.lookup import TENSOR, VECTOR, DType, Hardware, dtype_name
from ..hardware.lookup import hardware as lookup_hardware
from ..hardware.spec import SCALED_FP4, dtype_bytes
from ..ir import DTYPE_BYTES, OpCall, TensorSpec
from ..memory import MemoryTrafficAnalysis, alias_roots, data_flow
from ..messages import FAILURES, callable_name, first_line
from ..tracing import Trace
from .model import FLOPS_PER_MAC, Groups, Scale, speed_of_light
from .report import Layer, RooflineReport
from .split import bias_gradient

_FLOATING = frozenset(d for d in DTYPE_BYTES if d.startswith(("float", "bfloat", "complex")))


Source = nn.Module | Trace | FlopCountAnalysis | MemoryTrafficAnalysis


def roofline(
    model: Source,
    inputs: Any = None,
    hardware: Hardware | str | None = None,
    dtype: DType | None = None,
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
    TOML/JSON file or a :class:`~opcount.hardware.lookup.Hardware`). See :mod:`opcount.roofline`'s docstring
    for the conventions and options. ``trace_options`` (``tracer``, ``mode``, ``device``, ``loss_fn``)
    say how a module is traced, as for :func:`opcount.trace`.
    ``model`` may instead be a :class:`~opcount.Trace` (analyzed without a forward pass), a
    :class:`FlopCountAnalysis` (its trace, and its handles price the compute), or a ready
    :class:`MemoryTrafficAnalysis` (its trace, handles and ``fuse`` / ``resident_params``
    settings are used); ``inputs``, ``kwargs`` and trace options are then not taken.
    ``dtype``: what the model would run in, a name or a torch.dtype (default: the dtype it was traced in).
    ``itemsize``: bytes per element of a tensor as stored, where its role decides it (quantized
    weights, a KV cache in another dtype: see :mod:`opcount.llm.precision.dtypes`); None keeps ``dtype``'s.
    """
    if hardware is None:
        raise OpcountTypeError("roofline() needs hardware: a preset name such as 'h100-sxm', a file or a Hardware")
    hw = lookup_hardware(hardware)
    unit = None if unit is None else _guarded(unit, "unit")
    itemsize = None if itemsize is None else _guarded(itemsize, "itemsize")
    memory, pricing = _sources(model, inputs, kwargs, trace_options, resident_params=resident_params, fuse=fuse)
    per_call = memory.traffic_per_call()
    calls = [c for c, _ in per_call]
    traffic = [t for _, t in per_call]
    traced = _traced_dtype(calls)
    dtype = dtype_name(dtype) if dtype else traced
    if dtype not in DTYPE_BYTES and dtype not in SCALED_FP4:
        known = sorted([*DTYPE_BYTES, *SCALED_FP4])
        raise OpcountValueError(f"unknown dtype {dtype!r}; choose one of {', '.join(known)}")
    if fuse is not True and fuse:
        traffic = fuse_modules(calls, traffic, _resolve_groups(memory, fuse, "fuse"), memory.trace().outputs)
    groups = _resolve_groups(memory, pipeline, "pipeline") if pipeline else []

    tree = memory.module_tree
    # The default formula of convolution_backward counts its bias sum, a kernel of its own (split.py).
    split_handle = FLOPS.handles.get(CONV_BACKWARD)
    layers: list[Layer] = []
    unsupported: Counter[str] = Counter()
    for i, (call, t, (_, value)) in enumerate(zip(calls, traffic, pricing.per_call_at(FLOPS_PER_MAC), strict=True)):
        handle = pricing.handle_of(call.kind)
        macs = bool(getattr(handle, "macs", False))
        op = getattr(handle, "name", None) or op_key(call.kind)
        flops = float(sum(value.values())) if value else 0.0
        if t is None or value is None:
            unsupported[call.kind] += 1
        t = t or Traffic()
        if flops == 0 and not t.read and not t.write:
            continue
        # (flops, traffic, multiply-adds, name suffix) of each layer the call makes
        parts = [(flops, t, macs, "")]
        bias = bias_gradient(call, t) if call.kind == CONV_BACKWARD and handle is split_handle else None
        if bias is not None and bias[0] <= flops:
            parts = [(flops - bias[0], bias[2], macs, ""), (bias[0], bias[1], False, ".bias")]
        chosen = unit(call) if unit is not None else None
        owners = tree.owners(call.scope[-1])
        for part_flops, part, part_macs, suffix in parts:
            if suffix != ".bias":  # the bias sum does no multiply-adds for scale_ops to scale
                part_flops *= _scale_of(scale_ops, call, op, "scale_ops")
            ifmap, weight, ofmap = _split(part, dtype, traced, itemsize)
            ifmap *= _scale_of(scale_ifmap, call, op, "scale_ifmap")
            weight *= _scale_of(scale_weight, call, op, "scale_weight")
            ofmap *= _scale_of(scale_ofmap, call, op, "scale_ofmap")
            u, precision = _assign(hw, part_macs, dtype, allow_tf32, chosen, call)
            name = f"{owners[-1]}#{i}{suffix}"
            layers.append(Layer(name, part_flops, ifmap, weight, ofmap, u, precision, op, owners, call))
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
        raise OpcountTypeError(
            "model must be an nn.Module, an opcount.Trace, a FlopCountAnalysis or a MemoryTrafficAnalysis, "
            f"got {type(model).__name__}"
        )
    given = [name for name, v in (("inputs", inputs), ("kwargs", kwargs)) if v is not None] + sorted(trace_options)
    if given:
        raise OpcountTypeError(
            f"roofline() of a {type(model).__name__} takes no {', '.join(given)}: it is traced already"
        )
    if isinstance(model, MemoryTrafficAnalysis):
        if fuse is True or resident_params:
            raise OpcountValueError("give fuse=True / resident_params to the MemoryTrafficAnalysis, not to roofline()")
        return model, FlopCountAnalysis(model.trace())
    traced = model if isinstance(model, Trace) else model.trace()
    memory = MemoryTrafficAnalysis(traced, resident_params=resident_params, fuse=fuse is True)
    return memory, model if isinstance(model, FlopCountAnalysis) else FlopCountAnalysis(traced)


def _scale_of(scale: Scale, call: OpCall, op: str, what: str) -> float:
    if scale is None:
        return 1.0
    if isinstance(scale, Mapping):
        scale = scale.get(call.kind, scale.get(op, scale.get("*", 1.0)))
    value = _guarded(scale, what)(call) if callable(scale) else scale
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
        raise OpcountValueError(
            f"{what} for {call.kind} in '{call.scope[-1]}' must be a finite number >= 0, got {value!r}"
        )
    return float(value)


def _guarded(fn: Callable[[Any], Any], what: str) -> Callable[[Any], Any]:
    """``fn``, one of the caller's functions (``unit``, ``itemsize``, a ``scale_*``), failing with a
    :class:`HandleError` that names it and what it was called on: also where it calls sys.exit(),
    which must not end the caller's process."""

    def guarded(arg: Any) -> Any:
        try:
            return fn(arg)
        except FAILURES as e:
            on = (
                f"{arg.kind} in '{arg.scope[-1]}' on inputs {describe(arg.inputs)}"
                if isinstance(arg, OpCall)
                else f"a tensor {describe((arg,))}"
            )
            raise HandleError(
                f"{what} ({callable_name(fn)}) failed for {on}: {type(e).__name__}: {first_line(e)}"
            ) from e

    return guarded


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
    return a.nbytes * dtype_bytes(dtype) / DTYPE_BYTES[source]


def _assign(
    hw: Hardware, macs: bool, dtype: str, allow_tf32: bool, chosen: str | None, call: OpCall
) -> tuple[str, str]:
    if chosen is not None:
        if chosen not in hw.peak:
            raise OpcountValueError(
                f"unit() chose {chosen!r} for {call.kind}; {hw.name} has units {', '.join(hw.units)}"
            )
        candidates = [(chosen, dtype), (chosen, "float32")]
    else:
        candidates = []
        if macs:
            candidates.append((TENSOR, dtype))
            if dtype == "float32" and allow_tf32:
                candidates.append((TENSOR, "tf32"))
        candidates += [(VECTOR, dtype), (VECTOR, "float32")]
    candidates = list(dict.fromkeys(candidates))
    refused = hw.refuses_products_in(dtype) if macs and chosen is None else None
    if refused is not None:  # an engine runs such weights as w8a16 / w4a16
        raise OpcountValueError(f"{refused}; choose another dtype")
    for u, precision in candidates:
        key = hw.precision_of(u, precision)  # the device's own key: an FP8 request in its FP8 encoding
        if key is not None:
            return u, key
    raise OpcountValueError(
        f"{hw.name} has no unit for {call.kind} in {dtype} (tried {', '.join(f'{u}/{p}' for u, p in candidates)}; "
        f"it has {', '.join(f'{u}: {sorted(t)}' for u, t in hw.peak.items())}); pass another dtype="
    )


def _resolve_groups(analysis: MemoryTrafficAnalysis, groups: Groups | bool, what: str) -> list[tuple[str, ...]]:
    if isinstance(groups, (str, bool)) or not all(isinstance(g, Sequence) and not isinstance(g, str) for g in groups):
        raise OpcountTypeError(f"{what} takes groups of module names, e.g. [['conv1', 'bn1', 'relu']]")
    resolved = []
    for group in groups:
        try:
            resolved.append(tuple(analysis.canonical_module_name(name) for name in group))
        except KeyError as e:
            raise OpcountValueError(f"{what}: {e.args[0]}") from None
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
                raise OpcountValueError(f"fuse: a call in '{call.scope[-1]}' belongs to groups {group_of[i]} and {g}")
    roots = alias_roots(calls, traffic)

    def root(spec: TensorSpec | None) -> int | None:
        if spec is None or spec.id is None:
            return None
        return roots.get(spec.id, spec).id

    producer, readers = data_flow(calls, traffic, roots)

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


def access_bytes(
    a: Access, dtype: str, traced: str, itemsize: Callable[[TensorSpec], float | None] | None = None
) -> float:
    """Bytes of one access as :func:`roofline` prices it (floating-point data stored in ``dtype``,
    or as ``itemsize`` prices its tensor)."""
    return _in_dtype(a, dtype, traced, itemsize)


def traced_dtype(calls: Sequence[OpCall]) -> str:
    """The dtype a model was traced in, as :func:`roofline` reads it from its calls."""
    return _traced_dtype(calls)
