"""Pooling."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, const
from ._shapes import first_tensor_out, numel, shape_of
from .registry import FLOPS, SpecFn


@FLOPS.register("aten::adaptive_avg_pool2d", fvcore=True)
def adaptive_avg_pool(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """1 per input element: every input is added once into its window's sum (fvcore)."""
    return numel(shape_of(inputs[0]))


# --- the rest of pooling ---------------------------------------------------------------
# max_pool{1,2,3}d(self, kernel_size, stride, padding, dilation, ceil_mode)
# max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
# avg_pool{1,2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad[, divisor_override])
POOL_INPUT, POOL_KERNEL = 0, 1


def _window(inputs: Sequence[Spec], spatial_rank: int, op: str) -> int:
    """Elements per pooling window, ``prod(kernel_size)``; a one-element size is used for every spatial dim."""
    kernel = const(inputs[POOL_KERNEL])
    if isinstance(kernel, int):
        kernel = (kernel,)
    if not isinstance(kernel, tuple) or not all(isinstance(k, int) for k in kernel):
        raise ValueError(f"{op}: argument {POOL_KERNEL} is not a kernel size: {kernel!r}")
    if len(kernel) == 1:
        kernel = kernel * spatial_rank
    if len(kernel) != spatial_rank:
        raise ValueError(f"{op}: kernel {kernel} does not fit {spatial_rank} spatial dims")
    return numel(kernel)


def _pool(inputs: Sequence[Spec], outputs: Sequence[Spec], spatial_rank: int, op: str) -> tuple[int, int]:
    out = first_tensor_out(outputs)
    return out.numel, _window(inputs, spatial_rank, op)


def _max_pool(spatial_rank: int, op: str) -> SpecFn:
    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
        n_out, window = _pool(inputs, outputs, spatial_rank, op)
        return n_out * (window - 1)

    handle.__doc__ = f"[n, c, *o] = {op}([n, c, *i], k): numel(out) * (prod(k) - 1): a max over each window (chainer-computational-cost MaxPooling2D)."
    return handle


def _avg_pool(spatial_rank: int, op: str) -> SpecFn:
    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
        n_out, window = _pool(inputs, outputs, spatial_rank, op)
        return n_out * window

    handle.__doc__ = f"[n, c, *o] = {op}([n, c, *i], k): numel(out) * prod(k): sum (prod(k) - 1) and divide (1) per window (chainer-computational-cost AveragePooling2D)."
    return handle


for _rank in (1, 2, 3):
    FLOPS.register(f"aten::max_pool{_rank}d")(_max_pool(_rank, f"max_pool{_rank}d"))
    FLOPS.register(f"aten::avg_pool{_rank}d")(_avg_pool(_rank, f"avg_pool{_rank}d"))
for _rank in (2, 3):
    FLOPS.register(f"aten::max_pool{_rank}d_with_indices")(_max_pool(_rank, f"max_pool{_rank}d_with_indices"))
FLOPS.register("aten::max_pool1d_with_indices")(_max_pool(1, "max_pool1d_with_indices"))


# [n, c, *o] = adaptive_avg_pool{1,3}d([n, c, *i], output_size)
@FLOPS.register(
    "aten::adaptive_avg_pool1d", "aten::adaptive_avg_pool3d", "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool3d"
)
def adaptive_avg_pool_nd(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """1 per input element, as fvcore's adaptive_avg_pool2d: each input is added once into its window's sum."""
    return numel(shape_of(inputs[POOL_INPUT]))


# ([n, c, *o], indices) = adaptive_max_pool{1,2,3}d([n, c, *i], output_size)
@FLOPS.register("aten::adaptive_max_pool1d", "aten::adaptive_max_pool2d", "aten::adaptive_max_pool3d")
def adaptive_max_pool(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """numel(in) - numel(out): (window - 1) maxes per output with windows tiling the input (chainer-computational-cost Max; the adaptive_avg convention of one op per input, less one per window)."""
    return max(numel(shape_of(inputs[POOL_INPUT])) - first_tensor_out(outputs).numel, 0)
