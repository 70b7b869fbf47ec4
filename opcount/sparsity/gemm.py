"""Weights as GEMM matrices: a weight tensor's view ``W[rows = outputs, cols = reduction]`` and back,
sums over its b x b tiles, and the weight operand of a traced call with its GEMM shape.

The GEMM view of a convolution weight ``[K, C, kh, kw]`` orders the reduction as ``(kh, kw, C)``
(implicit GEMM on channels-last data), so N:M groups and blocks run along input channels, as
NVIDIA's 2:4 pruning tools lay them out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import OpcountValueError
from ..ir import OpCall, TensorSpec

# How a weight tensor becomes W[rows, cols]: "linear" [out, in] as is; "linear_t" the right operand
# [in, out] of x @ W, transposed; "conv" [K, C, *k] -> [K, (*k, C)]; "conv_transpose" [C, K, *k] ->
# [(K, *k), C] (the col2im GEMM, reducing over the input channels C).
VIEWS = ("linear", "linear_t", "conv", "conv_transpose")


def gemm_view(weight: torch.Tensor, view: str) -> torch.Tensor:
    """The weight as its GEMM matrix W[rows = outputs, cols = reduction] (see :data:`VIEWS`)."""
    if view == "linear":
        return weight.reshape(weight.shape[0], -1) if weight.dim() != 2 else weight
    if view == "linear_t":
        return weight.t()
    if view == "conv":
        return weight.movedim(1, -1).reshape(weight.shape[0], -1)
    if view == "conv_transpose":
        return weight.movedim(0, -1).reshape(-1, weight.shape[0])
    raise OpcountValueError(f"unknown GEMM view {view!r}; choose one of {', '.join(VIEWS)}")


def from_gemm_view(matrix: torch.Tensor, view: str, shape: torch.Size) -> torch.Tensor:
    """Inverse of :func:`gemm_view` (to write a mask back onto the weight)."""
    if view == "linear":
        return matrix.reshape(shape)
    if view == "linear_t":
        return matrix.t()
    if view == "conv":
        return matrix.reshape(shape[0], *shape[2:], shape[1]).movedim(-1, 1)
    return matrix.reshape(shape[1], *shape[2:], shape[0]).movedim(-1, 0)


def gemm_shape(shape: Sequence[int], view: str) -> tuple[int, int]:
    if view == "linear":
        return shape[0], math.prod(shape[1:])
    if view == "linear_t":
        return shape[1], shape[0]
    if view == "conv":
        return shape[0], math.prod(shape[1:])
    return math.prod(shape[1:]), shape[0]


def padded(x: torch.Tensor, rows: int, cols: int, value: float = 0.0) -> torch.Tensor:
    """A matrix padded with ``value`` at its ends to multiples of ``rows`` x ``cols``."""
    r, c = x.shape
    return F.pad(x, (0, (-c) % cols, 0, (-r) % rows), value=value)


def tile_sums(x: torch.Tensor, b: int) -> torch.Tensor:
    """Sums over b x b tiles of a matrix (padded with zeros at its edges); integers sum as int32."""
    p = padded(x, b, b)
    dtype = torch.int32 if not p.is_floating_point() else None
    return p.reshape(p.shape[0] // b, b, p.shape[1] // b, b).sum((1, 3), dtype=dtype)


def tile_sizes(rows: int, cols: int, b: int) -> torch.Tensor:
    """Elements of the matrix in each b x b tile (edge tiles are smaller)."""

    def sizes(n: int) -> torch.Tensor:
        out = torch.full((math.ceil(n / b),), float(b))
        out[-1] = n - b * (len(out) - 1)
        return out

    return torch.outer(sizes(rows), sizes(cols))


# ----- the weight operand of a call -----------------------------------------------------------
_CONV = {
    "aten::_convolution",
    "aten::convolution",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::_convolution_mode",
}
_CONV_T = {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"}
_PRODUCTS = {"aten::mm": (0, 1), "aten::matmul": (0, 1), "aten::addmm": (1, 2)}
CONV_TRANSPOSED = 6  # the ``transposed`` argument of aten::_convolution / convolution


@dataclass(frozen=True)
class WeightUse:
    """Where a call's weight is: its spec, its GEMM view, and N (the columns it is applied to)."""

    spec: TensorSpec
    view: str
    rows: int
    cols: int
    n: int


def weight_use(call: OpCall) -> WeightUse | None:
    """The weight of a linear, convolution or matrix product with a parameter operand, else None.

    A linear's or convolution's weight counts even when it is not a parameter (a module whose
    weight a forward pre-hook computes, as ``torch.nn.utils.prune`` does).
    """
    ins = call.inputs
    out = next((s for s in call.outputs if isinstance(s, TensorSpec)), None)
    if out is None:
        return None
    kind = call.kind
    if kind == "aten::linear" and len(ins) > 1 and isinstance(w := ins[1], TensorSpec) and w.rank == 2:
        view = "linear"
    elif kind in _CONV or kind in _CONV_T:
        if len(ins) < 2 or not isinstance(w := ins[1], TensorSpec):
            return None
        transposed = kind in _CONV_T or (
            kind in ("aten::_convolution", "aten::convolution")
            and len(ins) > CONV_TRANSPOSED
            and getattr(ins[CONV_TRANSPOSED], "value", False) is True
        )
        view = "conv_transpose" if transposed else "conv"
    elif kind in _PRODUCTS:
        left, right = (ins[i] if i < len(ins) else None for i in _PRODUCTS[kind])
        if isinstance(right, TensorSpec) and right.param is not None and right.rank == 2:
            w, view = right, "linear_t"
        elif isinstance(left, TensorSpec) and left.param is not None and left.rank == 2:
            w, view = left, "linear"
        else:
            return None
    else:
        return None
    rows, cols = gemm_shape(w.shape, view)
    if rows * cols == 0:
        return None
    if view == "conv_transpose":  # col2im GEMM: applied to every input position
        x = ins[0]
        n = x.numel // cols if isinstance(x, TensorSpec) else 0
    else:  # every output element is one row of W applied to one of N columns
        n = out.numel // rows
    return WeightUse(w, view, rows, cols, n)
