"""Attention: q.k^T and attn.v as multiply-adds, the MHA fast path, and the causal option."""

import math

import pytest
import torch

from opcount import Cost, FlopCountAnalysis, spec_handle
from opcount.handles import FLOPS
from opcount.handles.attention import causal_pairs, sdpa_handle
from opcount.handles.softmax import softmax_flops
from tests.fixtures.specs import NONE, C, T, cost


def _sdpa_args(q, k, v, mask=NONE, is_causal=False):
    return [T(*q), T(*k), T(*v), mask, C(0.0), C(is_causal), NONE, C(False)]


@pytest.mark.parametrize(
    "q, k, v, out, expected",
    [
        ((2, 4, 16, 16), (2, 4, 16, 16), (2, 4, 16, 16), (2, 4, 16, 16), 2 * 4 * 16 * 16 * (16 + 16)),
        ((1, 12, 197, 64), (1, 12, 197, 64), (1, 12, 197, 64), (1, 12, 197, 64), 12 * 197 * 197 * 128),
        ((2, 8, 10, 32), (2, 8, 20, 32), (2, 8, 20, 48), (2, 8, 10, 48), 2 * 8 * 10 * 20 * (32 + 48)),
        ((5, 16), (7, 16), (7, 8), (5, 8), 5 * 7 * (16 + 8)),  # unbatched
        # grouped-query attention: 8 query heads over 2 key/value heads
        ((1, 8, 6, 16), (1, 2, 6, 16), (1, 2, 6, 16), (1, 8, 6, 16), 8 * 6 * 6 * 32),
    ],
)
def test_sdpa_full_product(q, k, v, out, expected) -> None:
    value = cost("aten::scaled_dot_product_attention", _sdpa_args(q, k, v), [T(*out)])
    assert value.macs == expected
    # the softmax over each query's S scores, 3*S - 1 flops a row (exp, sum, divide)
    *batch, length, _ = out
    assert value.flops == math.prod(batch) * length * (3 * k[-2] - 1)


def test_sdpa_mask_and_causal_count_the_full_product_by_default() -> None:
    q = (2, 4, 16, 16)
    full = 2 * 4 * 16 * 16 * 32
    softmax = 2 * 4 * 16 * (3 * 16 - 1)
    masked = cost("aten::scaled_dot_product_attention", _sdpa_args(q, q, q, mask=T(2, 1, 16, 16)), [T(*q)])
    causal = cost("aten::scaled_dot_product_attention", _sdpa_args(q, q, q, is_causal=True), [T(*q)])
    assert masked == causal == Cost(macs=full, flops=softmax)


def test_causal_unmasked_only_option() -> None:
    handle = sdpa_handle(causal_unmasked_only=True)
    q = (2, 4, 16, 16)
    # 16 * 17 / 2 = 136 kept pairs per head
    # the softmax too: row i has i + 1 scores, 3(i + 1) - 1 flops; summed, 3 * 136 - 16
    assert handle(_sdpa_args(q, q, q, is_causal=True), [T(*q)]) == Cost(2 * 4 * 136 * 32, 2 * 4 * (3 * 136 - 16))
    # not causal: the full count
    assert handle(_sdpa_args(q, q, q), [T(*q)]) == Cost(2 * 4 * 256 * 32, 2 * 4 * 16 * (3 * 16 - 1))


def test_causal_pairs_by_hand() -> None:
    assert causal_pairs(4, 4) == 1 + 2 + 3 + 4
    assert causal_pairs(2, 5) == 1 + 2  # top-left aligned: row i keeps i + 1 keys
    assert causal_pairs(5, 2) == 1 + 2 + 2 + 2 + 2
    assert causal_pairs(1, 1) == 1


def _mha_args(b, length, kv_len, e, heads):
    return [
        T(b, length, e),
        T(b, kv_len, e),
        T(b, kv_len, e),
        C(e),
        C(heads),
        T(3 * e, e),
        T(3 * e),
        T(e, e),
        T(e),
        NONE,
        C(False),
        C(True),
        NONE,
    ]


def test_native_mha_vit_b16_layer() -> None:
    # one ViT-B/16 encoder attention: in-proj 197*768*2304, scores and context 2*12*197*197*64,
    # out-proj 197*768*768
    expected = 197 * 768 * 2304 + 2 * 12 * 197 * 197 * 64 + 197 * 768 * 768
    assert expected == 524391936
    # softmax: 12 heads x 197 rows of 197 scores, 3 * 197 - 1 flops a row
    value = cost("aten::_native_multi_head_attention", _mha_args(1, 197, 197, 768, 12), [T(1, 197, 768), NONE])
    assert value == Cost(macs=expected, flops=12 * 197 * (3 * 197 - 1))


