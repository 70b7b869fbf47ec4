"""Convolutions against the closed form n * c_out * (c_in / g) * prod(k) * prod(out spatial), as formulas
and traced by both tracers."""

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, MemoryTrafficAnalysis, trace
from tests.fixtures.specs import NONE, C, T, flops


def _conv(op_args, x, w, out, transposed=False, groups=1):
    """aten::_convolution's 13 arguments."""
    rank = len(x) - 2
    ones, zeros = C((1,) * rank), C((0,) * rank)
    return [
        T(*x),
        T(*w),
        NONE,
        ones,
        zeros,
        ones,
        C(transposed),
        zeros,
        C(groups),
        C(False),
        C(False),
        C(True),
        C(True),
    ]


def test_conv2d_values() -> None:
    # resnet stem: 1x3x224x224, 64x3x7x7, out 112x112: 3*7*7*64*112*112
    inputs = _conv(None, (1, 3, 224, 224), (64, 3, 7, 7), (1, 64, 112, 112))
    assert flops("aten::_convolution", inputs, [T(1, 64, 112, 112)]) == 118013952
    # alexnet conv1: 64x3x11x11 -> 55x55
    inputs = _conv(None, (1, 3, 224, 224), (64, 3, 11, 11), (1, 64, 55, 55))
    assert flops("aten::_convolution", inputs, [T(1, 64, 55, 55)]) == 64 * 3 * 121 * 55 * 55


@pytest.mark.parametrize(
    "x, w, out, groups, expected",
    [
        ((2, 4, 10), (8, 4, 3), (2, 8, 8), 1, 2 * 8 * 4 * 3 * 8),  # conv1d
        ((2, 4, 4, 4, 4), (8, 4, 3, 3, 3), (2, 8, 2, 2, 2), 1, 2 * 8 * 4 * 27 * 8),  # conv3d
        ((1, 32, 56, 56), (32, 1, 3, 3), (1, 32, 56, 56), 32, 32 * 9 * 56 * 56),  # depthwise
        ((1, 64, 28, 28), (128, 16, 3, 3), (1, 128, 28, 28), 4, 128 * 16 * 9 * 28 * 28),  # grouped
        ((1, 8, 20, 20), (8, 8, 3, 3), (1, 8, 16, 16), 1, 8 * 8 * 9 * 16 * 16),  # dilation 2 shrinks the output
    ],
)
def test_conv_shapes(x, w, out, groups, expected) -> None:
    inputs = _conv(None, x, w, out, groups=groups)
    assert flops("aten::_convolution", inputs, [T(*out)]) == expected
    # the public overloads count the same
    assert flops("aten::convolution", inputs[:9], [T(*out)]) == expected
    conv_nd = f"aten::conv{len(x) - 2}d"
    assert flops(conv_nd, [T(*x), T(*w), NONE, C((1,)), C((0,)), C((1,)), C(groups)], [T(*out)]) == expected


def test_transposed_counts_input_positions() -> None:
    # ConvTranspose1d(4, 8, 3, stride=2, output_padding=1) on [2, 4, 10] -> [2, 8, 22]:
    # every input position meets the whole kernel: 2 * 4 * 8 * 3 * 10
    x, w, out = (2, 4, 10), (4, 8, 3), (2, 8, 22)
    inputs = _conv(None, x, w, out, transposed=True)
    assert flops("aten::_convolution", inputs, [T(*out)]) == 1920
    args = [T(*x), T(*w), NONE, C((2,)), C((0,)), C((1,)), C(1), C((1,))]
    assert flops("aten::conv_transpose1d", args, [T(*out)]) == 1920
    # grouped transposed 2-D: weight [c_in, c_out/g, k, k] = [4, 4, 3, 3], groups 2, 6x6 -> 8x8
    inputs = _conv(None, (2, 4, 6, 6), (4, 4, 3, 3), (2, 8, 8, 8), transposed=True, groups=2)
    assert flops("aten::_convolution", inputs, [T(2, 8, 8, 8)]) == 2 * 4 * 4 * 9 * 36


def test_padding_same_mode() -> None:
    args = [T(2, 4, 6, 6), T(8, 4, 3, 3), NONE, C((1, 1)), C("same"), C((1, 1)), C(1)]
    assert flops("aten::_convolution_mode", args, [T(2, 8, 6, 6)]) == 2 * 8 * 4 * 9 * 36


def test_unbatched_input() -> None:
    args = [T(4, 10), T(8, 4, 3), NONE, C((1,)), C((0,)), C((1,)), C(1)]
    assert flops("aten::conv1d", args, [T(8, 8)]) == 8 * 4 * 3 * 8


def test_schema_mismatch_fails_loudly() -> None:
    inputs = _conv(None, (1, 3, 8, 8), (4, 3, 3, 3), (1, 4, 6, 6))
    inputs[6] = C(1)  # not a bool 'transposed'
    with pytest.raises(ValueError, match="transposed"):
        flops("aten::_convolution", inputs, [T(1, 4, 6, 6)])


def test_unbatched_input_to_convolution() -> None:
    # the dispatch tracer records an unbatched nn.Conv2d as _convolution on [c, *i] (jit batches it first)
    inputs = _conv(None, (1, 3, 6, 6), (4, 3, 3, 3), (1, 4, 6, 6))
    inputs[0] = T(3, 6, 6)
    assert flops("aten::_convolution", inputs, [T(4, 6, 6)]) == 4 * 3 * 9 * 36


# --- both tracers, traced models ----------------------------------------------------------------
TRACERS = [("jit", None), ("dispatch", None), ("dispatch", "meta")]


@pytest.mark.parametrize(("tracer", "device"), TRACERS)
def test_string_padding_is_recorded_as_convolution_mode_by_both_tracers(tracer: str, device: str | None) -> None:
    valid = trace(nn.Conv1d(3, 2, 3, padding="valid"), torch.randn(2, 3, 6), tracer=tracer, device=device)
    assert [c.kind for c in valid.calls] == ["aten::_convolution_mode"]
    conv, x = nn.Conv2d(3, 4, 3, padding="same", bias=False), torch.randn(2, 3, 6, 6)
    assert [c.kind for c in trace(conv, x, tracer=tracer, device=device).calls] == ["aten::_convolution_mode"]
    # the default preset counts it: 2 * 4 * 3 * 9 * 36 multiply-adds; reads x, w, writes the output
    flops_ = FlopCountAnalysis(conv, x, tracer=tracer, device=device)
    assert flops_.total() == 2 * 4 * 3 * 9 * 36 and dict(flops_.unsupported_ops()) == {}
    memory = MemoryTrafficAnalysis(conv, x, tracer=tracer, device=device)
    assert (memory.total("", kind="read"), memory.total("", kind="write")) == (
        (2 * 3 * 36 + 4 * 27) * 4,
        2 * 4 * 36 * 4,
    )


@pytest.mark.parametrize(("tracer", "device"), TRACERS)
@pytest.mark.parametrize(("make", "padding"), [(nn.Conv2d, 1), (nn.Conv2d, "same"), (nn.ConvTranspose2d, 1)])
def test_unbatched_input_traced(tracer: str, device: str | None, make: type[nn.Module], padding: int | str) -> None:
    conv = make(3, 4, 3, padding=padding, bias=False)
    # a batch of one: 4 * 3 * 9 multiply-adds per position, 6x6 positions (of the input if transposed:
    # ConvTranspose2d(k 3, padding 1) keeps 6x6 too)
    assert FlopCountAnalysis(conv, torch.randn(3, 6, 6), tracer=tracer, device=device).total() == 4 * 3 * 9 * 36
