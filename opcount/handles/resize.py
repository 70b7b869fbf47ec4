"""Resampling: a fixed number of operations per output element."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec
from ._shapes import first_tensor_out
from .registry import FLOPS


@FLOPS.register("aten::upsample_nearest2d", fvcore=True)
def upsample_nearest(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """1 per output element (fvcore)."""
    return first_tensor_out(outputs).numel


@FLOPS.register("aten::upsample_bilinear2d", "aten::grid_sampler", fvcore=True)
def upsample_bilinear(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """4 per output element: a weighted sum of the 4 neighbouring inputs (fvcore, seed 000); grid_sampler assumed bilinear."""
    return 4 * first_tensor_out(outputs).numel
