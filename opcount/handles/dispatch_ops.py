"""Operators only the dispatch tracer records (docs/dispatch.md).

Below the Python API the dispatcher runs a few operators the jit tracer never shows: the
in-place detach of a ``torch.tensor`` constant, the scalar read behind ``if tensor:``, the
buffers autograd allocates for gradients. Most backward kernels are priced from the forward
operators they mirror (:mod:`.backward`); the embedding's weight gradient has no forward
counterpart and is priced here.

Its zero costs are fallbacks: they hold only for operators no other family prices or frees,
whichever is imported first.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, TensorSpec
from ._shapes import numel, shape_of
from .memory import Traffic, whole
from .registry import FLOPS, MEMORY

# Metadata and scalar reads: no element is computed or moved.
METADATA: tuple[str, ...] = tuple(
    "aten::" + op
    for op in [
        "detach_",
        "is_nonzero",
        "_local_scalar_dense",
        "item",
        "t_",
        "transpose_",
        "unsqueeze_",
        "squeeze_",
        "as_strided_",
        "resolve_conj",
        "resolve_neg",
        "_conj",
        "alias",
        "lift_fresh",
        "view_as_real",
        "view_as_complex",
        "_assert_async",
        "_assert_scalar",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "sym_constrain_range",
        "sym_constrain_range_for_size",
        "_has_compatible_shallow_copy_type",
        "is_same_size",
    ]
)

# Copies and allocations the dispatcher or autograd makes: elements moved, none computed.
COPIES: tuple[str, ...] = tuple(
    "aten::" + op
    for op in [
        "lift_fresh_copy",
        "new_empty_strided",
        "empty_permuted",
        "copy",
        "expand_copy",
        "view_copy",
        "permute_copy",
        "t_copy",
        "transpose_copy",
        "unsqueeze_copy",
        "squeeze_copy",
        "alias_copy",
        "slice_copy",
        "select_copy",
        "as_strided_copy",
        "_unsafe_view",
        "select_backward",
        "slice_backward",
        "diagonal_backward",
        "unfold_backward",
        "as_strided_scatter",
        "new_empty",
        "new_zeros",
        "new_ones",
        "zeros_like",
        "ones_like",
        "empty_like",
        "full_like",
    ]
)

FLOPS.zero_cost(*METADATA, *COPIES, family="dispatch_ops", fallback=True)
MEMORY.zero_cost(*METADATA, family="dispatch_ops", fallback=True)

# embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
EMB_GRAD, EMB_INDICES = 0, 1


@FLOPS.register("aten::embedding_dense_backward")
def embedding_dense_backward(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[num_weights, d] = embedding_dense_backward([*, d] grad, [*] indices): numel(grad) flops, one add of each looked-up row's gradient into the weight gradient (the forward lookup is free)."""
    return numel(shape_of(inputs[EMB_GRAD]))


@MEMORY.register("aten::embedding_dense_backward")  # type: ignore[arg-type]  # typed for counts
def embedding_dense_backward_traffic(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Reads the incoming gradient [*, d] and the indices once; writes the weight gradient [num_weights, d] once (zeros but for the looked-up rows, which accumulate in cache)."""
    return Traffic(whole(s for s in inputs[: EMB_INDICES + 1] if isinstance(s, TensorSpec)), whole(outputs))


@MEMORY.register(*(f"aten::{op}_backward" for op in ("select", "slice", "diagonal")))  # type: ignore[arg-type]
def view_backward_traffic(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """A view's gradient (``select_backward``, ...): reads the incoming gradient once; writes the input-sized gradient once (zeros around the viewed part)."""
    return Traffic(whole(inputs[:1]), whole(outputs))
