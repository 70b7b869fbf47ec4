"""Embedding lookups: a gather of rows, no arithmetic (chainer-computational-cost: GetItem is 0 flops)."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, const, maybe_tensor, tensor
from .registry import FLOPS

FLOPS.zero_cost("aten::embedding", "aten::embedding_renorm_", family="embedding")

# embedding_bag(weight [V, D], indices, offsets, scale_grad_by_freq, mode, sparse,
#               per_sample_weights, include_last_offset, padding_idx) -> (out [B, D], ...)
BAG_WEIGHT, BAG_INDICES, BAG_MODE, BAG_PER_SAMPLE_WEIGHTS = 0, 1, 4, 6
BAG_MEAN = 1


@FLOPS.register("aten::embedding_bag", "aten::_embedding_bag")
def embedding_bag(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """numel(indices) * D: each gathered row is added (sum, mean) or compared (max) into its bag; + numel(out) divides for mean, + numel(indices) * D for per_sample_weights."""
    _, dim = tensor(inputs[BAG_WEIGHT]).shape
    n_indices = tensor(inputs[BAG_INDICES]).numel
    mode = const(inputs[BAG_MODE])
    weighted = len(inputs) > BAG_PER_SAMPLE_WEIGHTS and maybe_tensor(inputs[BAG_PER_SAMPLE_WEIGHTS]) is not None
    flops = n_indices * dim * (2 if weighted else 1)
    if mode == BAG_MEAN:
        flops += tensor(outputs[0]).numel
    return flops
