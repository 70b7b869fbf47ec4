"""When the dispatch tracer's shape-only run fails and its fake-tensor run fails too, the error
reported is the first one (the model's), with the second kept under it: the second is often an
artefact of the second run and says nothing about what the user got wrong."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TraceError


class FailsTwice(nn.Module):
    """Fails one way on shape-only tensors and another on fake tensors."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x)
        if type(y).__name__ == "ShapeTensor":
            raise ValueError("the model's own mistake")
        raise RuntimeError("an artefact of the fake tensors")


def test_the_first_failure_is_reported_with_the_second_kept() -> None:
    model = FailsTwice().to("meta")
    with pytest.raises(TraceError, match="ValueError: the model's own mistake") as caught:
        FlopCountAnalysis(model, torch.empty(2, 4, device="meta"), tracer="dispatch").total()
    error = caught.value
    assert "artefact" not in str(error)
    assert isinstance(error.__cause__, ValueError)  # the first failure's own cause, for --debug
    assert isinstance(error.__context__, TraceError) and "artefact" in str(error.__context__)
    assert any("artefact of the fake tensors" in note for note in error.__notes__)


def test_a_failure_on_real_tensors_is_reported_as_it_is() -> None:
    model = FailsTwice()
    with pytest.raises(TraceError, match="RuntimeError: an artefact of the fake tensors") as caught:
        FlopCountAnalysis(model, torch.randn(2, 4), tracer="dispatch").total()
    assert not getattr(caught.value, "__notes__", None)


class NoMetaKernel(nn.Module):
    """Stops on shape-only tensors as an operator without a meta kernel does; fails for real on fake ones."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if type(x).__name__ == "ShapeTensor":
            raise NotImplementedError("aten::op: no fake impl or Meta kernel registered")
        raise RuntimeError("the model's own mistake, seen with fake tensors")


def test_what_shape_only_tensors_cannot_follow_gives_way_to_the_second_failure() -> None:
    with pytest.raises(TraceError, match="RuntimeError: the model's own mistake, seen with fake tensors"):
        FlopCountAnalysis(NoMetaKernel(), torch.empty(2, 4, device="meta"), tracer="dispatch").total()
