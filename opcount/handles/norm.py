"""Normalization layers (fvcore's conventions where fvcore counts them)."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, const, maybe_tensor
from ._shapes import numel, shape_of
from .registry import FLOPS, SpecFn

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


def _affine_norm(affine_index: int, doc: str) -> SpecFn:
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


# --- more normalizations -------------------------------------------------------------
# local_response_norm has no aten operator: F.local_response_norm traces to mul, pad, avg_pool,
# mul, add, pow, div, each counted by its own handle.

# rms_norm(input, normalized_shape, weight, eps)
RMS_WEIGHT = 2


@FLOPS.register("aten::rms_norm")
def rms_norm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """numel * (4 if affine else 3): square, mean, scale by the reciprocal root (+ weight multiply), in the per-element style of fvcore's layer norm."""
    affine = len(inputs) > RMS_WEIGHT and maybe_tensor(inputs[RMS_WEIGHT]) is not None
    return numel(shape_of(inputs[0])) * (4 if affine else 3)


# native_layer_norm(input, normalized_shape, weight, bias, eps) -> (out, mean, rstd)
native_layer_norm = FLOPS.register("aten::native_layer_norm")(
    _affine_norm(2, "As layer_norm: numel * (5 if affine else 4) (fvcore's layer_norm convention).")
)
# native_group_norm(input, weight, bias, N, C, HxW, group, eps) -> (out, mean, rstd)
native_group_norm = FLOPS.register("aten::native_group_norm")(
    _affine_norm(1, "As group_norm: numel * (5 if affine else 4) (fvcore's group_norm convention).")
)

# native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps)
# _native_batch_norm_legit(input, weight, bias, running_mean, running_var, training, momentum, eps)
# _native_batch_norm_legit_no_training(input, weight, bias, running_mean, running_var, momentum, eps)


@FLOPS.register("aten::native_batch_norm", "aten::_native_batch_norm_legit")
def native_batch_norm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """As batch_norm (fvcore): eval numel * (2 if affine else 1), training numel * (5 if affine else 4)."""
    value = batch_norm(inputs, outputs)  # the same schema up to 'training'
    assert isinstance(value, int)
    return value


@FLOPS.register("aten::_native_batch_norm_legit_no_training")
def native_batch_norm_eval(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """As batch_norm in eval (fvcore): numel * (2 if affine else 1), a folded scale and shift."""
    return numel(shape_of(inputs[0])) * (2 if maybe_tensor(inputs[BN_WEIGHT]) is not None else 1)
