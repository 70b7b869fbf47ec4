"""No silent wrong numbers: a handle's result that is not a count, a jit trace that would keep
no operator and a report depth that would show nothing are errors naming what was wrong."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, HandleError, TraceError, flop_count_table, spec_handle
from opcount import report as reports
from opcount.memory import MemoryTrafficAnalysis
from opcount.roofline import roofline


class Net(nn.Module):
    """fc: linear 2*4*3 = 24; relu on its 2*3 outputs = 6."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def _linear_counted_as(value: Any, fvcore_style: bool = False) -> FlopCountAnalysis:
    def handle(inputs: Any, outputs: Any) -> Any:
        return value

    a = FlopCountAnalysis(Net(), torch.randn(2, 4))
    return a.set_op_handle("aten::linear", handle if fvcore_style else spec_handle(handle))


BAD = [
    pytest.param(-5, id="negative-int"),  # was dropped: the linear vanished from the total
    pytest.param(-0.5, id="negative-float"),
    pytest.param(np.int64(-3), id="negative-numpy"),
    pytest.param(float("nan"), id="nan"),
    pytest.param(np.float32("nan"), id="numpy-nan"),
    pytest.param(float("inf"), id="inf"),
    pytest.param(np.float64("-inf"), id="numpy-minus-inf"),
    pytest.param(True, id="bool"),
    pytest.param(np.bool_(True), id="numpy-bool"),
    pytest.param(torch.tensor(-1), id="negative-tensor"),
    pytest.param(torch.tensor(float("nan")), id="nan-tensor"),
    pytest.param(torch.tensor(True), id="bool-tensor"),
    pytest.param(torch.tensor([1, 2]), id="1-d-tensor"),
    pytest.param(torch.tensor(1 + 2j), id="complex-tensor"),
    pytest.param(1 + 2j, id="complex"),
    pytest.param("24", id="string"),
    pytest.param(None, id="none"),
    pytest.param([24], id="list"),
    pytest.param(Counter({"linear": None}), id="none-in-counter"),
    pytest.param(Counter({"linear": -1}), id="negative-in-counter"),
    pytest.param({"linear": 24, "bias": float("inf")}, id="inf-in-dict"),
    pytest.param({"linear": "24"}, id="string-in-dict"),
]


@pytest.mark.parametrize("fvcore_style", [False, True], ids=["spec", "fvcore"])
@pytest.mark.parametrize("value", BAD)
def test_a_result_that_is_not_a_count_names_operator_module_and_shapes(value: Any, fvcore_style: bool) -> None:
    with pytest.raises(HandleError) as info:
        _linear_counted_as(value, fvcore_style).total()
    message = str(info.value)
    assert "aten::linear" in message and "module 'fc'" in message
    assert "[2, 4]:float32, [3, 4]:float32, [3]:float32" in message


GOOD = [
    pytest.param(24, 24, id="int"),
    pytest.param(0, 0, id="zero"),
    pytest.param(24.5, 24.5, id="float"),
    pytest.param(np.int64(24), 24, id="numpy-int"),
    pytest.param(np.float32(2.5), 2.5, id="numpy-float"),
    pytest.param(torch.tensor(24), 24, id="int-tensor"),
    pytest.param(torch.tensor(2.5, dtype=torch.float64), 2.5, id="float-tensor"),
]


@pytest.mark.parametrize("value, expected", GOOD)
def test_counts_of_any_numeric_type_become_plain_numbers(value: Any, expected: float) -> None:
    a = _linear_counted_as(value)
    assert a.total() == expected + 6  # relu: 6
    got = a.by_operator().get("linear", 0)
    assert got == expected and type(got) in (int, float)
    assert all(type(v) in (int, float) for _, c in a.per_call() if c for v in c.values())


def test_a_counter_of_numpy_counts_becomes_plain_numbers() -> None:
    a = _linear_counted_as(Counter({"mm": np.int32(20), "add": np.float64(4.0)}))
    assert a.by_operator() == {"mm": 20, "add": 4.0, "relu": 6}
    assert type(a.by_operator()["mm"]) is int and type(a.by_operator()["add"]) is float


class ReturnsNothing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> None:
        self.fc(x)


class ReturnsGenerator(ReturnsNothing):
    def forward(self, x: torch.Tensor) -> Any:  # type: ignore[override]
        y = self.fc(x)
        return (t for t in (y,))


