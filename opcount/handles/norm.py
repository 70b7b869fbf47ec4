"""Normalization layers (fvcore's conventions where fvcore counts them)."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, const, maybe_tensor
from ._shapes import numel, shape_of
from .registry import FLOPS

# aten::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
BN_WEIGHT, BN_TRAINING = 1, 5


def norm_flops(x_shape: Sequence[int], affine: bool) -> int:
    """Mean, variance, subtract, divide per element (4), plus the affine scale-shift (5)."""
    if not 2 <= len(x_shape) <= 5:
        raise ValueError(f"normalization input must have rank 2 to 5, got shape {tuple(x_shape)}")
    return numel(x_shape) * (5 if affine else 4)


@FLOPS.register("aten::batch_norm", fvcore=True)
def batch_norm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """Eval: numel * (2 if affine else 1) (a folded scale and shift). Training: numel * (5 if affine else 4)."""
    training = const(inputs[BN_TRAINING])
    if not isinstance(training, bool):
        raise ValueError(f"aten::batch_norm: argument {BN_TRAINING} is not 'training': {training!r}")
    x = shape_of(inputs[0])
    affine = maybe_tensor(inputs[BN_WEIGHT]) is not None
    if training:
        return norm_flops(x, affine)
    return numel(x) * (2 if affine else 1)


def _affine_norm(affine_index: int, doc: str):  # type: ignore[no-untyped-def]
    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
        return norm_flops(shape_of(inputs[0]), maybe_tensor(inputs[affine_index]) is not None)

    handle.__doc__ = doc
    return handle


# group_norm(input, num_groups, weight, ...), layer_norm(input, shape, weight, ...),
# instance_norm(input, weight, ...): the weight's position says whether the norm is affine.
group_norm = FLOPS.register("aten::group_norm", fvcore=True)(
    _affine_norm(2, "numel * (5 if affine else 4): mean, variance, subtract, divide (+ scale and shift).")
)
layer_norm = FLOPS.register("aten::layer_norm", fvcore=True)(
    _affine_norm(2, "numel * (5 if affine else 4): mean, variance, subtract, divide (+ scale and shift).")
)
instance_norm = FLOPS.register("aten::instance_norm", fvcore=True)(
    _affine_norm(1, "numel * (5 if affine else 4): mean, variance, subtract, divide (+ scale and shift).")
)
