"""TorchScript submodules (torch.jit.script, torch.jit.trace): the dispatch tracer counts the
operators they run, as one call of the scripted module; the jit tracer, which cannot call
TorchScript from traced Python code, says so and points to the dispatch tracer. Numbers worked
by hand: 1 MAC = 1 flop, ReLU 1 flop per element (chainer-computational-cost)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TraceError

# TorchScript is what these tests are about: torch >= 2.10's notice that it is deprecated is expected.
pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning"),
    pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:FutureWarning"),
    pytest.mark.filterwarnings("ignore:`torch.jit.trace_method` is deprecated:FutureWarning"),
]

X = torch.randn(2, 8)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 16, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


class Outer(nn.Module):
    def __init__(self, sub: nn.Module) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 8, bias=False)
        self.sub = sub

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.sub(self.pre(x))


# pre: 2 rows * 8 * 8 = 128; sub: fc 2 * 8 * 16 = 256, relu on 2 * 16 = 32 elements
PRE, FC, RELU = 128, 256, 32
COMPILE: dict[str, Callable[[nn.Module], nn.Module]] = {
    "script": torch.jit.script,
    "trace": lambda m: torch.jit.trace(m, X),
}


@pytest.mark.parametrize("device", [None, "meta"])
@pytest.mark.parametrize("how", list(COMPILE))
def test_the_dispatch_tracer_counts_a_scripted_submodule_as_one_call(how: str, device: str | None) -> None:
    flops = FlopCountAnalysis(Outer(COMPILE[how](Inner())), X, tracer="dispatch", device=device)
    assert dict(flops.by_operator()) == {"linear": PRE + FC, "relu": RELU}
    by_module = flops.by_module()
    assert (by_module[""], by_module["pre"], by_module["sub"]) == (PRE + FC + RELU, PRE, FC + RELU)
    assert flops.uncalled_modules() == set()  # sub.fc ran, inside the scripted call


@pytest.mark.parametrize("how", list(COMPILE))
def test_the_dispatch_tracer_counts_a_scripted_model(how: str) -> None:
    flops = FlopCountAnalysis(COMPILE[how](Outer(Inner())), X, tracer="dispatch")
    assert flops.total() == PRE + FC + RELU
    assert flops.by_module()[""] == PRE + FC + RELU


@pytest.mark.parametrize("how", list(COMPILE))
def test_the_jit_tracer_points_a_scripted_submodule_to_the_dispatch_tracer(how: str) -> None:
    with pytest.raises(TraceError, match=r"module 'sub' .*TorchScript module.*tracer='dispatch'"):
        FlopCountAnalysis(Outer(COMPILE[how](Inner())), X).total()


class ThroughForward(nn.Module):
    """Calls its scripted submodule's forward directly: no Python frame of the submodule to find."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(8, 8, bias=False))
        self.block.add_module("sub", torch.jit.script(Inner()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block.sub.forward(self.block[0](x))


def test_the_jit_tracer_names_the_scripted_module_whatever_called_it() -> None:
    with pytest.raises(TraceError, match=r"TorchScript module \(.*; here: 'block\.sub'\).*tracer='dispatch'"):
        FlopCountAnalysis(ThroughForward(), X).total()
    flops = FlopCountAnalysis(ThroughForward(), X, tracer="dispatch")
    assert flops.total() == PRE + FC + RELU
    assert flops.uncalled_modules() == {"block.sub", "block.sub.fc"}  # reached through .forward: counted in 'block'
