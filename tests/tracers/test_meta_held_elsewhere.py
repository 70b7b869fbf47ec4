"""A model on meta whose buffer the forward also reaches through another object (a KV cache that
holds the model's buffers, as opcount's LLM phases build it), traced on fake tensors: that
reference is the buffer's stand-in, on the device the trace claims, so operators mixing it with
tensors made inside the forward (indices on CPU) run, and its writes are the buffer's."""

from __future__ import annotations

import torch
from torch import nn

from opcount import FlopCountAnalysis


class Holder:
    """Not a module: what the tracer swaps on the model does not reach it."""

    def __init__(self, cache: torch.Tensor) -> None:
        self.cache = cache


class WritesThroughHolder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.register_buffer("cache", torch.empty(1, 16, 8), persistent=False)

    def forward(self, x: torch.Tensor, holder: Holder) -> torch.Tensor:
        y = self.proj(x)
        y.unsqueeze_(0)  # an in-place reshape: shape-only tensors refuse it, the trace runs on fake tensors
        positions = torch.arange(4)  # made inside the forward, on the claimed device
        holder.cache.index_copy_(1, positions, y)
        return holder.cache


def test_a_buffer_reached_through_another_object_is_its_stand_in() -> None:
    with torch.device("meta"):
        model = WritesThroughHolder()
    analysis = FlopCountAnalysis(model, (torch.empty(4, 8, device="meta"), Holder(model.cache)), tracer="dispatch")
    assert analysis.total() == 4 * 8 * 8  # the linear layer: 4 rows x 8 inputs x 8 outputs, one multiply-add each
    copies = [call for call in analysis.trace().calls if "index_copy" in call.kind]
    assert len(copies) == 1
    assert copies[0].inputs[0].param == "cache"  # the write is the buffer's, not an anonymous tensor's
