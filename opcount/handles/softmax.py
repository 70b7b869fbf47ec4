"""Softmax and log-softmax along one dimension (chainer-computational-cost conventions).

With ``c = x.shape[dim]`` and ``s = numel(x) / c`` positions: softmax is ``exp`` per element
(numel), a sum of ``c`` values per position (``s * (c - 1)``) and a divide per element (numel):
``2 * numel + s * (c - 1)``; the max subtraction of stable implementations is not counted, as
in chainer-computational-cost. log_softmax is ``x - log(sum(exp(x)))``: exp (numel), sum (``s * (c - 1)``), log (s)
and subtract (numel), i.e. ``2 * numel + s * c = 3 * numel``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..ir import Spec, const, tensor
from ._shapes import dim_index
from .registry import FLOPS

# softmax.int(self, dim, dtype) / _softmax(self, dim, half_to_float); log_softmax alike.
SOFTMAX_INPUT, SOFTMAX_DIM = 0, 1


def softmax_flops(shape: Sequence[int], dim: int) -> int:
    """``2 * numel + s * (c - 1)`` with ``c = shape[dim]``, ``s = numel / c`` (chainer-computational-cost Softmax)."""
    numel = math.prod(shape)
    c = shape[dim] if shape else 1
    positions = numel // c if c else 0
    return 2 * numel + positions * (c - 1)


def _shape_and_dim(inputs: Sequence[Spec], op: str) -> tuple[tuple[int, ...], int]:
    x = tensor(inputs[SOFTMAX_INPUT])
    return x.shape, dim_index(const(inputs[SOFTMAX_DIM]), x.rank, op)


# [*] = softmax([*], dim)
@FLOPS.register("aten::softmax", "aten::_softmax", "aten::special_softmax")
def softmax(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """exp(x) / sum(exp(x), dim): 2 * numel + s * (c - 1), c = x.shape[dim], s = numel / c (chainer-computational-cost Softmax)."""
    shape, dim = _shape_and_dim(inputs, "aten::softmax")
    return softmax_flops(shape, dim)


# [*] = log_softmax([*], dim)
@FLOPS.register("aten::log_softmax", "aten::_log_softmax", "aten::special_log_softmax")
def log_softmax(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """x - log(sum(exp(x), dim)): exp, sum s * (c - 1), log s, subtract: 3 * numel (chainer-computational-cost Softmax + log)."""
    shape, _ = _shape_and_dim(inputs, "aten::log_softmax")
    return 3 * math.prod(shape)
