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


# --- helpers for the operator library ---------------------------------------

# dtypes whose arithmetic counts as floating-point work; integer and bool tensors carry indices,
# sizes and masks, whose arithmetic chainer-computational-cost treats as free index calculation.
FLOATING_DTYPES: frozenset[str] = frozenset(
    {"float64", "float32", "float16", "bfloat16", "complex128", "complex64", "complex32"}
    | {"float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"}
)


def is_floating(spec: TensorSpec) -> bool:
    return spec.dtype in FLOATING_DTYPES


def tensor_outs(outputs: Sequence[Spec]) -> tuple[TensorSpec, ...]:
    return tuple(o for o in outputs if isinstance(o, TensorSpec))


def dim_index(dim: object, rank: int, op: str) -> int:
    """A possibly negative dimension argument as an index in ``range(rank)`` (rank 0 counts as 1)."""
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ValueError(f"{op}: expected an int dimension, got {dim!r}")
    size = max(rank, 1)
    if not -size <= dim < size:
        raise ValueError(f"{op}: dimension {dim} out of range for rank {rank}")
    return dim % size


def broadcast_shapes(*shapes: Sequence[int], op: str = "broadcast") -> tuple[int, ...]:
    """numpy broadcasting of shapes; ValueError naming ``op`` when they do not broadcast."""
    width = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for axis in range(width):
        sizes = {s[axis - width + len(s)] for s in shapes if axis - width + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError(f"{op}: shapes {[tuple(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)
