"""fvcore's own behaviours on small models, compared with fvcore itself, live.

Operator names a user sets handles under, the keys results come back under with
``preset="fvcore"``, the base class's ignore list, the one-call ``flop_count`` and
``activation_count`` functions and the single-operator formulas fvcore's handles implement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import opcount
from opcount import ActivationCountAnalysis, FlopCountAnalysis, JitModelAnalysis
from opcount.handles import FVCORE_IGNORED

fvcore_nn = pytest.importorskip("fvcore.nn")
fvcore_jit = pytest.importorskip("fvcore.nn.jit_analysis")
fvcore_handles = pytest.importorskip("fvcore.nn.jit_handles")


class Doubler(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def square(x: torch.Tensor) -> torch.Tensor:
    return x @ x


scripted_square = torch.jit.script(square)


class CustomCalls(nn.Module):
    """A scripted function call (traced as prim::CallFunction) and a custom autograd Function."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Doubler.apply(scripted_square(x * x))


def _const(n: int) -> Callable[[list[Any], list[Any]], int]:
    return lambda inputs, outputs: n


def _both(model: nn.Module, x: torch.Tensor, *handles: Any) -> tuple[Any, Any]:
    """fvcore's FlopCountAnalysis and opcount's with preset="fvcore", the same handles set, run."""
    theirs = fvcore_nn.FlopCountAnalysis(model, (x,)).set_op_handle(*handles)
    ours = FlopCountAnalysis(model, (x,), preset="fvcore").set_op_handle(*handles)
    theirs.total()  # fvcore answers unsupported_ops() only after an analysis ran
    return theirs, ours


def test_unsupported_custom_calls_carry_fvcore_names() -> None:
    theirs, ours = _both(CustomCalls(), torch.rand(5, 5))
    assert theirs.unsupported_ops() == {"aten::mul": 1, "prim::CallFunction": 1, "prim::PythonOp.Doubler": 1}
    assert ours.unsupported_ops() == theirs.unsupported_ops()


def test_handles_under_fvcore_names_apply_with_fvcore_keys() -> None:
    handles = ("prim::CallFunction", _const(125), "prim::PythonOp.Doubler", _const(7))
    theirs, ours = _both(CustomCalls(), torch.rand(5, 5), *handles)
    assert theirs.by_operator() == {"CallFunction": 125, "PythonOp.Doubler": 7}
    assert ours.by_module_and_operator() == theirs.by_module_and_operator()
    assert ours.unsupported_ops() == theirs.unsupported_ops() == {"aten::mul": 1}


def test_default_preset_takes_fvcore_names_and_keeps_its_own_keys() -> None:
    qualified = "prim::CallFunction." + square.__module__ + ".square"
    a = FlopCountAnalysis(CustomCalls(), torch.rand(5, 5))
    assert a.unsupported_ops() == {qualified: 1, "prim::PythonOp.Doubler": 1}
    a.set_op_handle("prim::CallFunction", _const(125), "prim::PythonOp.Doubler", _const(7))
    assert a.total() == 125 + 7 + 25  # and the 25 elementwise products of x * x
    assert a.by_operator() == {"CallFunction." + qualified.split(".", 1)[1]: 125, "Doubler": 7, "mul": 25}
    assert a.unsupported_ops() == {}


def test_a_function_s_own_name_wins_over_its_family() -> None:
    qualified = "prim::CallFunction." + square.__module__ + ".square"
    a = FlopCountAnalysis(CustomCalls(), torch.rand(5, 5), preset="fvcore")
    a.set_op_handle("prim::CallFunction", _const(125), qualified, _const(3))
    assert a.by_operator() == {"CallFunction": 3}
    a.set_op_handle(qualified, None)  # ignored by its own name: the family's handle does not apply
    assert a.by_operator() == {}
    assert a.unsupported_ops() == {"aten::mul": 1, "prim::PythonOp.Doubler": 1}


def test_ignoring_custom_calls_by_family_or_by_name() -> None:
    # fvcore ignores every custom Function under the node kind prim::PythonOp
    theirs, ours = _both(CustomCalls(), torch.rand(5, 5), "prim::PythonOp", None, "prim::CallFunction", None)
    assert ours.unsupported_ops() == theirs.unsupported_ops() == {"aten::mul": 1}
    # by its own name too (fvcore's set_op_handle documents this, its lookup misses it)
    ours.set_op_handle("prim::PythonOp", _const(1), "prim::PythonOp.Doubler", None)
    assert ours.total() == 0 and ours.unsupported_ops() == {"aten::mul": 1}


