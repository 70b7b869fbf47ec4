"""torch's inference fast paths (taken in eval mode under no_grad) cost what the unfused operators
they replace cost (taken with grad): the same flops, and bytes from a formula, never a silent 0.

The reference is opcount's own pricing of the unfused operators (linear, sdpa, layer_norm, ...),
each checked against its closed form in its own tests; the closed forms below are worked by hand.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, MemoryTrafficAnalysis

B, L, E, H, F = 2, 10, 64, 4, 128
FLOAT = 4  # bytes


class SelfAttention(nn.Module):
    """What ViT's encoder block does: self-attention without the weights."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(E, H, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]


def _costs(model: nn.Module, x: torch.Tensor, grad: bool, tracer: str) -> tuple[float, float, dict[str, float]]:
    with torch.set_grad_enabled(grad):
        flops = FlopCountAnalysis(model, x, tracer=tracer).unsupported_ops_warnings(False)
        memory = MemoryTrafficAnalysis(model, x, tracer=tracer).unsupported_ops_warnings(False)
        flops.uncalled_modules_warnings(False)
        memory.uncalled_modules_warnings(False)
        assert not flops.unsupported_ops() and not memory.unsupported_ops()
        return flops.total(), memory.total(), dict(memory.by_operator())


def _encoder(activation: str, norm_first: bool) -> nn.Module:
    layer = nn.TransformerEncoderLayer(E, H, F, activation=activation, batch_first=True, norm_first=norm_first)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_multi_head_attention_fast_path_moves_what_the_unfused_path_moves(tracer: str) -> None:
    model, x = SelfAttention().eval(), torch.randn(B, L, E)
    flops, fused, ops = _costs(model, x, grad=False, tracer=tracer)
    assert set(ops) == {"_native_multi_head_attention"}
    unfused_flops, unfused, unfused_ops = _costs(model, x, grad=True, tracer=tracer)
    assert flops == unfused_flops
    # the unfused path's linear, contiguous (q, k, v into the heads' layout) and sdpa: what the fused
    # call does; it also scales a few 0-d scalars (div, mul), which the fused call does not
    layout = {"linear", "contiguous", "scaled_dot_product_attention"}
    assert fused == sum(v for op, v in unfused_ops.items() if op in layout)
    assert fused == pytest.approx(unfused, rel=1e-3)
    # by hand: weights 3E*E + 3E + E*E + E; x read once; q, k, v written, read, written, read (4 x 3BLE);
    # the attention output written and read (2 BLE); the output written (BLE)
    weights = 4 * E * E + 4 * E
    acts = B * L * E * (1 + 4 * 3 + 2 + 1)
    assert fused == FLOAT * (weights + acts)


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
@pytest.mark.parametrize(("activation", "norm_first"), [("relu", False), ("gelu", True)])
def test_transformer_encoder_fast_path_costs_what_the_unfused_layers_cost(
    tracer: str, activation: str, norm_first: bool
) -> None:
    model, x = _encoder(activation, norm_first), torch.randn(B, L, E)
    flops, fused, ops = _costs(model, x, grad=False, tracer=tracer)
    assert set(ops) == {"_transformer_encoder_layer_fwd"}
    unfused_flops, unfused, unfused_ops = _costs(model, x, grad=True, tracer=tracer)
    assert flops == unfused_flops
    scalars = sum(v for op, v in unfused_ops.items() if op in ("mul", "div"))  # 0-d scalar arithmetic
    assert fused == unfused - scalars
    # by hand, per layer: the attention block as above without the output write, then x read twice,
    # six [B, L, E] and two [B, L, F] intermediates read, five and two written, the output written
    weights = 4 * E * E + 4 * E + 4 * E + 2 * E * F + F + E
    acts = B * L * E * (4 * 3 + 2) + 2 * B * L * E + 11 * B * L * E + 4 * B * L * F + B * L * E
    assert fused == 2 * FLOAT * (weights + acts)


def test_a_vit_sized_down_prices_alike_with_and_without_grad() -> None:
    models = pytest.importorskip("torchvision.models")
    vit = models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128
    ).eval()
    x = torch.randn(1, 3, 32, 32)
    flops, fused, ops = _costs(vit, x, grad=False, tracer="jit")
    assert "_native_multi_head_attention" in ops
    unfused_flops, unfused, _ = _costs(vit, x, grad=True, tracer="jit")
    assert flops == unfused_flops
    assert fused == pytest.approx(unfused, rel=1e-3)
