"""Code the user gives an analysis (handles, loss functions, roofline scales and units, a forward, a
custom Function's backward, a calibration's measurements) that calls ``sys.exit()`` or raises
``GeneratorExit`` fails the analysis with opcount's error naming the code and the operator or
module; before, both passed every handler and a handle's ``sys.exit()`` ended the caller's process
(issue 42). ``KeyboardInterrupt`` passes through as it is, as Ctrl-C stops any Python code, and
leaves nothing patched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NoReturn

import pytest
import torch
from torch import nn
from torch.autograd import Function

import opcount
from opcount import (
    ActivationCountAnalysis,
    FlopCountAnalysis,
    HandleError,
    MemoryTrafficAnalysis,
    OpcountError,
    TraceError,
    spec_handle,
)
from opcount.tracers.training import BackwardError, LossFnError


def exits(*args: Any) -> NoReturn:
    sys.exit(3)


def closes(*args: Any) -> NoReturn:
    raise GeneratorExit


def interrupts(*args: Any) -> NoReturn:
    raise KeyboardInterrupt


ENDINGS = [
    pytest.param(exits, "SystemExit: exited with code 3", id="sys.exit"),
    pytest.param(closes, "GeneratorExit", id="GeneratorExit"),
]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).relu()


# ----- handles ----------------------------------------------------------------------------------


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
@pytest.mark.parametrize(("fn", "said"), ENDINGS)
def test_a_flop_handle_that_ends_is_a_handle_error_naming_it(fn: Callable[..., Any], said: str, tracer: str) -> None:
    a = FlopCountAnalysis(Net(), torch.ones(2, 4), tracer=tracer)
    a.set_op_handle("aten::linear", spec_handle(fn))
    with pytest.raises(HandleError, match=rf"handle for aten::linear \({fn.__name__}\) failed in module 'fc'.*{said}"):
        a.total()


@pytest.mark.parametrize(("fn", "said"), ENDINGS)
def test_an_fvcore_style_handle_that_ends_is_a_handle_error(fn: Callable[..., Any], said: str) -> None:
    a = FlopCountAnalysis(Net(), torch.ones(2, 4))
    a.set_op_handle("aten::linear", fn)  # a plain callable of the jit node's values, as fvcore's
    with pytest.raises(HandleError, match=rf"aten::linear \({fn.__name__}\).*{said}"):
        a.total()


@pytest.mark.parametrize("analysis", [MemoryTrafficAnalysis, ActivationCountAnalysis])
@pytest.mark.parametrize(("fn", "said"), ENDINGS)
def test_memory_and_activation_handles_that_end_are_handle_errors(
    analysis: Any, fn: Callable[..., Any], said: str
) -> None:
    a = analysis(Net(), torch.ones(2, 4))
    a.set_op_handle("aten::relu", spec_handle(fn))
    with pytest.raises(HandleError, match=rf"aten::relu \({fn.__name__}\) failed in module ''.*{said}"):
        a.total()


def test_a_handle_interrupted_by_the_user_passes_the_interrupt_through() -> None:
    a = FlopCountAnalysis(Net(), torch.ones(2, 4))
    a.set_op_handle("aten::linear", spec_handle(interrupts))
    with pytest.raises(KeyboardInterrupt):
        a.total()


# ----- the roofline's functions of an operator ----------------------------------------------------


@pytest.mark.parametrize("option", ["scale_ops", "scale_ifmap", "unit", "itemsize"])
@pytest.mark.parametrize(("fn", "said"), ENDINGS)
def test_a_roofline_function_that_ends_is_a_handle_error_naming_it(
    option: str, fn: Callable[..., Any], said: str
) -> None:
    with pytest.raises(HandleError, match=rf"{option} \({fn.__name__}\) failed for .*{said}"):
        opcount.roofline(Net(), torch.ones(2, 4), hardware="h100-sxm", **{option: fn})


# ----- forwards, losses, backward passes ----------------------------------------------------------


class ClosesInside(nn.Module):
    def __init__(self, end: Callable[..., Any]) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.end = end

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        self.end()
        return y


TRACED = [
    pytest.param({}, id="jit"),
    pytest.param({"tracer": "dispatch"}, id="dispatch"),
    pytest.param({"tracer": "dispatch", "device": "meta"}, id="meta"),
    pytest.param({"tracer": "dispatch", "mode": "train"}, id="train"),
]


@pytest.mark.parametrize("options", TRACED)
def test_a_forward_raising_generator_exit_is_a_trace_error(options: dict[str, Any]) -> None:
    with pytest.raises(TraceError, match=r"could not trace the model \(ClosesInside\).*GeneratorExit"):
        FlopCountAnalysis(ClosesInside(closes), torch.ones(2, 4), **options).total()


@pytest.mark.parametrize("options", TRACED)
def test_a_forward_interrupted_by_the_user_passes_the_interrupt_and_leaves_nothing_patched(
    options: dict[str, Any],
) -> None:
    call, apply = nn.Module.__dict__["__call__"], Function.__dict__["apply"]
    model = ClosesInside(interrupts).train(False)
    with pytest.raises(KeyboardInterrupt):
        FlopCountAnalysis(model, torch.ones(2, 4), **options).total()
    assert (nn.Module.__dict__["__call__"], Function.__dict__["apply"]) == (call, apply)
    assert not model.training and all("_slow_forward" not in m.__dict__ for m in model.modules())


@pytest.mark.parametrize(("fn", "said"), ENDINGS)
def test_a_loss_function_that_ends_is_a_loss_fn_error(fn: Callable[..., Any], said: str) -> None:
    with pytest.raises(LossFnError, match=rf"loss_fn raised {said}"):
        FlopCountAnalysis(Net(), torch.ones(2, 4), tracer="dispatch", mode="train", loss_fn=fn).total()


class EndsBackward(Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise GeneratorExit


def test_a_custom_backward_raising_generator_exit_is_a_backward_error() -> None:
    class Uses(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return EndsBackward.apply(self.fc(x))

    with pytest.raises(BackwardError, match="the backward pass failed: GeneratorExit"):
        FlopCountAnalysis(Uses(), torch.ones(2, 4), tracer="dispatch", mode="train").total()


def test_a_forward_that_ends_while_profiled_is_a_profile_error() -> None:
    from opcount.profiling import profile
    from opcount.profiling.runner import ProfileError

    with pytest.raises(ProfileError, match="GeneratorExit"):
        profile(ClosesInside(closes), torch.ones(2, 4), repeats=1)


@pytest.mark.parametrize(("fn", "said"), ENDINGS)
def test_a_loss_function_that_ends_while_saved_activations_are_measured_is_an_opcount_error(
    fn: Callable[..., Any], said: str
) -> None:
    from opcount.training.saved import measure

    with pytest.raises(OpcountError, match=rf"the forward failed there: {said}"):
        measure(Net(), (torch.ones(2, 4),), {}, loss_fn=fn)


@pytest.mark.parametrize(("fn", "said"), ENDINGS)
def test_a_calibration_measurement_that_ends_is_a_calibration_error(fn: Callable[..., Any], said: str) -> None:
    from opcount.hardware.calibrate import CalibrationError, measure

    with pytest.raises(CalibrationError, match=rf"calibrating cpu .* failed: {said}"):
        measure(torch.device("cpu"), matmul=fn, copy=lambda device: 1e9)
