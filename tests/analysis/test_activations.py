"""ActivationCountAnalysis: fvcore's conventions and numbers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount import ActivationCountAnalysis
from tests.fixtures.zoo8 import ZOO8, zoo_model

fvcore_nn = pytest.importorskip("fvcore.nn")


class ConvLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2)
        self.fc = nn.Linear(8 * 7 * 7, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x))
        return self.fc(y.flatten(1)) + torch.bmm(x[:, 0], x[:, 1]).sum()


def test_output_elements_of_conv_and_products() -> None:
    a = ActivationCountAnalysis(ConvLinear(), torch.randn(2, 3, 15, 15)).unsupported_ops_warnings(False)
    assert a.by_operator() == {"conv": 2 * 8 * 7 * 7, "linear": 2 * 10, "bmm": 2 * 15 * 15}
    assert a.by_module()["conv"] == 2 * 8 * 7 * 7
    assert a.unsupported_ops() == {"aten::add": 1, "aten::sum": 1}  # fvcore counts neither


def assert_equals_fvcore(name: str, size: int) -> None:
    model, x = zoo_model(name, size)
    with torch.no_grad():
        ours = ActivationCountAnalysis(model, x).unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        theirs = fvcore_nn.ActivationCountAnalysis(model, x)
        theirs.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        assert ours.by_module_and_operator() == theirs.by_module_and_operator()
        assert ours.by_operator() == theirs.by_operator()
        assert ours.by_module() == theirs.by_module()
        assert ours.total() == theirs.total()
        assert ours.unsupported_ops() == theirs.unsupported_ops()


def test_equals_fvcore_small() -> None:
    assert_equals_fvcore("regnet_y_400mf", 64)


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO8)
def test_equals_fvcore_model_zoo(name: str) -> None:
    assert_equals_fvcore(name, 224)
