"""The roofline and the sparsity roofline of a training step (dispatch tracer, mode="train").

Expected numbers are worked by hand: AMAIX's MAC-array utilisation ceil(c/Tc) ceil(k/Tk) Tc Tk / (c k)
applied to each gradient product of ``convolution_backward``, and the Sparsity Roofline paper's
stored values x N x 2 flops and format bytes for a sparse weight's input-gradient product.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from opcount import roofline, sparsity_roofline
from opcount.roofline import LayerTime, RooflineReport, nvdla_scale_ops
from opcount.roofline.model import conv_backward_channels
from opcount.sparsity import SparseLayer, SparsityReport

TRAIN = {"tracer": "dispatch", "mode": "train", "device": "meta"}


def _util(c: int, k: int, tc: int = 64, tk: int = 16) -> float:
    return math.ceil(c / tc) * math.ceil(k / tk) * tc * tk / (c * k)


def _layers(report: RooflineReport, kind: str) -> list[LayerTime]:
    """The layers of ``kind``'s calls (a convolution_backward's products, not its bias sum)."""
    return [
        t
        for t in report.layers
        if t.layer.call is not None and t.layer.call.kind == kind and not t.layer.name.endswith(".bias")
    ]


# ----- 1. the MAC-array scale of convolution_backward --------------------------------------------
def test_nvdla_scale_of_convolution_backward_weighs_its_gradient_products() -> None:
    # LeNet's convolutions, batch 1: 28x28x1 -> 24x24x20 -> 20x20x50.
    model = nn.Sequential(nn.Conv2d(1, 20, 5), nn.Conv2d(20, 50, 5))
    x = torch.randn(1, 1, 28, 28)
    plain = roofline(model, x, "nvdla-full", dtype="float16", **TRAIN)
    scaled = roofline(model, x, "nvdla-full", dtype="float16", scale_ops=nvdla_scale_ops(), **TRAIN)
    (second, first), (second_s, first_s) = (
        _layers(plain, "aten::convolution_backward"),
        _layers(scaled, "aten::convolution_backward"),
    )
    # conv2: d_input is a convolution 50 -> 20 channels (c = 50, k = 20): 1 * 2 * 1024 / 1000;
    # d_weight reduces over batch x output positions, c = 1 * 20 * 20 = 400, k = 50 kernels:
    # 7 * 4 * 1024 / 20000; both do 20*20*50*20*25 multiply-adds, so the scale is their mean.
    assert conv_backward_channels(second.layer.call) == [(50, 20), (400, 50)]
    conv2 = (1 * 2 * 1024 / 1000 + 7 * 4 * 1024 / 20000) / 2
    assert conv2 == pytest.approx(1.7408)
    assert second_s.layer.flops == pytest.approx(second.layer.flops * conv2)
    # conv1: the input needs no gradient, so only d_weight: c = 24 * 24 = 576, k = 20: 9 * 2 * 1024 / 11520.
    assert conv_backward_channels(first.layer.call) == [(576, 20)]
    assert first_s.layer.flops == pytest.approx(first.layer.flops * 1.6)
    assert first_s.layer.bytes == first.layer.bytes


def test_nvdla_scale_of_grouped_and_transposed_convolution_backward() -> None:
    model = nn.Sequential(
        nn.Conv2d(4, 8, 1),
        nn.Conv2d(8, 12, 3, groups=4),  # w [12, 2, 3, 3]
        nn.ConvTranspose2d(12, 6, 3, groups=3),  # w [12, 2, 3, 3]
    )
    x = torch.randn(2, 4, 7, 7)  # -> [2, 8, 7, 7] -> [2, 12, 5, 5] -> [2, 6, 7, 7]
    scaled = roofline(model, x, "nvdla-full", dtype="float16", scale_ops=nvdla_scale_ops(), **TRAIN)
    plain = roofline(model, x, "nvdla-full", dtype="float16", **TRAIN)
    t_conv, g_conv, _ = _layers(plain, "aten::convolution_backward")
    t_scaled, g_scaled, _ = _layers(scaled, "aten::convolution_backward")
    # Grouped: d_input maps 12 channels onto 8 in 4 groups (c = 12 / 4 = 3, k = 8); d_weight
    # reduces over 2 x 5 x 5 = 50 positions for k = 12 kernels.
    assert conv_backward_channels(g_conv.layer.call) == [(3, 8), (50, 12)]
    assert g_scaled.layer.flops == pytest.approx(g_conv.layer.flops * (_util(3, 8) + _util(50, 12)) / 2)
    # Transposed (w [C = 12, K/g = 2, 3, 3]): d_input is an ordinary convolution with that weight,
    # 6 -> 12 channels, c = 2, k = 12; d_weight reduces over its input's 2 x 5 x 5 positions, k = 12.
    assert conv_backward_channels(t_conv.layer.call) == [(2, 12), (50, 12)]
    assert t_scaled.layer.flops == pytest.approx(t_conv.layer.flops * (_util(2, 12) + _util(50, 12)) / 2)


# ----- 3. the bias gradient of convolution_backward: a sum on the vector unit ---------------------
def test_convolution_backward_bias_gradient_is_a_vector_layer_of_its_own() -> None:
    model = nn.Sequential(nn.Conv2d(4, 8, 3), nn.Conv2d(8, 6, 3))
    x = torch.randn(2, 4, 7, 7)  # -> [2, 8, 5, 5] -> [2, 6, 3, 3]
    report = roofline(model, x, "h100-sxm", dtype="float16", scale_ops=nvdla_scale_ops(), **TRAIN)
    calls = [t for t in report.layers if t.layer.call is not None and t.layer.call.kind == "aten::convolution_backward"]
    # conv2 (d_input, d_weight, d_bias), then conv1 (d_weight, d_bias): products and bias sum each.
    assert [t.layer.name for t in calls][1::2] == [calls[0].layer.name + ".bias", calls[2].layer.name + ".bias"]
    products, bias = calls[:2]
    # Products: two convolutions of 2 * 6 * 8 * 9 * 9 = 7776 multiply-adds, on the tensor unit,
    # scaled by the MAC array's utilisation: d_input c = 6, k = 8; d_weight c = 2 * 3 * 3 = 18, k = 6.
    util = (_util(6, 8) + _util(18, 6)) / 2
    assert (products.layer.unit, products.layer.flops) == ("tensor", pytest.approx(2 * 2 * 7776 * util))
    # The bias sum: 2 * 6 * 3 * 3 = 108 gradient values summed into 6, 102 adds, not scaled; it reads
    # the gradient (108 * 2 B in float16) and writes d_bias (6 * 2 B).
    assert (bias.layer.unit, bias.layer.flops) == ("vector", 102)
    assert (bias.layer.ifmap_bytes, bias.layer.weight_bytes, bias.layer.ofmap_bytes) == (216, 0, 12)
    assert bias.peak == report.hardware.peak_of("vector", "float16")
    assert report.total_time == pytest.approx(sum(t.time for t in report.layers))


# ----- 2. the sparsity roofline of a training step ------------------------------------------------
def _weight_rows(report: SparsityReport, kind: str) -> list[SparseLayer]:
    return [w for w in report.weights if w.dense.layer.call is not None and w.dense.layer.call.kind == kind]


def test_sparse_linear_weight_speeds_up_its_input_gradient_not_its_weight_gradient() -> None:
    model = nn.Sequential(nn.Linear(64, 128, bias=False), nn.ReLU(), nn.Linear(128, 32, bias=False))
    x = torch.randn(16, 64)
    report = sparsity_roofline(model, (x,), "h100-sxm", "2:4", dtype="float16", **TRAIN)
    # Forward: both linears. Backward: d_x of the second (grad [16, 32] @ W [32, 128]); the first
    # layer's input needs no gradient; both d_W = grad^T @ x read no weight and stay dense.
    (bw,) = _weight_rows(report, "aten::mm")
    assert (bw.weight, bw.rows, bw.cols, bw.n, bw.format.name) == ("2.weight", 32, 128, 16, "2:4")
    assert len(report.weights) == 3
    dense, sparse = bw.dense.layer, bw.sparse.layer
    macs = 16 * 32 * 128
    assert dense.flops == 2 * macs
    assert sparse.flops == 2 * macs / 2  # 2 values kept in 4 (the paper, eq. 1)
    # Bytes, float16: grad 16 * 32 * 2 = 1024 and W 32 * 128 * 2 = 8192 read (W as a saved
    # activation: ifmap); 2:4 stores 2048 values (4096 B) and 2 bits each (512 B).
    assert dense.ifmap_bytes == 1024 + 8192
    assert sparse.ifmap_bytes == 1024 + 4096 + 512
    assert (sparse.ofmap_bytes, sparse.unit) == (dense.ofmap_bytes, "tensor")
    # Every other layer, the weight gradients among them, keeps its dense cost.
    products = {id(w.dense.layer.call) for w in report.weights}
    rest = [
        (d, s)
        for d, s in zip(report.dense.layers, report.sparse.layers, strict=True)
        if id(d.layer.call) not in products
    ]
    assert sum(d.layer.call.kind == "aten::mm" for d, _ in rest) == 2
    assert all(s.layer == d.layer for d, s in rest)


def test_sparse_conv_weight_speeds_up_the_input_gradient_part_of_convolution_backward() -> None:
    model = nn.Sequential(nn.Conv2d(8, 16, 3, bias=False), nn.ReLU(), nn.Conv2d(16, 32, 3, bias=False))
    x = torch.randn(2, 8, 10, 10)  # -> [2, 16, 8, 8] -> [2, 32, 6, 6]
    report = sparsity_roofline(model, (x,), "h100-sxm", "2:4", dtype="float16", **TRAIN)
    (bw,) = _weight_rows(report, "aten::convolution_backward")  # conv1 computes no d_input
    # d_input of conv2: the forward's GEMM W[32, 16 * 9] over N = 2 * 6 * 6 positions.
    assert (bw.weight, bw.rows, bw.cols, bw.n) == ("2.weight", 32, 144, 72)
    macs = 32 * 144 * 72
    dense, sparse = bw.dense.layer, bw.sparse.layer
    assert dense.flops == 2 * (2 * macs)  # d_input and d_weight, one forward convolution each
    assert sparse.flops == 2 * macs + 2 * macs / 2  # d_weight dense, d_input 2:4
    # Only d_input reads the weight (d_weight reads the gradient and the input, docs/memory.md):
    # 32 * 144 values, 9216 B dense; 2:4 keeps 2304 values (4608 B) with 2 bits each (576 B).
    assert dense.weight_bytes == 32 * 144 * 2
    assert sparse.weight_bytes == 4608 + 576
    assert sparse.unit == dense.unit == "tensor"


def test_unstructured_weight_leaves_convolution_backward_dense_but_not_linear_input_gradient() -> None:
    # CSR runs on the vector unit; convolution_backward is one kernel whose dense weight gradient
    # needs the tensor unit, so its input-gradient part keeps the dense weight. A linear's d_x is
    # an mm of its own and runs as CSR.
    model = nn.Sequential(nn.Conv2d(4, 8, 3, bias=False), nn.Conv2d(8, 8, 3), nn.Flatten(), nn.Linear(8, 4))
    x = torch.randn(2, 4, 5, 5)  # -> [2, 8, 3, 3] -> [2, 8, 1, 1] -> [2, 8] -> [2, 4]
    report = sparsity_roofline(model, (x,), "h100-sxm", "unstructured=0.5", dtype="float16", **TRAIN)
    (conv,) = _weight_rows(report, "aten::convolution_backward")
    assert conv.sparse.layer == conv.dense.layer
    (mm,) = _weight_rows(report, "aten::mm")
    assert (mm.weight, mm.format.name, mm.sparse.layer.unit) == ("3.weight", "csr", "vector")
    assert mm.sparse.layer.flops == 2 * 2 * 16  # 16 of the 32 values, N = 2


def test_backward_products_do_not_count_a_weight_twice_in_the_level() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
    x = torch.randn(4, 8)
    report = sparsity_roofline(model, (x,), "h100-sxm", "2:4", dtype="float16", **TRAIN)
    assert report.level == pytest.approx(0.5)


# ----- 4. a whole training step, end to end ------------------------------------------------------
def _assert_whole(report: RooflineReport) -> None:
    assert {t.layer.unit for t in report.layers} <= set(report.hardware.units)
    assert all(t.compute_time > 0 and t.time > 0 for t in report.layers if t.layer.flops > 0)
    assert report.total_time == pytest.approx(sum(t.time for t in report.layers))
    assert report.total_time == pytest.approx(sum(row.time for row in report.by_operator().values()))
    for kind in ("aten::convolution_backward", "aten::mm", "aten::bmm"):
        assert all(t.layer.unit == "tensor" for t in _layers(report, kind))


def test_resnet18_training_step_roofline_is_whole() -> None:
    from tests.fixtures.optional import torchvision

    model = torchvision.models.resnet18(weights=None)
    report = roofline(model, torch.randn(2, 3, 64, 64), "h100-sxm", dtype="float16", **TRAIN)
    _assert_whole(report)
    assert not report.unsupported
    assert len(_layers(report, "aten::convolution_backward")) == 20  # every convolution, downsamples included


def test_gpt2_training_step_roofline_is_whole() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=32, vocab_size=100)
    model = transformers.GPT2LMHeadModel(config)
    report = roofline(model, (torch.randint(0, 100, (2, 16)),), "h100-sxm", dtype="float16", **TRAIN)
    _assert_whole(report)
    # Input gradients of the attention and MLP projections (Conv1D: addmm with W [in, out]) and the
    # tied lm_head: 2 blocks x 4 projections + 1, besides as many weight gradients.
    sparse = sparsity_roofline(model, (torch.randint(0, 100, (2, 16)),), "h100-sxm", "2:4", dtype="float16", **TRAIN)
    assert len(_weight_rows(sparse, "aten::mm")) == 9
    assert sparse.level == pytest.approx(0.5)  # each weight once, though read by two products
