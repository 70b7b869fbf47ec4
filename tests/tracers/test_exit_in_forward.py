"""A forward (or a loss function) that calls sys.exit is an error of the model's code, named with
its module, in both tracers and the profiler: the analysis must not end the caller's process."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TraceError
from opcount.tracers.training import LossFnError


class ExitsInside(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sys.exit(3)


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.inner = ExitsInside()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(self.fc(x))


@pytest.mark.parametrize(
    ("options", "x"),
    [
        ({}, torch.randn(1, 4)),
        ({"tracer": "dispatch"}, torch.randn(1, 4)),
        ({"tracer": "dispatch", "device": "meta"}, torch.randn(1, 4)),
        ({"tracer": "dispatch", "mode": "train"}, torch.randn(1, 4)),
    ],
)
def test_sys_exit_in_a_forward_is_a_trace_error(options: dict[str, str], x: torch.Tensor) -> None:
    model = Outer()
    with pytest.raises(TraceError, match=r"module 'inner' \(ExitsInside\).*SystemExit: exited with code 3") as e:
        FlopCountAnalysis(model, x, **options).total()
    assert "the model's code exited" in str(e.value)
    assert isinstance(e.value.__cause__, SystemExit)


def test_sys_exit_in_a_loss_fn_is_named() -> None:
    def loss_fn(output: torch.Tensor) -> torch.Tensor:
        sys.exit(0)

    model = nn.Linear(4, 4)
    with pytest.raises(LossFnError, match=r"loss_fn raised SystemExit: exited with code 0"):
        FlopCountAnalysis(model, torch.randn(1, 4), tracer="dispatch", mode="train", loss_fn=loss_fn).total()


def test_sys_exit_while_profiling_is_a_profile_error() -> None:
    from opcount.profiling import profile
    from opcount.profiling.runner import ProfileError

    with pytest.raises(ProfileError, match=r"module 'inner' \(ExitsInside\): SystemExit: exited with code 3"):
        profile(Outer(), torch.randn(1, 4), repeats=1)
