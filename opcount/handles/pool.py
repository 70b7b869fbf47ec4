"""Pooling."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec
from ._shapes import shape_of, numel
from .registry import FLOPS


@FLOPS.register("aten::adaptive_avg_pool2d", fvcore=True)
def adaptive_avg_pool(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """1 per input element: every input is added once into its window's sum (fvcore)."""
    return numel(shape_of(inputs[0]))
