"""Reductions and scans (chainer-computational-cost conventions for Sum/Max/Min/ArgMax).

chainer-computational-cost reduces axis by axis: reducing an axis of size ``d`` costs ``(d - 1)`` operations per
remaining position. Over any set of axes this telescopes to ``numel(in) - numel(out)``, which is
what these handles compute from the traced shapes (so every overload -- full, one dim, a list of
dims, keepdim -- is covered by one formula). Statistics add their elementwise steps on top.
Reductions of integer or bool tensors (counts, masks) cost 0, like index arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..ir import Const, Spec, TensorSpec, const, tensor
from ._shapes import dim_index, first_tensor_out, is_floating
from .elementwise import elementwise_flops
from .registry import FLOPS

REDUCE_INPUT = 0


def _in_out(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> tuple[int, int, bool]:
    x = tensor(inputs[REDUCE_INPUT])
    return x.numel, first_tensor_out(outputs).numel, is_floating(x)


def reduce_flops(numel_in: int, numel_out: int) -> int:
    """``numel_in - numel_out``: one binary operation folds two values into one (chainer-computational-cost Sum/Max)."""
    return max(numel_in - numel_out, 0)


# [*out] = sum([*in], dims, keepdim); prod, amax, amin, argmax, argmin, nansum alike.
@FLOPS.register("aten::sum", "aten::nansum", "aten::prod", "aten::amax", "aten::amin", "aten::argmax", "aten::argmin")
def reduce(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """numel(in) - numel(out): (d - 1) adds, multiplies or max/min per output for each reduced axis of size d (chainer-computational-cost Sum, Max, ArgMax)."""
    return _reduce(inputs, outputs)


def _reduce(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    n_in, n_out, floating = _in_out(inputs, outputs)
    return reduce_flops(n_in, n_out) if floating else 0


# max(self) / max.dim(self, dim, keepdim) -> (values, indices) / max.other(self, other)
MAXMIN_OTHER = 1


@FLOPS.register("aten::max", "aten::min")
def max_min(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """Reduction (full or along dim): numel(in) - numel(out) (chainer-computational-cost Max). Binary max(a, b) / min(a, b): 1 per output element."""
    if len(inputs) > MAXMIN_OTHER and isinstance(inputs[MAXMIN_OTHER], TensorSpec):
        return elementwise_flops(1, outputs)
    return _reduce(inputs, outputs)


# [*out] = mean([*in], dims, keepdim)
@FLOPS.register("aten::mean", "aten::nanmean")
def mean(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """sum then divide: (numel(in) - numel(out)) + numel(out) = numel(in) (chainer-computational-cost Sum + a divide per output)."""
    n_in, _, floating = _in_out(inputs, outputs)
    return n_in if floating else 0


@FLOPS.register("aten::var", "aten::var_mean")
def var(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """mean (numel), subtract (numel), square (numel), sum (numel - out), divide (out): 4 * numel(in); var_mean returns the mean it computed."""
    n_in, _, floating = _in_out(inputs, outputs)
    return 4 * n_in if floating else 0


@FLOPS.register("aten::std", "aten::std_mean")
def std(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """var (4 * numel(in)) then a square root per output: 4 * numel(in) + numel(out)."""
    n_in, n_out, floating = _in_out(inputs, outputs)
    return 4 * n_in + n_out if floating else 0


# norm(self, p, dim, keepdim) (norm.Scalar, norm.ScalarOpt_dim, ...);
# linalg_vector_norm(self, ord, dim, keepdim, dtype); frobenius_norm(self, dim, keepdim).
NORM_ORD = 1


def vector_norm_flops(numel_in: int, numel_out: int, order: object) -> int:
    """Vector p-norm over the reduced axes.

    ord 2: square, sum, sqrt = ``2 * in`` (chainer-computational-cost NormalizeL2: 2c per vector of c).
    ord 1, inf, -inf, 0: one elementwise step (abs or compare) then a sum or max: ``2 * in - out``.
    other p: abs, power, sum, root: ``3 * in``.
    """
    order = 2 if order is None else order
    if isinstance(order, str):
        if order != "fro":
            raise ValueError(f"vector norm: unsupported ord {order!r}")
        order = 2
    if order == 2:
        return 2 * numel_in
    if order in (1, 0, math.inf, -math.inf):
        return 2 * numel_in - numel_out
    return 3 * numel_in


@FLOPS.register("aten::norm", "aten::linalg_vector_norm")
def norm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """||x||_p over dims: p=2 (default): 2 * numel(in) (square, sum, sqrt; chainer-computational-cost NormalizeL2); p in {1, 0, inf}: 2 * in - out; other p: 3 * in."""
    n_in, n_out, floating = _in_out(inputs, outputs)
    order: object = 2
    if len(inputs) > NORM_ORD and isinstance(inputs[NORM_ORD], Const):
        order = const(inputs[NORM_ORD])
    return vector_norm_flops(n_in, n_out, order) if floating else 0


@FLOPS.register("aten::frobenius_norm")
def frobenius_norm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """sqrt(sum(x^2)): 2 * numel(in) (square, sum, sqrt)."""
    n_in, n_out, floating = _in_out(inputs, outputs)
    return vector_norm_flops(n_in, n_out, 2) if floating else 0


@FLOPS.register("aten::logsumexp")
def logsumexp(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """max (in - out), subtract (in), exp (in), sum (in - out), log and add back (2 * out): 4 * numel(in)."""
    n_in, _, floating = _in_out(inputs, outputs)
    return 4 * n_in if floating else 0


# [*] = cumsum([*], dim): a running sum along dim.
SCAN_DIM = 1


@FLOPS.register("aten::cumsum", "aten::cumsum_", "aten::cumprod", "aten::cumprod_")
def cumulative(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """(c - 1) adds (multiplies) per line along dim: numel - numel / c, c = x.shape[dim]; integer scans (index bookkeeping) cost 0."""
    x = tensor(inputs[REDUCE_INPUT])
    if not is_floating(x) or x.numel == 0:
        return 0
    c = x.shape[dim_index(const(inputs[SCAN_DIM]), x.rank, "aten::cumsum")] if x.shape else 1
    return x.numel - x.numel // c


# [..., L - n, ...] = diff([..., L, ...], n, dim, prepend, append): n rounds of neighbour differences,
# L the length along dim after prepend and append are concatenated.
DIFF_N, DIFF_DIM = 1, 2


@FLOPS.register("aten::diff")
def diff(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """Round k of n subtracts neighbours, (L - k) per line along dim: lines * sum_{k=1..n} (L - k), L = out.shape[dim] + n; integer differences (positions, indices) cost 0."""
    out, n = tensor(outputs[0]), const(inputs[DIFF_N])
    if not isinstance(n, int):
        raise ValueError(f"aten::diff: n must be an int, got {n!r}")
    if not is_floating(out) or out.numel == 0:
        return 0
    length = out.shape[dim_index(const(inputs[DIFF_DIM]), out.rank, "aten::diff")]
    return out.numel // length * sum(length + n - k for k in range(1, n + 1))
