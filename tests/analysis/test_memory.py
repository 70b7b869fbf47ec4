"""MemoryTrafficAnalysis: single operators worked by hand, the options, the query surface.

Every expected number is a closed form written here from the conventions in opcount/memory.py
(bytes per element x elements), never a value computed by the code under test.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from opcount import (
    FlopCountAnalysis,
    MemoryTrafficAnalysis,
    arithmetic_intensity,
    module_intensity,
    roofline,
    spec_handle,
    trace,
)
from opcount.handles.memory import elementwise, resize_bilinear
from opcount.ir import TensorSpec
from tests.fixtures.zoo8 import ZOO8, zoo_model


def traffic(model: nn.Module, *inputs: torch.Tensor, **options: bool) -> MemoryTrafficAnalysis:
    analysis = MemoryTrafficAnalysis(model.eval(), inputs, **options)
    return analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)


def rw(analysis: MemoryTrafficAnalysis, op: str) -> tuple[float, float]:
    return analysis.by_operator(kind="read")[op], analysis.by_operator(kind="write")[op]


class Fn(nn.Module):
    def __init__(self, fn) -> None:  # type: ignore[no-untyped-def]
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


# ----- single operators, float32 -----------------------------------------------------------------
def test_conv2d_reads_input_weight_bias_and_writes_output() -> None:
    a = traffic(nn.Conv2d(3, 16, 3, padding=1), torch.randn(1, 3, 32, 32))
    assert rw(a, "conv") == (4 * (1 * 3 * 32 * 32 + 16 * 3 * 3 * 3 + 16), 4 * (1 * 16 * 32 * 32))
    assert a.total() == 4 * (1 * 3 * 32 * 32 + 16 * 3 * 3 * 3 + 16) + 4 * (16 * 32 * 32)


def test_conv2d_without_bias_and_grouped() -> None:
    a = traffic(nn.Conv2d(8, 8, 3, groups=4, bias=False), torch.randn(2, 8, 10, 10))
    assert rw(a, "conv") == (4 * (2 * 8 * 10 * 10 + 8 * 2 * 3 * 3), 4 * (2 * 8 * 8 * 8))


def test_linear() -> None:
    a = traffic(nn.Linear(64, 10), torch.randn(8, 64))
    assert rw(a, "linear") == (4 * (8 * 64 + 10 * 64 + 10), 4 * (8 * 10))


def test_elementwise_add_with_broadcasting_reads_each_operand_at_its_own_size() -> None:
    a = traffic(Fn(torch.add), torch.randn(2, 3, 4, 5), torch.randn(3, 1, 5))
    assert rw(a, "add") == (4 * (2 * 3 * 4 * 5 + 3 * 1 * 5), 4 * (2 * 3 * 4 * 5))


def test_relu_and_inplace_relu_move_the_same_bytes() -> None:
    n = 2 * 8 * 6 * 6
    assert rw(traffic(nn.ReLU(), torch.randn(2, 8, 6, 6)), "relu") == (4 * n, 4 * n)
    assert rw(traffic(nn.ReLU(inplace=True), torch.randn(2, 8, 6, 6)), "relu_") == (4 * n, 4 * n)


def test_views_move_nothing() -> None:
    def views(x: torch.Tensor) -> torch.Tensor:
        y = x.reshape(6, 20).view(2, 3, 20).transpose(1, 2).permute(2, 0, 1).unsqueeze(0)
        return y.expand(4, 3, 2, 20).flatten(2)[:, 1:, 5:]

    a = traffic(Fn(views), torch.randn(2, 3, 4, 5))
    assert a.total() == 0
    assert not a.unsupported_ops()


def test_cat_reads_and_writes_the_output_size() -> None:
    a = traffic(Fn(lambda x, y: torch.cat([x, y], dim=1)), torch.randn(2, 3, 4), torch.randn(2, 5, 4))
    assert rw(a, "cat") == (4 * 2 * 8 * 4, 4 * 2 * 8 * 4)


def test_bilinear_upscale_reads_the_input_once() -> None:
    up = Fn(lambda x: F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False))
    a = traffic(up, torch.randn(1, 2, 8, 8))
    # min(input, 4 x output) = min(128, 8192) = the input's 128 elements
    assert rw(a, "upsample_bilinear2d") == (4 * 1 * 2 * 8 * 8, 4 * 1 * 2 * 32 * 32)


def test_bilinear_downscale_reads_four_taps_per_output() -> None:
    down = Fn(lambda x: F.interpolate(x, size=(8, 8), mode="bilinear", align_corners=False))
    a = traffic(down, torch.randn(1, 2, 32, 32))
    # min(2048, 4 x 128) = 512 elements
    assert rw(a, "upsample_bilinear2d") == (4 * 4 * (1 * 2 * 8 * 8), 4 * 1 * 2 * 8 * 8)


def test_batch_norm_eval_reads_a_folded_scale_and_shift() -> None:
    a = traffic(nn.BatchNorm2d(16), torch.randn(2, 16, 8, 8))
    n = 2 * 16 * 8 * 8
    assert rw(a, "batch_norm") == (4 * (n + 2 * 16), 4 * n)


def test_batch_norm_without_affine_still_reads_two_values_per_channel() -> None:
    a = traffic(nn.BatchNorm2d(16, affine=False), torch.randn(2, 16, 8, 8))
    n = 2 * 16 * 8 * 8
    assert rw(a, "batch_norm") == (4 * (n + 2 * 16), 4 * n)


def test_batch_norm_training_reads_parameters_and_statistics() -> None:
    bn = nn.BatchNorm2d(16).train()
    a = MemoryTrafficAnalysis(bn, torch.randn(2, 16, 8, 8))
    n = 2 * 16 * 8 * 8
    # x, weight, bias, running mean and var read; output and updated statistics written
    assert rw(a, "batch_norm") == (4 * (n + 4 * 16), 4 * (n + 2 * 16))


def test_index_reads_only_what_it_copies_plus_indices() -> None:
    idx = torch.tensor([0, 2, 2, 5])
    a = traffic(Fn(lambda x: x[idx]), torch.randn(10, 7))
    assert rw(a, "index") == (4 * 4 * 7 + 8 * 4, 4 * 4 * 7)


def test_embedding_reads_the_rows_it_looks_up() -> None:
    a = traffic(nn.Embedding(1000, 16), torch.tensor([[1, 2, 3]]))
    assert rw(a, "embedding") == (4 * 3 * 16 + 8 * 3, 4 * 3 * 16)


# ----- dtypes --------------------------------------------------------------------------------
@pytest.mark.parametrize(("dtype", "size"), [(torch.float32, 4), (torch.float16, 2), (torch.bfloat16, 2)])
def test_float_dtypes_scale_conv_linear_and_batch_norm(dtype: torch.dtype, size: int) -> None:
    conv = traffic(nn.Conv2d(3, 16, 3, padding=1).to(dtype), torch.randn(1, 3, 32, 32, dtype=dtype))
    assert rw(conv, "conv") == (size * (3 * 32 * 32 + 16 * 3 * 3 * 3 + 16), size * 16 * 32 * 32)
    linear = traffic(nn.Linear(64, 10).to(dtype), torch.randn(8, 64, dtype=dtype))
    assert rw(linear, "linear") == (size * (8 * 64 + 10 * 64 + 10), size * 8 * 10)
    bn = traffic(nn.BatchNorm2d(16).to(dtype), torch.randn(2, 16, 8, 8, dtype=dtype))
    assert rw(bn, "batch_norm") == (size * (2 * 16 * 64 + 2 * 16), size * 2 * 16 * 64)


@pytest.mark.parametrize(("dtype", "size"), [(torch.float32, 4), (torch.float16, 2), (torch.int8, 1)])
def test_int8_quarters_and_float16_halves_the_bytes(dtype: torch.dtype, size: int) -> None:
    x = torch.ones(2, 3, 4, 5, dtype=dtype)
    y = torch.ones(3, 1, 5, dtype=dtype)
    add = traffic(Fn(torch.add), x, y)
    assert rw(add, "add") == (size * (120 + 15), size * 120)
    cat = traffic(Fn(lambda a, b: torch.cat([a, b], 0)), x, x)
    assert cat.total() == size * (240 + 240)
    assert traffic(Fn(lambda a: a.view(6, 20).t()), x).total() == 0


def test_mixed_dtypes_count_each_tensor_in_its_own_dtype() -> None:
    a = traffic(Fn(lambda x, m: x.masked_fill(m, 0.0)), torch.randn(4, 5), torch.rand(4, 5) > 0.5)
    assert rw(a, "masked_fill") == (4 * 20 + 1 * 20, 4 * 20)


def test_comparison_writes_a_bool_output() -> None:
    a = traffic(Fn(torch.gt), torch.randn(4, 5), torch.randn(4, 5))
    assert rw(a, "gt") == (4 * 40, 1 * 20)


# ----- pure handles, property tests ----------------------------------------------------------
dims = st.lists(st.integers(1, 6), min_size=1, max_size=4)


@settings(max_examples=50, deadline=None)
@given(dims, st.sampled_from([("float32", 4), ("float16", 2), ("int8", 1), ("float64", 8)]))
def test_elementwise_rule_reads_operands_and_writes_output(shape: list[int], dtype: tuple[str, int]) -> None:
    name, size = dtype
    x, b, out = TensorSpec(tuple(shape), name), TensorSpec((shape[-1],), name), TensorSpec(tuple(shape), name)
    t = elementwise([x, b], [out])
    assert t.read_bytes == size * (math.prod(shape) + shape[-1])
    assert t.write_bytes == size * math.prod(shape)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 64), st.integers(1, 64), st.integers(1, 64), st.integers(1, 64))
def test_bilinear_rule_reads_min_of_input_and_four_taps(h: int, w: int, oh: int, ow: int) -> None:
    x, out = TensorSpec((1, 3, h, w)), TensorSpec((1, 3, oh, ow))
    t = resize_bilinear([x], [out])
    assert t.read_bytes == 4 * min(3 * h * w, 4 * 3 * oh * ow)
    assert t.write_bytes == 4 * 3 * oh * ow


# ----- options ---------------------------------------------------------------------------------
def conv_bn_relu() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True))


def test_unfused_chain_writes_and_reads_every_intermediate() -> None:
    a = traffic(conv_bn_relu(), torch.randn(1, 3, 32, 32))
    x, w, y = 3 * 32 * 32, 16 * 3 * 3 * 3 + 16, 16 * 32 * 32
    assert a.total(kind="read") == 4 * ((x + w) + (y + 2 * 16) + y)
    assert a.total(kind="write") == 4 * (y + y + y)


def test_fused_chain_is_one_memory_pass() -> None:
    a = traffic(conv_bn_relu(), torch.randn(1, 3, 32, 32), fuse=True)
    x, w, y = 3 * 32 * 32, 16 * 3 * 3 * 3 + 16, 16 * 32 * 32
    # read the conv's input and weights and the folded scale/shift; write the relu's output
    assert a.total(kind="read") == 4 * (x + w + 2 * 16)
    assert a.total(kind="write") == 4 * y
    assert a.by_operator(kind="write") == {"relu_": 4 * y}


class TwoConsumers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        return torch.relu(y) + y


def test_fusion_needs_a_single_consumer() -> None:
    a = traffic(TwoConsumers(), torch.randn(1, 3, 8, 8), fuse=True)
    x, w, y = 3 * 64, 4 * 3 + 4, 4 * 64
    # y has two consumers: written and read twice. relu's output only feeds the add: fused.
    assert rw(a, "conv") == (4 * (x + w), 4 * y)
    assert rw(a, "relu") == (4 * y, 0)
    assert rw(a, "add") == (4 * y, 4 * y)


class Shared(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.w = nn.Parameter(torch.randn(8, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(self.fc(x))
        return x @ self.w.t() @ self.w.t()  # the same weight through a view, twice


def test_resident_params_read_each_weight_once_per_model() -> None:
    x = torch.randn(4, 8)
    act, w, b = 4 * 8, 8 * 8, 8
    plain = traffic(Shared(), x)
    assert plain.total(kind="read") == 4 * (2 * (act + w + b) + 2 * (act + w))
    resident = traffic(Shared(), x, resident_params=True)
    assert rw(resident, "linear") == (4 * (2 * act + w + b), 4 * 2 * act)
    assert resident.by_operator(kind="read")["matmul"] == 4 * (2 * act + w)
    assert resident.total(kind="write") == plain.total(kind="write")


# ----- query surface and aggregation ---------------------------------------------------------------
class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = conv_bn_relu()
        self.head = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.adaptive_avg_pool2d(self.block(x), 1).flatten(1))


def test_kinds_sum_and_rows_add_up() -> None:
    a = traffic(Net(), torch.randn(2, 3, 16, 16))
    assert a.total() == a.total(kind="read") + a.total(kind="write")
    for kind in ("read", "write", "both"):
        assert a.total(kind=kind) == sum(a.by_operator(kind=kind).values())
        assert a.by_module(kind=kind)[""] == a.total(kind=kind)
        modules = a.by_module(kind=kind)
        assert modules["block"] == sum(modules[f"block.{i}"] for i in range(3))
        assert a.by_module_and_operator(kind=kind)["head"] == a.by_operator("head", kind=kind)
    assert a.total("head", kind="read") == 4 * (2 * 16 + 10 * 16 + 10)
    with pytest.raises(ValueError, match="kind"):
        a.total(kind="bytes")


def test_copy_keeps_the_options() -> None:
    a = traffic(conv_bn_relu(), torch.randn(1, 3, 8, 8), fuse=True, resident_params=True)
    b = a.copy(new_inputs=(torch.randn(2, 3, 8, 8),))
    assert isinstance(b, MemoryTrafficAnalysis) and b.fuse and b.resident_params
    assert b.total(kind="write") == 2 * a.total(kind="write")


def test_unknown_operators_are_reported_not_counted() -> None:
    a = traffic(Fn(torch.cdist), torch.randn(4, 3), torch.randn(5, 3))
    assert a.unsupported_ops() == {"aten::cdist": 1}
    assert a.total() == 0


def test_user_handles_may_return_a_read_write_pair() -> None:
    a = traffic(nn.ReLU(), torch.randn(4))
    a.set_op_handle("aten::relu", spec_handle(lambda inputs, outputs: (3, 5)))
    assert rw(a, "relu") == (3, 5)
    a.set_op_handle("aten::relu", lambda inputs, outputs: (7, 11))  # fvcore style: torch._C.Value lists
    assert rw(a, "relu") == (7, 11)


def test_per_call_lists_bytes_in_execution_order() -> None:
    a = traffic(conv_bn_relu(), torch.randn(1, 3, 8, 8))
    y = 16 * 8 * 8
    assert [(call.kind, dict(c or {})) for call, c in a.per_call(kind="write")] == [
        ("aten::_convolution", {"conv": 4 * y}),
        ("aten::batch_norm", {"batch_norm": 4 * y}),
        ("aten::relu_", {"relu_": 4 * y}),
    ]
    fused = traffic(conv_bn_relu(), torch.randn(1, 3, 8, 8), fuse=True)
    assert [t.write_bytes for _, t in fused.traffic_per_call() if t is not None] == [0, 0, 4 * y]


def test_fusion_follows_views() -> None:
    model = nn.Sequential(nn.Linear(6, 8), nn.Flatten(0), nn.GELU())
    a = traffic(model, torch.randn(4, 6), fuse=True)
    # linear -> flatten (a view) -> gelu: the linear's output is never materialized
    assert rw(a, "linear") == (4 * (4 * 6 + 8 * 6 + 8), 0)
    assert rw(a, "gelu") == (0, 4 * 32)


# ----- arithmetic intensity ----------------------------------------------------------------------
def test_intensity_of_tables() -> None:
    flops = {"": {"conv": 600, "relu": 10}, "m": {"conv": 600}}
    moved = {"": {"conv": 300, "relu": 20, "cat": 40}, "m": {"conv": 300}}
    assert arithmetic_intensity(flops, moved) == {"": {"conv": 2.0, "relu": 0.5, "cat": 0.0}, "m": {"conv": 2.0}}
    assert module_intensity(flops, moved) == {"": 610 / 360, "m": 2.0}


def test_intensity_of_analyses_is_flops_over_bytes() -> None:
    model, x = Net(), torch.randn(2, 3, 16, 16)
    flops = FlopCountAnalysis(model, x).unsupported_ops_warnings(False)
    moved = traffic(model, x)
    per_op = arithmetic_intensity(flops, moved)
    assert per_op[""]["conv"] == flops.by_operator()["conv"] / moved.by_operator()["conv"]
    assert module_intensity(flops, moved)["head"] == flops.total("head") / moved.total("head")


# ----- the model zoo -------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO8)
def test_zoo_is_fully_supported_and_consistent(name: str) -> None:
    model, x = zoo_model(name)
    with torch.no_grad():
        plain = traffic(model, x)
        assert not plain.unsupported_ops()
        assert plain.total() == plain.total(kind="read") + plain.total(kind="write") == plain.by_module()[""]
        params = sum(4 * p.numel() for p in model.parameters())
        assert plain.total(kind="read") > params  # every weight is read at least once
        fused = traffic(model, x, fuse=True)
        assert fused.total(kind="write") < plain.total(kind="write")
        assert fused.total(kind="read") < plain.total(kind="read")
        resident = traffic(model, x, resident_params=True)
        assert resident.total(kind="read") <= plain.total(kind="read")
        assert resident.total(kind="write") == plain.total(kind="write")


class _HeldState(nn.Module):
    """A held state (2 x 3 x 4, float32) read through views, head by head, and written head by head into views."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("held", torch.zeros(2, 3, 4), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = [x * self.held[:, h] for h in range(3)]  # each head's view: 2 x 4 values read
        for h in range(3):
            self.held[:, h].copy_(out[h])  # each head's view: 2 x 4 values written
        return torch.stack(out, 1)


