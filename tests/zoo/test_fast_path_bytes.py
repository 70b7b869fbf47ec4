"""Under no_grad (the command line's mode) torch takes its fused fast paths; every operator that has
flops must have bytes too, or the roofline's memory time is too low (ViT-B/16 moved 441 MB instead
of 671 MB before its attention fast path had a bytes formula)."""

from __future__ import annotations

import pytest
import torch

from opcount import FlopCountAnalysis, MemoryTrafficAnalysis
from tests.fixtures.zoo import TRANSFORMERS, torchvision_model, torchvision_names

pytestmark = pytest.mark.slow

NAMES = [*torchvision_names("classification"), *torchvision_names("video")]


def _ops_with_flops_but_no_bytes(model: torch.nn.Module, inputs: tuple) -> set[str]:
    with torch.no_grad():
        flops = FlopCountAnalysis(model, inputs).unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        memory = MemoryTrafficAnalysis(model, inputs).unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        counted = {op for op, v in flops.by_operator().items() if v}
        return {op for op in memory.unsupported_ops() if op.removeprefix("aten::") in counted or op in counted}


@pytest.mark.parametrize("name", NAMES)
def test_torchvision_under_no_grad_has_bytes_wherever_it_has_flops(name: str) -> None:
    model, inputs = torchvision_model(name)
    assert _ops_with_flops_but_no_bytes(model, inputs) == set()


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_transformers_under_no_grad_have_bytes_wherever_they_have_flops(name: str) -> None:
    model, inputs = TRANSFORMERS[name]()
    assert _ops_with_flops_but_no_bytes(model, inputs) == set()


def test_vit_b_16_prices_its_bytes_alike_with_and_without_grad() -> None:
    model, inputs = torchvision_model("vit_b_16")
    totals = []
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            memory = MemoryTrafficAnalysis(model, inputs).unsupported_ops_warnings(False)
            memory.uncalled_modules_warnings(False)
            totals.append(memory.total())
    assert totals[1] == pytest.approx(totals[0], rel=0.10)