def test_native_mha_cross_attention() -> None:
    b, length, kv_len, e = 2, 5, 7, 8
    expected = b * length * e * e + 2 * b * kv_len * e * e + 2 * b * length * kv_len * e + b * length * e * e
    out = [T(b, length, e), NONE]
    value = cost("aten::_native_multi_head_attention", _mha_args(b, length, kv_len, e, 2), out)
    assert value == Cost(macs=expected, flops=b * 2 * length * (3 * kv_len - 1))


def test_native_mha_rejects_a_wrong_weight() -> None:
    args = _mha_args(1, 4, 4, 8, 2)
    args[5] = T(16, 8)
    with pytest.raises(ValueError, match="_native_multi_head_attention"):
        cost("aten::_native_multi_head_attention", args, [T(1, 4, 8), NONE])


def test_attention_is_multiply_adds() -> None:
    for op in (
        "aten::scaled_dot_product_attention",
        "aten::_native_multi_head_attention",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    ):
        assert FLOPS.handles[op].macs


class _Causal(torch.nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_installing_the_causal_handle_in_an_analysis() -> None:
    q = torch.randn(1, 2, 8, 4)
    # 2 heads, 8 queries, 8 keys, E = Ev = 4; softmax 3 * 8 - 1 per row
    full = FlopCountAnalysis(_Causal(), (q, q, q))
    assert full.total() == 2 * 8 * 8 * 8 + 2 * 8 * 23
    # 36 of 64 pairs kept; softmax over them: 3 * 36 - 8 per head
    half = FlopCountAnalysis(_Causal(), (q, q, q)).set_op_handle(
        "aten::scaled_dot_product_attention", spec_handle(sdpa_handle(causal_unmasked_only=True), macs=True)
    )
    assert half.total() == 2 * 36 * 8 + 2 * (3 * 36 - 8)
    doubled = FlopCountAnalysis(_Causal(), (q, q, q), flops_per_mac=2).set_op_handle(
        "aten::scaled_dot_product_attention", spec_handle(sdpa_handle(causal_unmasked_only=True), macs=True)
    )
    assert doubled.total() == 2 * 2 * 36 * 8 + 2 * (3 * 36 - 8)  # the softmax is not doubled
    assert FlopCountAnalysis(_Causal(), (q, q, q), preset="macs").total() == 2 * 8 * 8 * 8
    unmasked = FlopCountAnalysis(_Causal(), (q, q, q), preset="macs", causal_attention="unmasked")
    assert unmasked.total() == 2 * 36 * 8


def test_fused_kernels_count_like_sdpa() -> None:
    q, kv = T(2, 4, 8, 16), T(2, 4, 10, 16)
    expected = 2 * 4 * 8 * 10 * (16 + 16)
    for op in ("aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_efficient_attention"):
        value = cost(op, [q, kv, kv, C(0.0), C(False)], [T(2, 4, 8, 16), T(2, 4, 8)])
        assert value == Cost(macs=expected, flops=2 * 4 * 8 * (3 * 10 - 1))


def test_fused_softmax_equals_the_standalone_softmax_handle() -> None:
    # the softmax inside sdpa costs what aten::softmax over the [b, h, L, S] scores costs
    q, k = (2, 3, 5, 8), (2, 3, 7, 8)
    standalone = softmax_flops((2, 3, 5, 7), 3)
    assert cost("aten::scaled_dot_product_attention", _sdpa_args(q, k, k), [T(*q)]).flops == standalone


def test_spelled_out_attention_counts_as_sdpa() -> None:
    # matmul, softmax, matmul (the math a model may write by hand) and sdpa give the same total
    class ByHand(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return (q @ k.transpose(-2, -1)).softmax(-1) @ v

    class Fused(torch.nn.Module):
        def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, scale=1.0)

    q, k = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8)
    by_hand = FlopCountAnalysis(ByHand(), (q, k, k)).total()
    assert by_hand == 2 * 3 * 5 * 7 * 16 + 2 * 3 * 5 * (3 * 7 - 1)
    assert FlopCountAnalysis(Fused(), (q, k, k)).total() == by_hand