def _on(name: str, analysis: MemoryTrafficAnalysis) -> tuple[float, float]:
    """Bytes read and written through accesses carrying the name ``name``."""
    read = written = 0.0
    for _, t in analysis.traffic_per_call():
        for side, a in [*(("r", a) for a in t.read), *(("w", a) for a in t.write)] if t is not None else ():
            if a.tensor is not None and a.tensor.param == name:
                read, written = (read + a.nbytes, written) if side == "r" else (read, written + a.nbytes)
    return read, written


def test_a_view_of_a_buffer_carries_its_name_and_named_views_name_a_buffer_held_for_the_pass() -> None:
    x = torch.ones(2, 4)
    model = _HeldState()
    plain = MemoryTrafficAnalysis(model, (x,), tracer="dispatch")
    # three heads read and three written, 2 x 4 float32 values each: 3 x 32 = 96 bytes each way
    assert _on("held", plain) == (96, 96)
    # a buffer the model held only while traced (an LLM's cache): its views are named by prefix only
    traced = trace(model, (x,), tracer="dispatch")
    del model._buffers["held"]
    assert _on("held", MemoryTrafficAnalysis(traced)) == (0, 0)
    named = MemoryTrafficAnalysis(traced, named_views=("held",))
    assert _on("held", named) == (96, 96)
    # naming moves no byte
    assert named.total() == MemoryTrafficAnalysis(traced).total() == plain.total()


