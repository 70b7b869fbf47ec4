"""Loss functions and their backward kernels: flops and bytes.

Flops follow the elementwise conventions (chainer-computational-cost): one flop per elementary
operation (add, multiply, divide, exp, log, max, a comparison that selects) per element of
the broadcast shape ``N = numel(broadcast(input, target))``; operations on scalars (``2 / N``,
``0.5 * beta``) are folded. The reduction then costs what ``sum`` and ``mean`` cost:
``reduction="none"`` 0, ``"sum"`` ``N - 1``, ``"mean"`` ``N`` (the sum, then one divide).
Losses over classes (``nll_loss``, ``cross_entropy``) reduce over the ``S`` samples
(``numel(target)``), and a weighted mean also sums the ``S`` weights it divides by.

A loss's backward kernel writes the input's gradient from the forward's operands and the
incoming gradient (a scalar after a mean or sum); its formula is its own, not two forwards
(a loss's forward ends in a reduction that its backward does not run).

Bytes (chainer-computational-cost's mread / mwrite): a pointwise loss and its backward read
each operand once and write their output once; the class losses read only the entries their
targets pick.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ..ir import Spec, TensorSpec, const, maybe_tensor, tensor
from ._shapes import broadcast_shapes, is_floating
from .memory import Access, Traffic, TrafficFn, generic_traffic, part, whole
from .registry import FLOPS, MEMORY

NONE, MEAN, SUM = 0, 1, 2  # at::Reduction


def reduced(values: int, reduction: object, op: str) -> int:
    """What reducing ``values`` numbers costs: none 0, sum ``values - 1``, mean ``values``."""
    if reduction == NONE:
        return 0
    if reduction == SUM:
        return max(values - 1, 0)
    if reduction == MEAN:
        return values
    raise ValueError(f"{op}: argument 'reduction' is not 0 (none), 1 (mean) or 2 (sum): {reduction!r}")


def _pointwise_size(inputs: Sequence[Spec], first: int, count: int, op: str) -> int:
    """numel of the broadcast shape of the tensors among ``inputs[first:first + count]``."""
    shapes = [t.shape for t in (maybe_tensor(s) for s in inputs[first : first + count]) if t is not None]
    return math.prod(broadcast_shapes(*shapes, op=op))


def _register(*ops: str) -> Callable[[TrafficFn], TrafficFn]:
    """``MEMORY.register`` for handles that return :class:`Traffic` (the registry is typed for counts)."""
    return MEMORY.register(*ops)  # type: ignore[return-value]


def _has(inputs: Sequence[Spec], at: int) -> bool:
    return len(inputs) > at and maybe_tensor(inputs[at]) is not None


# ----- pointwise losses: loss(self, target, reduction, ...) ----------------------------------------
# The formulas' elementary operations per element, in the order the docstrings list them.
Count = Callable[..., int]


def _pointwise(per_element: int, reduction_at: int, operands: int = 2) -> Count:
    def count(inputs: Sequence[Spec], op: str, extra: int = 0) -> int:
        n = _pointwise_size(inputs, 0, operands, op)
        return (per_element + extra) * n + reduced(n, const(inputs[reduction_at]), op)

    return count


_two = _pointwise(2, 2)


@FLOPS.register("aten::mse_loss")
def mse_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """(x - y)^2, reduced: 2 * N + r(N); r: none 0, sum N - 1, mean N."""
    return _two(inputs, "aten::mse_loss")


@FLOPS.register("aten::l1_loss")
def l1_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """|x - y|, reduced: 2 * N + r(N). (Its backward runs as `sgn`, `mul` and `div`.)"""
    return _two(inputs, "aten::l1_loss")


@FLOPS.register("aten::smooth_l1_loss")
def smooth_l1_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """d = |x - y| (2); both branches, 0.5 * d * d / beta (2) and d - 0.5 * beta (1), and a compare that selects one (1): 6 * N + r(N)."""
    return _pointwise(6, 2)(inputs, "aten::smooth_l1_loss")


@FLOPS.register("aten::huber_loss")
def huber_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """d = |x - y| (2); both branches, 0.5 * d * d (2) and delta * (d - 0.5 * delta) (2), and a compare that selects one (1): 7 * N + r(N)."""
    return _pointwise(7, 2)(inputs, "aten::huber_loss")


@FLOPS.register("aten::soft_margin_loss")
def soft_margin_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """log(1 + exp(-y * x)): multiply, negate, exp, log1p: 4 * N + r(N)."""
    return _pointwise(4, 2)(inputs, "aten::soft_margin_loss")


# kl_div(self, target, reduction, log_target); "batchmean" runs as "sum" and a `div`.
@FLOPS.register("aten::kl_div")
def kl_div(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """y * (log(y) - x), or with log_target exp(y) * (y - x): 3 * N + r(N)."""
    return _pointwise(3, 2)(inputs, "aten::kl_div")


# margin_ranking_loss(input1, input2, target, margin, reduction)
@FLOPS.register("aten::margin_ranking_loss")
def margin_ranking_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """max(0, -y * (x1 - x2) + margin): subtract, multiply, negate, add, max: 5 * N + r(N), N the broadcast of the three."""
    return _pointwise(5, 4, operands=3)(inputs, "aten::margin_ranking_loss")


# binary_cross_entropy(self, target, weight, reduction)
BCE_WEIGHT, BCE_REDUCTION = 2, 3


@FLOPS.register("aten::binary_cross_entropy")
def binary_cross_entropy(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """(y - 1) * max(log(1 - x), -100) - y * max(log(x), -100): 9 * N (+ N with a weight) + r(N)."""
    extra = 1 if _has(inputs, BCE_WEIGHT) else 0
    return _pointwise(9, BCE_REDUCTION)(inputs, "aten::binary_cross_entropy", extra)


# binary_cross_entropy_with_logits(self, target, weight, pos_weight, reduction)
BCEL_WEIGHT, BCEL_POS_WEIGHT, BCEL_REDUCTION = 2, 3, 4


@FLOPS.register("aten::binary_cross_entropy_with_logits")
def binary_cross_entropy_with_logits(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """(1 - y) * x + log1p(exp(-|x|)) + max(-x, 0): 10 * N; pos_weight scales the log term by (p - 1) * y + 1 (+ 4 * N), a weight multiplies (+ N); + r(N)."""
    extra = (4 if _has(inputs, BCEL_POS_WEIGHT) else 0) + (1 if _has(inputs, BCEL_WEIGHT) else 0)
    return _pointwise(10, BCEL_REDUCTION)(inputs, "aten::binary_cross_entropy_with_logits", extra)


# ----- losses over classes -------------------------------------------------------------------------
# nll_loss(self [S, C] | [C] | [N, C, *d], target [S] | [] | [N, *d], weight [C], reduction, ignore_index)
NLL_TARGET, NLL_WEIGHT, NLL_REDUCTION = 1, 2, 3


def nll_flops(samples: int, weighted: bool, reduction: object, op: str) -> int:
    """-w[t] * x[t] per sample: S (+ S weighted) + r(S) (+ S - 1 for a weighted mean's total weight)."""
    total_weight = max(samples - 1, 0) if weighted and reduction == MEAN else 0
    return samples * (2 if weighted else 1) + reduced(samples, reduction, op) + total_weight


NLL_FORWARD = tuple(
    f"aten::{op}" for op in "nll_loss nll_loss_nd nll_loss2d nll_loss_forward nll_loss2d_forward".split()
)


@FLOPS.register(*NLL_FORWARD)
def nll_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """-w[t_i] * x[i, t_i] for each of the S = numel(target) samples (the pick is free): S (+ S with a weight) + r(S); a weighted mean divides by the picked weights' sum (+ S - 1)."""
    samples = tensor(inputs[NLL_TARGET]).numel
    return nll_flops(samples, _has(inputs, NLL_WEIGHT), const(inputs[NLL_REDUCTION]), "aten::nll_loss")


# cross_entropy_loss(self, target, weight, reduction, ignore_index, label_smoothing)
CE_TARGET, CE_WEIGHT, CE_REDUCTION, CE_SMOOTHING = 1, 2, 3, 5


@FLOPS.register("aten::cross_entropy_loss")
def cross_entropy_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """log_softmax over the classes (3 * numel(x), as `log_softmax`), then with class indices `nll_loss` on S = numel(target) samples; with class probabilities -sum_c w_c * y_c * logp_c: numel(x) multiplies (+ numel(x) weighted), numel(x) - S adds and S negations, + r(S). label_smoothing > 0: with indices a second term -sum_c w_c * logp_c (numel(x) - S + S, + numel(x) weighted) reduced alike, mixed as (1 - e) * nll + e / C * smooth (3 per reduced value); with probabilities y * (1 - e) + e / C first (+ 2 * numel(x))."""
    op = "aten::cross_entropy_loss"
    x, target = tensor(inputs[0]), tensor(inputs[CE_TARGET])
    weighted, reduction = _has(inputs, CE_WEIGHT), const(inputs[CE_REDUCTION])
    smoothing = const(inputs[CE_SMOOTHING]) if len(inputs) > CE_SMOOTHING else 0.0
    if not isinstance(smoothing, (int, float)):
        raise ValueError(f"{op}: argument 'label_smoothing' is not a number: {smoothing!r}")
    numel = x.numel
    flops = 3 * numel  # log_softmax
    if is_floating(target):  # class probabilities, the input's shape
        samples = numel // x.shape[1 if x.rank > 1 else 0] if numel else 0
        flops += numel * (2 if weighted else 1) + numel + reduced(samples, reduction, op)
        return flops + (2 * numel if smoothing > 0 else 0)
    samples = target.numel
    flops += nll_flops(samples, weighted, reduction, op)
    if smoothing > 0:
        smooth = numel + (numel if weighted else 0) + reduced(samples, reduction, op)
        mixed = samples if reduction == NONE else 1
        flops += smooth + 3 * mixed
    return flops


# ----- backward kernels: (grad, self, target, ...) -> d_self ----------------------------------------
def _backward(per_element: int, reduction_at: int, op: str, mean_extra: int = 0) -> Count:
    def count(inputs: Sequence[Spec]) -> int:
        n = _pointwise_size(inputs, 1, 2, op)
        mean = const(inputs[reduction_at]) == MEAN
        reduced(n, const(inputs[reduction_at]), op)  # validates the reduction
        return (per_element + (mean_extra if mean else 0)) * n

    return count


@FLOPS.register("aten::mse_loss_backward")
def mse_loss_backward(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """d_x = norm * (x - y) * grad, norm = 2 (2 / N for mean, a scalar): 3 * N."""
    return _backward(3, 3, "aten::mse_loss_backward")(inputs)


@FLOPS.register("aten::smooth_l1_loss_backward", "aten::huber_loss_backward")
def smooth_l1_loss_backward(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """d = x - y (1); the linear branch +-c * grad (1), the quadratic one c' * d * grad (2), two compares that select (2): 6 * N (scalar factors of norm, beta or delta folded)."""
    return _backward(6, 3, "aten::smooth_l1_loss_backward")(inputs)


@FLOPS.register("aten::soft_margin_loss_backward")
def soft_margin_loss_backward(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """z = exp(-y * x) (3); -norm * y * z / (1 + z) * grad (5): 8 * N."""
    return _backward(8, 3, "aten::soft_margin_loss_backward")(inputs)


# binary_cross_entropy_backward(grad, self, target, weight, reduction)
BCE_BW_WEIGHT, BCE_BW_REDUCTION = 3, 4


@FLOPS.register("aten::binary_cross_entropy_backward")
def binary_cross_entropy_backward(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """grad * (x - y) / max((1 - x) * x, eps): 6 * N (+ N with a weight, + N for mean's divide by N)."""
    extra = 1 if _has(inputs, BCE_BW_WEIGHT) else 0
    return _backward(6 + extra, BCE_BW_REDUCTION, "aten::binary_cross_entropy_backward", mean_extra=1)(inputs)


# nll_loss_backward(grad, self, target, weight, reduction, ignore_index, total_weight)
NLL_BW_TARGET, NLL_BW_WEIGHT, NLL_BW_REDUCTION = 2, 3, 4


@FLOPS.register("aten::nll_loss_backward", "aten::nll_loss2d_backward")
def nll_loss_backward(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """d_x[i, t_i] = -grad * w[t_i] / total_weight: S negations (+ S weighted, + S for mean's divide); every other entry is a written zero."""
    op = "aten::nll_loss_backward"
    samples = tensor(inputs[NLL_BW_TARGET]).numel
    reduction = const(inputs[NLL_BW_REDUCTION])
    reduced(samples, reduction, op)  # validates the reduction
    return samples * (1 + (1 if _has(inputs, NLL_BW_WEIGHT) else 0) + (1 if reduction == MEAN else 0))


# ----- bytes ---------------------------------------------------------------------------------------
POINTWISE = tuple(
    "aten::" + op
    for op in """mse_loss l1_loss smooth_l1_loss huber_loss soft_margin_loss kl_div margin_ranking_loss
    binary_cross_entropy binary_cross_entropy_with_logits mse_loss_backward smooth_l1_loss_backward
    huber_loss_backward soft_margin_loss_backward binary_cross_entropy_backward""".split()
)


@_register(*POINTWISE)
def pointwise_loss(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Pointwise losses and their backward kernels: read each operand (input, target, weight, incoming gradient) once, write the output (the loss, or the input's gradient) once."""
    return generic_traffic(inputs, outputs)


@_register(*NLL_FORWARD)
def nll_loss_traffic(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Reads the target (and weight) in full and the S = numel(target) entries of the input it picks; writes the output (and the total weight)."""
    x, target = tensor(inputs[0]), tensor(inputs[NLL_TARGET])
    rest = whole(s for s in inputs[NLL_TARGET:] if isinstance(s, TensorSpec))
    return Traffic((part(x, min(target.numel, x.numel)), *rest), whole(outputs))


@_register("aten::nll_loss_backward", "aten::nll_loss2d_backward")
def nll_loss_backward_traffic(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Reads the incoming gradient, the target, the weight and the total weight (not the input: only its shape is used); writes the input's gradient in full (zeros but for the picked entries)."""
    read = whole(s for i, s in enumerate(inputs) if i != 1 and isinstance(s, TensorSpec))
    return Traffic(read, whole(outputs))


@_register("aten::cross_entropy_loss")
def cross_entropy_traffic(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """As `log_softmax` then the loss: reads the input, writes the log-probabilities (the backward reads them); reads back what the loss uses of them (S entries with class indices, all with probabilities) with the target and weight; writes the output."""
    x, target = tensor(inputs[0]), tensor(inputs[CE_TARGET])
    logp = Access(None, x.nbytes)  # the log-probabilities: a tensor of its own, not in the records
    picked = x.numel if is_floating(target) else min(target.numel, x.numel)
    rest = whole(s for s in inputs[CE_TARGET:] if isinstance(s, TensorSpec))
    return Traffic((Access(x, x.nbytes), Access(None, picked * x.itemsize), *rest), (logp, *whole(outputs)))
