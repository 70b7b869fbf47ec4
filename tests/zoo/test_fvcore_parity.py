"""Parity with the reference implementation, fvcore, on torchvision models.

With ``preset="fvcore"`` every per-module, per-operator count equals fvcore's. With the default
preset the operators fvcore counts keep fvcore's numbers in every module; other operators are
counted on top.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from opcount import FlopCountAnalysis

fvcore_nn = pytest.importorskip("fvcore.nn")
torchvision = pytest.importorskip("torchvision")

FAST = ["resnet50", "mobilenet_v3_large"]
SLOW = ["densenet121", "efficientnet_b0", "convnext_tiny", "regnet_y_400mf", "swin_t", "r3d_18"]


def _model_and_input(name: str) -> tuple[torch.nn.Module, torch.Tensor]:
    if name == "r3d_18":
        return torchvision.models.video.r3d_18(weights=None).eval(), torch.randn(1, 3, 16, 112, 112)
    return torchvision.models.get_model(name, weights=None).eval(), torch.randn(1, 3, 224, 224)


def _restrict(counts: dict[str, Counter[str]], ops: set[str]) -> dict[str, Counter[str]]:
    return {m: Counter({k: v for k, v in c.items() if k in ops}) for m, c in counts.items()}


def _check(name: str) -> None:
    model, x = _model_and_input(name)
    with torch.no_grad():
        reference = fvcore_nn.FlopCountAnalysis(model, x)
        expected = reference.by_module_and_operator()
        ours = FlopCountAnalysis(model, x, preset="fvcore")
        assert ours.by_module_and_operator() == expected
        assert ours.by_module() == reference.by_module()
        assert ours.by_operator() == reference.by_operator()
        default = FlopCountAnalysis(model, x)
        fv_ops = {op for c in expected.values() for op in c}
        assert _restrict(default.by_module_and_operator(), fv_ops) == expected
        assert default.total() > reference.total()  # elementwise and pooling on top


@pytest.mark.parametrize("name", FAST)
def test_parity_fast(name: str) -> None:
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", SLOW)
def test_parity_zoo(name: str) -> None:
    _check(name)
