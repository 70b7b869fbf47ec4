"""Backward kernels recorded as themselves (dispatch tracer, mode="train") and priced by the
handles of opcount.handles.backward; every expected number is worked by hand below."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount import ActivationCountAnalysis, FlopCountAnalysis, MemoryTrafficAnalysis, TensorShape, spec_handle
from opcount.handles import ACTIVATIONS, FLOPS, MEMORY
from opcount.handles.registry import Handle, Registry
from tests.fixtures.optional import torchvision

transformers = pytest.importorskip("transformers")

TRAIN = {"tracer": "dispatch", "mode": "train"}


def _kinds(analysis: FlopCountAnalysis) -> list[str]:
    return [call.kind for call, _ in analysis.per_call()]


# ----- convolution_backward: one forward conv per gradient computed, plus the bias sum -------------
# Conv2d(3, 8, 3, padding=1) on [2, 3, 16, 16]: out [2, 8, 16, 16], 2 * 256 = 512 positions per
# channel. Forward X = 2 * (8*3*3*3) * 16*16 = 110592 multiply-adds. Bias gradient: the output
# gradient (4096 elements) summed to 8 values, 4096 - 8 = 4088 adds.
X, BIAS_SUM = 110592, 4088


def _conv(bias: bool = True) -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=bias))


def test_conv_backward_is_recorded_as_itself() -> None:
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    train = FlopCountAnalysis(_conv(), x, **TRAIN)
    assert _kinds(train).count("aten::convolution_backward") == 1
    assert "aten::_convolution" in _kinds(train) and _kinds(train).count("aten::_convolution") == 1


def test_conv_backward_with_input_gradient_and_bias() -> None:
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    train = FlopCountAnalysis(_conv(), x, **TRAIN)
    # d_input and d_weight, 2X multiply-adds, plus the bias sum; the default loss sums the output
    assert train.by_operator()["convolution_backward"] == 2 * X + BIAS_SUM
    assert train.by_operator()["conv"] == X
    macs = FlopCountAnalysis(_conv(), x, preset="macs", **TRAIN)
    assert macs.by_operator() == {"conv": X, "convolution_backward": 2 * X}
    two = FlopCountAnalysis(_conv(), x, flops_per_mac=2, **TRAIN)
    assert two.by_operator()["convolution_backward"] == 2 * 2 * X + BIAS_SUM
    # fvcore counts convolutions' multiply-adds, not sums
    fvcore = FlopCountAnalysis(_conv(), x, preset="fvcore", **TRAIN)
    assert fvcore.by_operator()["convolution_backward"] == 2 * X


def test_conv_backward_without_input_gradient_or_bias() -> None:
    x = torch.randn(2, 3, 16, 16)  # a leaf without grad: only d_weight
    train = FlopCountAnalysis(_conv(bias=False), x, **TRAIN)
    assert train.by_operator()["convolution_backward"] == X
    with_bias = FlopCountAnalysis(_conv(), x, **TRAIN)
    assert with_bias.by_operator()["convolution_backward"] == X + BIAS_SUM


def test_conv_backward_bytes_and_activations() -> None:
    # float32; x 2*3*16*16*4 = 6144 B, w 8*3*3*3*4 = 864 B, the incoming gradient 2*8*16*16*4 =
    # 16384 B, d_bias 8*4 = 32 B. d_input reads the gradient and w, writes x's size; d_weight
    # reads the gradient and x, writes w's size; d_bias reads the gradient, writes 8 values.
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    memory = MemoryTrafficAnalysis(_conv(), x, **TRAIN)
    d_input = (16384 + 864) + 6144
    d_weight = (16384 + 6144) + 864
    d_bias = 16384 + 32
    assert memory.by_operator()["convolution_backward"] == d_input + d_weight + d_bias
    # without an input gradient: d_weight and d_bias only
    frozen = MemoryTrafficAnalysis(_conv(), x.detach(), **TRAIN)
    assert frozen.by_operator()["convolution_backward"] == d_weight + d_bias
    # activations: the output elements of each forward-sized convolution, 2 * 4096
    activations = ActivationCountAnalysis(_conv(), x, **TRAIN)
    assert activations.by_operator()["convolution_backward"] == 2 * 4096


# ----- fused kernels: two of the forward ------------------------------------------------------------
def test_relu_backward() -> None:
    # relu on [4, 6] is 24 flops (one compare per element); threshold_backward is two relus.
    model, x = nn.Sequential(nn.Linear(6, 6, bias=False), nn.ReLU()), torch.randn(4, 6)
    train = FlopCountAnalysis(model, x, **TRAIN)
    assert train.by_operator("1") == {"relu": 24, "threshold_backward": 2 * 24}
    # two relus' bytes: each reads 24 floats and writes 24 (96 + 96 B)
    assert MemoryTrafficAnalysis(model, x, **TRAIN).by_operator("1")["threshold_backward"] == 2 * (96 + 96)
    # fvcore ignores relu, and so its backward: free, not unsupported
    fvcore = FlopCountAnalysis(model, x, preset="fvcore", **TRAIN)
    assert "aten::threshold_backward" not in fvcore.unsupported_ops()
    activations = ActivationCountAnalysis(model, x, **TRAIN)
    assert "aten::threshold_backward" not in activations.unsupported_ops()
    assert activations.by_operator("1") == {}


def test_batch_norm_backward() -> None:
    # training batch norm on [4, 6], affine: numel * 5 = 120; its backward is two of them.
    model, x = nn.Sequential(nn.BatchNorm1d(6)), torch.randn(4, 6, requires_grad=True)
    train = FlopCountAnalysis(model, x, **TRAIN)
    assert train.by_operator("0") == {"batch_norm": 120, "native_batch_norm_backward": 240}
    fvcore = FlopCountAnalysis(model, x, preset="fvcore", **TRAIN)  # batch norm is in fvcore's set
    assert fvcore.by_operator("0") == {"batch_norm": 120, "native_batch_norm_backward": 240}


class Softmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1)


def test_softmax_backward() -> None:
    # softmax over the last axis of [2, 8, 10]: numel 160, c = 10, s = 16 rows:
    # 2 * 160 + 16 * (10 - 1) = 464 (exp and divide per element, 9 adds per row).
    x = torch.randn(2, 8, 10, requires_grad=True)
    train = FlopCountAnalysis(Softmax(), x, **TRAIN)
    assert train.by_operator()["softmax"] == 464
    assert train.by_operator()["_softmax_backward_data"] == 2 * 464


class FlashAttention(nn.Module):
    def __init__(self, is_causal: bool = False) -> None:
        super().__init__()
        self.is_causal = is_causal

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        return attention(q, k, v, is_causal=self.is_causal)[0]


def _qkv() -> tuple[torch.Tensor, ...]:
    # b = 1, h = 2 heads, L = S = 4, E = Ev = 8
    return tuple(torch.randn(1, 2, 4, 8, requires_grad=True) for _ in range(3))


def test_attention_backward() -> None:
    # forward: b*h*L*S*(E + Ev) = 2*16*16 = 512 multiply-adds, softmax b*h*(3*L*S - L) = 2*44 = 88
    # flops. The backward kernel is two forwards: 1024 multiply-adds and 176 flops.
    train = FlopCountAnalysis(FlashAttention(), _qkv(), **TRAIN)
    backward = "_scaled_dot_product_flash_attention_for_cpu_backward"
    assert train.by_operator()[backward] == 1024 + 176
    assert FlopCountAnalysis(FlashAttention(), _qkv(), preset="macs", **TRAIN).by_operator()[backward] == 1024


def test_causal_attention_backward_unmasked() -> None:
    # is_causal with L = S = 4 keeps 4*5/2 = 10 pairs: 2*10*16 = 320 multiply-adds and
    # 2*(3*10 - 4) = 52 softmax flops per forward-sized pass; the backward is two.
    model, qkv = FlashAttention(is_causal=True), _qkv()
    backward = "_scaled_dot_product_flash_attention_for_cpu_backward"
    full = FlopCountAnalysis(model, qkv, **TRAIN)
    assert full.by_operator()[backward] == 1024 + 176  # "full": the whole L x S product
    unmasked = FlopCountAnalysis(model, qkv, causal_attention="unmasked", **TRAIN)
    assert unmasked.by_operator()[backward] == 2 * (320 + 52)
    macs = FlopCountAnalysis(model, qkv, causal_attention="unmasked", preset="macs", **TRAIN)
    assert macs.by_operator()[backward] == 2 * 320


# ----- overriding -----------------------------------------------------------------------------------
def test_set_op_handle_prices_the_backward_kernel_itself() -> None:
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    train = FlopCountAnalysis(_conv(), x, **TRAIN)
    train.set_op_handle("aten::convolution_backward", spec_handle(lambda inputs, outputs: 7))
    assert train.by_operator()["convolution_backward"] == 7
    assert train.by_operator()["conv"] == X
    # overriding the forward operator leaves its backward kernel's price alone
    forward_only = FlopCountAnalysis(_conv(), x, **TRAIN)
    forward_only.set_op_handle("aten::_convolution", spec_handle(lambda inputs, outputs: 1, name="conv"))
    assert forward_only.by_operator()["conv"] == 1
    assert forward_only.by_operator()["convolution_backward"] == 2 * X + BIAS_SUM
    ignored = FlopCountAnalysis(_conv(), x, **TRAIN).set_op_handle("aten::convolution_backward", None)
    assert "convolution_backward" not in ignored.by_operator()


# ----- real models: every backward kernel is priced or free -------------------------------------------
def _backward_kinds(analysis: FlopCountAnalysis) -> set[str]:
    return {k for k in _kinds(analysis) if k.endswith("_backward") or "_backward_" in k}


@pytest.mark.skipif(torchvision is None, reason="needs torchvision")
def test_resnet18_backward_kernels_all_supported() -> None:
    model = torchvision.models.resnet18(weights=None)
    train = FlopCountAnalysis(model, TensorShape((2, 3, 64, 64)), device="meta", **TRAIN)
    kinds = _backward_kinds(train)
    assert {"aten::convolution_backward", "aten::native_batch_norm_backward", "aten::threshold_backward"} <= kinds
    assert "aten::max_pool2d_with_indices_backward" in kinds
    assert all(k in FLOPS for k in kinds), sorted(k for k in kinds if k not in FLOPS)
    assert not [op for op in train.unsupported_ops() if "backward" in op]


def test_gpt2_backward_kernels_all_supported() -> None:
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    train = FlopCountAnalysis(model, (TensorShape((1, 16), torch.long),), device="meta", **TRAIN)
    kinds = _backward_kinds(train)
    assert {"aten::native_layer_norm_backward", "aten::tanh_backward", "aten::embedding_dense_backward"} <= kinds
    assert all(k in FLOPS for k in kinds), sorted(k for k in kinds if k not in FLOPS)
    assert not [op for op in train.unsupported_ops() if "backward" in op]


# ----- the registries: each kernel is priced, free or unsupported as its forward is ---------------
def test_a_mirror_follows_its_forward_in_each_registry() -> None:
    # conv: priced in all three; relu: free for activations (fvcore ignores it)
    assert all("aten::convolution_backward" in r.handles for r in (FLOPS, ACTIVATIONS, MEMORY))
    assert "aten::threshold_backward" in FLOPS.handles and "aten::threshold_backward" in ACTIVATIONS.zero
    assert FLOPS.handles["aten::convolution_backward"].macs and FLOPS.handles["aten::convolution_backward"].fvcore
    assert not FLOPS.handles["aten::threshold_backward"].fvcore


def test_registry_mirror_is_resolved_when_read() -> None:
    registry = Registry("test")
    made = Handle(lambda inputs, outputs: 2, ops=("x::f_backward",))
    registry.mirror("x::f_backward", "x::f", lambda handles: made, family="backward")
    registry.mirror("x::g_backward", "x::g", lambda handles: made, family="backward")
    assert "x::f_backward" not in registry  # the forward is unsupported, so is the mirror
    registry.register("x::f")(lambda inputs, outputs: 1)  # declared after the mirror
    registry.zero_cost("x::g")
    assert registry.handles["x::f_backward"] is made
    assert registry.zero_families()["x::g_backward"] == "backward"
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("x::f_backward")(lambda inputs, outputs: 1)