def test_dispatch_tracer_names_function_operators_by_the_same_class_name() -> None:
    # it sees inside both calls: x @ x is 5*5*5 MACs; the Function's x * 2 is under its prefix
    for preset, counted in (("default", {"matmul": 125, "mul": 25, "Doubler::mul": 25}), ("fvcore", {"matmul": 125})):
        a = FlopCountAnalysis(CustomCalls(), torch.rand(5, 5), preset=preset, tracer="dispatch")
        assert a.by_operator() == counted
    assert a.unsupported_ops() == {"aten::mul": 1, "Doubler::aten::mul": 1}


def test_family_handles_apply_to_memory_traffic() -> None:
    memory = opcount.MemoryTrafficAnalysis(CustomCalls(), torch.rand(5, 5))
    memory.set_op_handle("prim::CallFunction", lambda i, o: (100, 25), "prim::PythonOp", lambda i, o: (4, 4))
    assert memory.unsupported_ops() == {}
    by_op = memory.by_operator(kind="read")
    assert by_op["Doubler"] == 4 and by_op["CallFunction." + square.__module__ + ".square"] == 100


# ----- the base class's ignore list --------------------------------------------------------------


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(2, 2, 1)
        self.fc = nn.Linear(10, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x.reshape(-1, 2, 5))
        return 3 * self.fc(torch.flatten(x, 1)) + 1


def test_ignore_list_is_fvcore_s() -> None:
    assert set(FVCORE_IGNORED) == fvcore_jit._IGNORED_OPS


def test_bare_jit_analysis_reports_what_fvcore_reports() -> None:
    model, x = Nested().eval(), torch.randn(1, 10)
    linear = ("aten::linear", fvcore_handles.linear_flop_jit, "aten::addmm", fvcore_handles.addmm_flop_jit)
    theirs = fvcore_jit.JitModelAnalysis(model, (x,)).set_op_handle(*linear)
    ours = JitModelAnalysis(model, (x,)).set_op_handle(*linear)
    assert ours.by_module_and_operator() == theirs.by_module_and_operator()
    assert (
        ours.unsupported_ops() == theirs.unsupported_ops() == {"aten::_convolution": 1, "aten::mul": 1, "aten::add": 1}
    )
    ours.clear_op_handles()  # back to fvcore's list, not to nothing
    assert ours.unsupported_ops() == {"aten::_convolution": 1, "aten::linear": 1, "aten::mul": 1, "aten::add": 1}


# ----- flop_count and activation_count -----------------------------------------------------------


class ConvLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.bn(self.conv(x)).mean((2, 3))
        return torch.sigmoid(self.fc(x))


def test_flop_count_equals_fvcore_s() -> None:
    model, x = ConvLinear().eval(), torch.randn(2, 3, 8, 8)
    assert opcount.flop_count(model, (x,), preset="fvcore") == fvcore_nn.flop_count(model, (x,))
    extra = {"aten::sigmoid": _const(10_000), "aten::linear": _const(400_000)}
    gflops, unsupported = opcount.flop_count(model, (x,), extra, preset="fvcore")
    assert (gflops, unsupported) == fvcore_nn.flop_count(model, (x,), extra)
    assert gflops["sigmoid"] == 10_000 / 1e9 and gflops["linear"] == 400_000 / 1e9
    assert unsupported == {"aten::mean": 1}


def test_activation_count_equals_fvcore_s() -> None:
    model, x = ConvLinear().eval(), torch.randn(2, 3, 8, 8)
    assert opcount.activation_count(model, (x,)) == fvcore_nn.activation_count(model, (x,))
    extra = {"aten::_convolution": lambda inputs, outputs: Counter({"conv": 100})}
    mega, _ = opcount.activation_count(model, (x,), extra)
    assert mega == fvcore_nn.activation_count(model, (x,), extra)[0]
    assert mega["conv"] == 100 / 1e6


def test_flop_count_default_preset_counts_more() -> None:
    model, x = ConvLinear().eval(), torch.randn(2, 3, 8, 8)
    gflops, unsupported = opcount.flop_count(model, (x,))
    assert gflops["conv"] == 2 * 4 * 3 * 9 * 64 / 1e9  # batch * c_out * c_in * k*k * h*w
    assert "sigmoid" in gflops and "mean" in gflops and not unsupported


def test_flop_count_rejects_a_non_mapping() -> None:
    with pytest.raises(TypeError, match="supported_ops must map operator names"):
        opcount.flop_count(nn.Linear(2, 2), (torch.randn(1, 2),), ["aten::linear"])  # type: ignore[arg-type]


# ----- single operators, as fvcore's handles count them ------------------------------------------


class Apply(nn.Module):
    def __init__(self, fn: Callable[..., torch.Tensor], *args: Any) -> None:
        super().__init__()
        self.fn, self.args = fn, args

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.fn(*tensors, *self.args)


_VEC = torch.rand(2)

