"""The AMAIX paper's speed-of-light model: each layer's time on given hardware, pipelining, scaling.

A layer takes ``max(flops / peak(unit, precision), bytes / bandwidth)``; a pipeline group of
layers takes its slowest member's time (AMAIX: t(pipe) = max of members, fill and drain
ignored). AMAIX's scaling factors (``scale_ops``, ``scale_ifmap``, ``scale_weight``,
``scale_ofmap``) multiply a layer's flops and bytes; :func:`nvdla_scale_ops` is its utilization
factor of a Tc x Tk MAC array, ceil(c/Tc) ceil(k/Tk) Tc Tk / (c k), for forward products and for
a training step's ``convolution_backward`` (:func:`conv_backward_channels`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from ..errors import HandleError, OpcountValueError
from ..handles.backward_args import CONV_BACKWARD, CONV_BW_GROUPS, CONV_BW_MASK, CONV_BW_TRANSPOSED, output_mask
from ..hardware.lookup import DType, Hardware, dtype_name
from ..hardware.lookup import hardware as lookup_hardware
from ..ir import OpCall, TensorSpec
from .report import Layer, LayerTime, RooflineReport

FLOPS_PER_MAC = 2

ScaleFn = Callable[[OpCall], float]
Scale = float | ScaleFn | Mapping[str, float | ScaleFn] | None
Groups = Sequence[Sequence[str]]


def speed_of_light(
    layers: Sequence[Layer], hw: Hardware | str, *, pipeline: Groups | None = None, dtype: DType = ""
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
            raise OpcountValueError(
                f"layer {layer.name!r}: {hw.name} has no {layer.unit} peak for {layer.precision} "
                f"(it has {', '.join(f'{u}: {sorted(t)}' for u, t in hw.peak.items())})"
            )
        compute = layer.flops / peak
        memory = layer.bytes / hw.bandwidth
        own.append(LayerTime(layer, peak, compute, memory, max(compute, memory)))
    groups = [tuple(g) for g in pipeline or ()]
    return RooflineReport(hw, dtype_name(dtype), _pipelined(own, groups), groups)


def _pipelined(times: list[LayerTime], groups: Sequence[tuple[str, ...]]) -> list[LayerTime]:
    """Hide every pipelined member but the slowest one of its group (AMAIX: t(pipe) = max of members)."""
    if not groups:
        return times
    member_of: dict[int, tuple[int, int]] = {}  # layer index -> (group, member)
    for g, names in enumerate(groups):
        if not names:
            raise OpcountValueError(f"pipeline group {g} is empty")
        for m, name in enumerate(names):
            hits = [i for i, t in enumerate(times) if name in t.layer.owners or name == t.layer.name]
            if not hits:
                raise OpcountValueError(f"pipeline group {g}: no layer belongs to {name!r}")
            for i in hits:
                if i in member_of:
                    other = groups[member_of[i][0]][member_of[i][1]]
                    raise OpcountValueError(
                        f"pipeline: layer {times[i].layer.name!r} is in both {other!r} and {name!r}"
                    )
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
        raise OpcountValueError(f"channels and array sizes must be positive, got c={c}, k={k}, tc={tc}, tk={tk}")
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


def conv_backward_channels(call: OpCall) -> list[tuple[int, int]]:
    """(c, k) of each product an ``aten::convolution_backward`` computes, the input gradient's
    first; each does the forward convolution's multiply-adds (docs/dispatch.md).

    - d_input is a convolution of the gradient with the same weight in the transposed relation:
      the gradient's channels are its input channels, the forward's input channels its output
      channels. A convolution's w [K, C/g, ...] gives c = K/g, k = C; a transposed
      convolution's w [C, K/g, ...] is an ordinary convolution's weight there: c = K/g, k = C.
    - d_weight is the convolution x^T * grad^T (the batch made channels): per weight value it
      reduces over the batch and the positions the weight is applied to (a convolution's output
      positions, a transposed one's input positions), c = n * prod(positions), and its output
      channels are the weight's first dimension, k = w[0], as a linear's weight gradient
      (``mm(grad^T, x)``) reduces over batch x tokens.
    """
    grad, x, w = (s for s in call.inputs[:3])
    if not (isinstance(grad, TensorSpec) and isinstance(x, TensorSpec) and isinstance(w, TensorSpec)):
        raise HandleError(f"convolution_backward in '{call.scope[-1]}': its first three arguments are not tensors")
    mask = output_mask(call.inputs)
    groups = getattr(call.inputs[CONV_BW_GROUPS], "value", None)
    transposed = getattr(call.inputs[CONV_BW_TRANSPOSED], "value", None)
    if not (mask is not None and isinstance(groups, int) and isinstance(transposed, bool)):
        raise HandleError(
            f"convolution_backward in '{call.scope[-1]}' (weight {w.shape}): arguments {CONV_BW_TRANSPOSED}, {CONV_BW_GROUPS} and "
            f"{CONV_BW_MASK} are not transposed, groups and output_mask: "
            f"{transposed!r}, {groups!r}, {call.inputs[CONV_BW_MASK]!r}"
        )
    parts = []
    if mask[0]:
        parts.append((w.shape[1], w.shape[0]) if transposed else (w.shape[0] // groups, w.shape[1] * groups))
    if mask[1]:
        positions = x.shape[2:] if transposed else grad.shape[2:]
        parts.append((x.shape[0] * math.prod(positions), w.shape[0]))
    return parts


def nvdla_scale_ops(tc: int = 64, tk: int = 16) -> ScaleFn:
    """AMAIX's scale_ops for a Tc x Tk MAC array (NVDLA full, fp16: Tc = 64, Tk = 16) as a
    ``callable(OpCall) -> float``: :func:`mac_array_scale` of a conv's or product's channels,
    for ``convolution_backward`` that of each gradient product weighed by its multiply-adds
    (equal, so their mean; the roofline leaves the bias gradient's sum, a layer of its own,
    unscaled); 1 otherwise."""

    def scale(call: OpCall) -> float:
        if call.kind == CONV_BACKWARD:
            parts = [mac_array_scale(c, k, tc, tk) for c, k in conv_backward_channels(call)]
            return sum(parts) / len(parts) if parts else 1.0
        ck = gemm_channels(call)
        return 1.0 if ck is None else mac_array_scale(ck[0], ck[1], tc, tk)

    scale.__doc__ = f"NVDLA-style MAC array utilization, Tc={tc}, Tk={tk}"
    return scale
