"""Small helpers shared by the handle families."""

from __future__ import annotations

import math
from collections.abc import Sequence

from ..ir import Spec, TensorSpec, tensor


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def shape_of(spec: Spec) -> tuple[int, ...]:
    return tensor(spec).shape


def first_tensor_out(outputs: Sequence[Spec]) -> TensorSpec:
    for o in outputs:
        if isinstance(o, TensorSpec):
            return o
    raise ValueError(f"operator has no tensor output: {outputs!r}")