class _ViewedWeights(nn.Module):
    """A linear layer whose weight is read transposed, and a depthwise convolution whose weight
    is stored [C, K] and read as [C, 1, K], as Mamba's mixer reads its conv1d weight."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(6, 4))  # [out, in], as nn.Linear stores it
        self.conv = nn.Parameter(torch.ones(6, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.mm(x, self.weight.t())  # [2, 4] @ [4, 6]
        return F.conv1d(y.unsqueeze(-1).expand(2, 6, 5), self.conv.view(6, 1, 3), groups=6)


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_a_weight_read_through_a_view_is_the_weight(tracer: str) -> None:
    x = torch.ones(2, 4)
    memory = MemoryTrafficAnalysis(_ViewedWeights(), (x,), tracer=tracer)
    # mm reads the transposed weight whole: 6 x 4 float32 = 96 bytes; conv1d its [6, 1, 3] view: 18 x 4 = 72
    assert _on("weight", memory) == (96, 0)
    assert _on("conv", memory) == (72, 0)
    # the roofline counts both as weight bytes (AMAIX's weight data), 96 + 72 = 168, whatever the view
    report = roofline(memory, hardware="h100-sxm", dtype="float32")
    assert sum(t.layer.weight_bytes for t in report.layers) == 96 + 72