SINGLE_OPS: dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]] = {
    "batch_norm eval": (Apply(F.batch_norm, _VEC, _VEC, _VEC, _VEC), (torch.rand(2, 2, 2, 2),)),
    "batch_norm no affine": (Apply(F.batch_norm, _VEC, _VEC, None, None), (torch.rand(2, 2, 2, 2),)),
    "batch_norm training": (Apply(F.batch_norm, _VEC, _VEC, _VEC, _VEC, True), (torch.rand(2, 2, 2, 2),)),
    "group_norm": (Apply(F.group_norm, 2, _VEC, _VEC), (torch.rand(2, 2, 2, 2),)),
    "group_norm no affine": (Apply(F.group_norm, 2, None, None), (torch.rand(2, 2, 2, 2),)),
    "bilinear": (Apply(F.interpolate, None, 2, "bilinear", False), (torch.rand(2, 2, 2, 2),)),
    "einsum": (Apply(lambda a, b: torch.einsum("nc,nchw->hw", a, b)), (torch.rand(3, 4), torch.rand(3, 4, 2, 3))),
    "mm": (Apply(torch.mm), (torch.rand(3, 4), torch.rand(4, 5))),
    "matmul": (Apply(torch.matmul), (torch.rand(3, 4), torch.rand(4, 5))),
}


@pytest.mark.parametrize("name", SINGLE_OPS)
def test_single_operator_equals_fvcore_s(name: str) -> None:
    model, inputs = SINGLE_OPS[name]
    theirs = fvcore_nn.FlopCountAnalysis(model, inputs)
    theirs.unsupported_ops_warnings(False)
    ours = FlopCountAnalysis(model, inputs, preset="fvcore")
    assert ours.by_operator() == theirs.by_operator()
    assert ours.total() > 0


def test_activation_analysis_keeps_fvcore_s_ignore_list_after_clearing() -> None:
    a = ActivationCountAnalysis(Nested(), torch.randn(1, 10)).clear_op_handles()
    assert a.unsupported_ops() == {"aten::_convolution": 1, "aten::linear": 1, "aten::mul": 1, "aten::add": 1}


class StringPadding(nn.Module):
    """Convolutions with string padding, which torch runs as aten::_convolution_mode: fvcore has no
    handle for that operator and reports it unsupported."""

    def __init__(self) -> None:
        super().__init__()
        self.same = nn.Conv2d(3, 4, 3, padding="same", bias=False)  # [1, 4, 6, 6]
        self.mid = nn.Conv2d(4, 5, 3, padding=1, bias=False)  # [1, 5, 6, 6]
        self.valid = nn.Conv2d(5, 2, 3, padding="valid", bias=False)  # [1, 2, 4, 4]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.valid(self.mid(self.same(x)))


SAME, MID, VALID = 4 * 3 * 9 * 36, 5 * 4 * 9 * 36, 2 * 5 * 9 * 16  # multiply-adds, batch 1


@pytest.mark.parametrize(("tracer", "device"), [("jit", None), ("dispatch", None), ("dispatch", "meta")])
def test_string_padding_fvcore_preset_equals_fvcore_on_both_tracers(tracer: str, device: str | None) -> None:
    x = torch.randn(1, 3, 6, 6)
    theirs = fvcore_nn.FlopCountAnalysis(StringPadding(), x).unsupported_ops_warnings(False)
    ours = FlopCountAnalysis(StringPadding(), x, preset="fvcore", tracer=tracer, device=device)
    assert theirs.total() == ours.total() == MID  # fvcore counts only the int-padded convolution
    assert ours.unsupported_ops() == theirs.unsupported_ops() == {"aten::_convolution_mode": 2}
    assert ours.by_module() == theirs.by_module()
    acts = fvcore_nn.ActivationCountAnalysis(StringPadding(), x).unsupported_ops_warnings(False)
    our_acts = ActivationCountAnalysis(StringPadding(), x, tracer=tracer, device=device)
    assert our_acts.total() == acts.total() == 5 * 36
    assert our_acts.unsupported_ops() == acts.unsupported_ops()
    # the default preset counts every convolution, whatever its padding
    assert FlopCountAnalysis(StringPadding(), x, tracer=tracer, device=device).total() == SAME + MID + VALID


class FoldUnfold(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.fold(F.unfold(x, 3, padding=1, stride=2), (6, 6), 3, padding=1, stride=2)


@pytest.mark.parametrize(("tracer", "device"), [("jit", None), ("dispatch", None), ("dispatch", "meta")])
def test_fold_and_unfold_are_unsupported_as_in_fvcore(tracer: str, device: str | None) -> None:
    x = torch.randn(2, 4, 6, 6)
    theirs = fvcore_nn.FlopCountAnalysis(FoldUnfold(), x).unsupported_ops_warnings(False)
    ours = FlopCountAnalysis(FoldUnfold(), x, preset="fvcore", tracer=tracer, device=device)
    assert ours.total() == theirs.total() == 0
    assert ours.unsupported_ops() == theirs.unsupported_ops() == {"aten::col2im": 1, "aten::im2col": 1}
