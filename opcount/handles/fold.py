"""Sliding blocks (``F.unfold`` is ``im2col``, ``F.fold`` is ``col2im``): a gather, and its adjoint that sums.

``im2col`` copies each block of the image into a column: no arithmetic. ``col2im`` puts every column
value back at its image position and sums the values that overlap there, so it costs additions;
neither fvcore nor chainer-computational-cost has a formula for it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, const
from ._shapes import first_tensor_out, numel, shape_of
from .registry import FLOPS

# col2im(self, output_size, kernel_size, dilation, padding, stride) -> [n, c, *o] (or [c, *o] unbatched)
COL2IM_INPUT, COL2IM_KERNEL, COL2IM_DILATION, COL2IM_PADDING, COL2IM_STRIDE = 0, 2, 3, 4, 5


def _pairs(inputs: Sequence[Spec], index: int, rank: int, op: str) -> tuple[int, ...]:
    """An ``int[2]`` argument (one value stands for every spatial dimension), checked."""
    value = const(inputs[index])
    values = (value,) if isinstance(value, int) else value
    if not isinstance(values, tuple) or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ValueError(f"{op}: argument {index} is not a list of ints: {value!r}")
    if len(values) == 1:
        values = values * rank
    if len(values) != rank:
        raise ValueError(f"{op}: argument {index} {values} does not fit {rank} spatial dims")
    return values


def landing(size: int, kernel: int, dilation: int, padding: int, stride: int, blocks: int) -> int:
    """The (kernel offset, block) pairs of one spatial dimension whose position falls inside the
    image, ``#{(i, l): 0 <= l*stride - padding + i*dilation < size}``; the rest fall on padding."""
    total = 0
    for i in range(kernel):
        shift = padding - i * dilation  # block l lands at l*stride - shift
        first = max(0, -(-shift // stride))  # smallest l with l*stride >= shift
        end = min(blocks, max(0, -(-(size + shift) // stride)))  # smallest l with l*stride >= size + shift
        total += max(0, end - first)
    return total


def blocks_along(size: int, kernel: int, dilation: int, padding: int, stride: int) -> int:
    """Blocks along one dimension: ``(size + 2*padding - dilation*(kernel - 1) - 1) // stride + 1`` (torch's docs)."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


# [n, c, *o] = col2im([n, c*prod(k), L], o, k, dilation, padding, stride)
@FLOPS.register("aten::col2im")
def col2im(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, c, *o] = col2im([n, c*prod(k), L], o, k, d, p, s): n * c * prod_j #{(i, l): 0 <= l*s_j - p_j + i*d_j < o_j}: 1 add per column value that lands inside the output (a value on padding is dropped); without padding every value lands: numel(input). The first value at a position counts too, as adaptive_avg_pool2d's sum counts every input (fvcore)."""
    op = "aten::col2im"
    x = shape_of(inputs[COL2IM_INPUT])
    out = first_tensor_out(outputs).shape[-2:]  # the output's size, also where output_size was a run-time value
    kernel, dilation, padding, stride = (
        _pairs(inputs, i, len(out), op) for i in (COL2IM_KERNEL, COL2IM_DILATION, COL2IM_PADDING, COL2IM_STRIDE)
    )
    per_dim = [blocks_along(*args) for args in zip(out, kernel, dilation, padding, stride, strict=True)]
    if len(x) not in (2, 3) or x[-1] != numel(per_dim) or x[-2] % numel(kernel):
        raise ValueError(f"{op}: input {x} is not [n, c*{numel(kernel)}, {numel(per_dim)}] for output {tuple(out)}")
    channels = numel(x[:-2]) * x[-2] // numel(kernel)  # n * c
    landed = [landing(*args) for args in zip(out, kernel, dilation, padding, stride, per_dim, strict=True)]
    return channels * numel(landed)


# [n, c*prod(k), L] = im2col([n, c, *i], k, dilation, padding, stride): a copy of each block into a column
FLOPS.zero_cost("aten::im2col", family="fold")
