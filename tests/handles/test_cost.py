"""A handle's Cost: multiply-adds and plain flops apart, scaled differently by the analysis and the roofline."""

import pytest
import torch
from torch import nn

from opcount import Cost, FlopCountAnalysis, HandleError, roofline, spec_handle
from opcount.roofline import FLOPS_PER_MAC


class _Attention(nn.Module):
    def forward(self, q: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, q, q)


def test_analysis_scales_only_the_multiply_adds() -> None:
    # [1, 2, 4, 8]: 2 heads x 4 x 4 pairs x (8 + 8) = 512 MACs; softmax 2 x 4 rows x (3*4 - 1) = 88
    q = torch.randn(1, 2, 4, 8)
    assert FlopCountAnalysis(_Attention(), (q,)).total() == 512 + 88
    assert FlopCountAnalysis(_Attention(), (q,), flops_per_mac=2).total() == 2 * 512 + 88
    assert FlopCountAnalysis(_Attention(), (q,), preset="macs").total() == 512


def test_roofline_counts_two_flops_per_multiply_add_plus_the_flops() -> None:
    q = torch.randn(1, 2, 4, 8)
    call = next(c for c, _ in FlopCountAnalysis(_Attention(), (q,)).per_call() if "attention" in c.kind)
    priced = [v for c, v in FlopCountAnalysis(_Attention(), (q,)).per_call_at(FLOPS_PER_MAC) if c == call]
    assert [sum(v.values()) for v in priced if v is not None] == [2 * 512 + 88]
    report = roofline(_Attention(), (q,), hardware="h100-sxm")
    assert report.total_flops == 2 * 512 + 88


def test_a_cost_part_that_is_not_a_count_names_the_operator() -> None:
    model, x = nn.Linear(3, 2), torch.randn(1, 3)
    bad = FlopCountAnalysis(model, x).set_op_handle("aten::linear", spec_handle(lambda i, o: Cost(macs=-1, flops=2)))
    with pytest.raises(HandleError, match=r"aten::linear.*-1 for 'macs'"):
        bad.total()


def test_cost_at() -> None:
    assert Cost(macs=3, flops=4).at(2) == 10
    assert Cost(flops=4).at(1) == 4
