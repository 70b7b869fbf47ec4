"""Resampling: a fixed number of operations per output element."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, const
from ._shapes import first_tensor_out
from .registry import FLOPS, SpecFn


@FLOPS.register("aten::upsample_nearest2d", fvcore=True)
def upsample_nearest(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """1 per output element (fvcore)."""
    return first_tensor_out(outputs).numel


@FLOPS.register("aten::upsample_bilinear2d", "aten::grid_sampler", fvcore=True)
def upsample_bilinear(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """4 per output element: a weighted sum of the 4 neighbouring inputs (fvcore, chainer-computational-cost); grid_sampler assumed bilinear."""
    return 4 * first_tensor_out(outputs).numel


# --- the other interpolation modes -------------------------------------------------------
# Extending fvcore's one-per-source-value reading (nearest 1, bilinear 4): each output element is a
# weighted sum of the 2^d (linear) or 4^d (cubic) nearest inputs, one operation per input taken.
# chainer-computational-cost charges bilinear 9 (3 per 2-point interpolation); fvcore's 4 is kept for consistency.
# All overloads (.vec with scale factors, output_size) share the kind, and the output is traced.


def _per_output(per_element: int, doc: str) -> SpecFn:
    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
        return per_element * first_tensor_out(outputs).numel

    handle.__doc__ = doc
    return handle


# [n, c, *o] = upsample_*([n, c, *i], output_size | scale_factors)
upsample_nearest_nd = FLOPS.register(
    "aten::upsample_nearest1d",
    "aten::upsample_nearest3d",
    "aten::_upsample_nearest_exact1d",
    "aten::_upsample_nearest_exact2d",
    "aten::_upsample_nearest_exact3d",
)(_per_output(1, "1 per output element: one source value copied (fvcore's upsample_nearest2d convention)."))
upsample_linear1d = FLOPS.register("aten::upsample_linear1d")(
    _per_output(
        2, "2 per output element: a weighted sum of the 2 neighbouring inputs (fvcore's bilinear convention in 1-D)."
    )
)
upsample_bilinear_aa = FLOPS.register("aten::_upsample_bilinear2d_aa")(
    _per_output(
        4,
        "4 per output element, as upsample_bilinear2d (fvcore); the antialias filter's wider support when shrinking is not counted.",
    )
)
upsample_trilinear3d = FLOPS.register("aten::upsample_trilinear3d")(
    _per_output(
        8, "8 per output element: a weighted sum of the 8 neighbouring inputs (fvcore's bilinear convention in 3-D)."
    )
)
upsample_bicubic2d = FLOPS.register("aten::upsample_bicubic2d", "aten::_upsample_bicubic2d_aa")(
    _per_output(
        16,
        "16 per output element: a weighted sum of the 4x4 neighbouring inputs (fvcore's bilinear convention, cubic kernel).",
    )
)

# grid_sampler_2d(input, grid, interpolation_mode, padding_mode, align_corners)
# grid_sampler_3d(input, grid, interpolation_mode, padding_mode, align_corners)
GRID_MODE = 2
GRID_2D_COST = {0: 4, 1: 1, 2: 16}  # bilinear, nearest, bicubic
GRID_3D_COST = {0: 8, 1: 1}  # trilinear, nearest


@FLOPS.register("aten::grid_sampler_2d", "aten::cudnn_grid_sampler")
def grid_sampler_2d(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """Per output element: bilinear 4, nearest 1, bicubic 16 (the inputs weighted; fvcore's grid_sampler convention, which assumes bilinear)."""
    mode = const(inputs[GRID_MODE]) if len(inputs) > GRID_MODE else 0
    if mode not in GRID_2D_COST:
        raise ValueError(f"aten::grid_sampler_2d: unknown interpolation mode {mode!r}")
    return GRID_2D_COST[mode] * first_tensor_out(outputs).numel


@FLOPS.register("aten::grid_sampler_3d")
def grid_sampler_3d(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """Per output element: trilinear 8, nearest 1 (the inputs weighted)."""
    mode = const(inputs[GRID_MODE])
    if mode not in GRID_3D_COST:
        raise ValueError(f"aten::grid_sampler_3d: unknown interpolation mode {mode!r}")
    return GRID_3D_COST[mode] * first_tensor_out(outputs).numel