def test_jit_output_without_tensor_is_an_error_not_a_zero() -> None:
    # Before: total 0 and only a "never called" warning, as jit tracing drops every operator no
    # output depends on.
    with pytest.raises(TraceError, match=r"\(ReturnsNothing\) holds no tensor \(it returned None\)") as e:
        FlopCountAnalysis(ReturnsNothing(), torch.randn(2, 4)).total()
    assert "tracer='dispatch'" in str(e.value)


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_a_generator_output_is_an_error_on_both_tracers(tracer: str) -> None:
    # a generator's body runs only when iterated, so what it would run is not in the trace (a
    # forward written as a generator function counted 0 on the dispatch tracer): refused alike,
    # tests/tracers/test_control_flow.py has the other forms
    with pytest.raises(TraceError, match=r"\(ReturnsGenerator\) returned a generator, whose body runs only when"):
        FlopCountAnalysis(ReturnsGenerator(), torch.randn(2, 4), tracer=tracer).total()


def test_dispatch_counts_a_model_without_tensor_outputs() -> None:
    # The suggested way out: the dispatch tracer records every operator that runs.
    a = FlopCountAnalysis(ReturnsNothing(), torch.randn(2, 4), tracer="dispatch")
    assert a.by_operator() == {"linear": 24}


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> Any:
        return {"logits": self.fc(x), "note": "text", "nothing": None}


def test_an_output_with_some_tensors_still_works() -> None:
    assert FlopCountAnalysis(Mixed(), torch.randn(2, 4)).by_operator() == {"linear": 24}


BAD_DEPTHS = [-1, 1.5, "2", True, None]


@pytest.mark.parametrize("depth", BAD_DEPTHS)
def test_report_depth_must_be_a_level(depth: Any) -> None:
    a = FlopCountAnalysis(Net(), torch.randn(2, 4))
    for render in (
        lambda: flop_count_table(a, max_depth=depth),
        lambda: reports.module_table(a, max_depth=depth),
        lambda: reports.tree_str(a, max_depth=depth),
        lambda: reports.parameter_count_table(a.model, max_depth=depth),
    ):
        with pytest.raises(ValueError, match=rf"max_depth must be an int >= 0 .*got {depth!r}"):
            render()


@pytest.mark.parametrize("depth", [d for d in BAD_DEPTHS if d is not None])
def test_optional_report_depth_must_be_a_level_or_none(depth: Any) -> None:
    a = FlopCountAnalysis(Net(), torch.randn(2, 4))
    for render in (
        lambda: reports.operator_table(a, max_depth=depth),
        lambda: reports.to_dict(a, max_depth=depth),
        lambda: reports.to_json(a, max_depth=depth),
        lambda: reports.to_csv(a, max_depth=depth),
        lambda: reports.to_markdown(a, max_depth=depth),
        lambda: roofline(Net(), torch.randn(2, 4), "h100-sxm").table(max_depth=depth),
    ):
        with pytest.raises(ValueError, match=rf"max_depth must be an int >= 0 or None.*got {depth!r}"):
            render()


def test_depth_zero_and_none_still_report() -> None:
    a = FlopCountAnalysis(Net(), torch.randn(2, 4))
    assert flop_count_table(a, max_depth=0).splitlines()[2].split("|")[1].strip() == "model"
    assert "fc" in reports.operator_table(a, max_depth=None)


@pytest.mark.parametrize("pair", [(-1, 5), (3, float("nan")), (float("inf"), 0), (True, 5), (3, "5"), (None, 1)])
def test_a_memory_handle_pair_that_is_not_bytes_names_the_site(pair: tuple[Any, Any]) -> None:
    a = MemoryTrafficAnalysis(Net(), torch.randn(2, 4))
    a.set_op_handle("aten::relu", spec_handle(lambda inputs, outputs: pair))
    with pytest.raises(HandleError, match=r"aten::relu in module '' on inputs \(\[2, 3\]:float32\)"):
        a.total()


def test_a_memory_handle_pair_of_numpy_and_tensor_counts() -> None:
    a = MemoryTrafficAnalysis(Net(), torch.randn(2, 4))
    a.set_op_handle("aten::relu", spec_handle(lambda inputs, outputs: (np.int64(3), torch.tensor(5))))
    assert a.by_operator()["relu"] == 3 + 5
