"""A model edited between making an analysis and its first result is refused with an error
naming the modules that changed: the analysis takes the module tree when it is made and traces
on the first query, and a mix of the two gave the new layer's flops at the root, the new module
missing and the deleted one listed with stale parameters (dispatch), or a bare torch error (jit)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount import ActivationCountAnalysis, FlopCountAnalysis, MemoryTrafficAnalysis
from opcount.errors import OpcountValueError

TRACERS = [{"tracer": "jit"}, {"tracer": "dispatch"}, {"tracer": "dispatch", "device": "meta"}]


def _model() -> nn.Sequential:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU())


@pytest.mark.parametrize("options", TRACERS, ids=lambda o: "-".join(o.values()))
@pytest.mark.parametrize("cls", [FlopCountAnalysis, ActivationCountAnalysis, MemoryTrafficAnalysis])
def test_deleting_and_adding_a_layer_before_the_first_result_is_refused(cls: type, options: dict) -> None:
    model = _model()
    a = cls(model, torch.randn(2, 8), **options)
    del model[2]  # Sequential renumbers: the ReLU that was '3' is now '2'
    model.add_module("extra", nn.Linear(8, 3))
    with pytest.raises(OpcountValueError) as e:
        a.total()
    message = str(e.value)
    assert "removed '3'" in message and "added 'extra'" in message and "replaced '2'" in message


def test_replacing_a_submodule_deep_inside_is_named() -> None:
    model = nn.Sequential(nn.Sequential(nn.Linear(8, 8), nn.ReLU()))
    a = FlopCountAnalysis(model, torch.randn(2, 8), tracer="dispatch")
    model[0][0] = nn.Linear(8, 8)
    with pytest.raises(OpcountValueError, match=r"replaced '0\.0'"):
        a.by_module()


def test_a_copy_takes_the_model_as_it_is_now() -> None:
    model = _model()
    a = FlopCountAnalysis(model, torch.randn(2, 8))
    del model[2]
    model.add_module("extra", nn.Linear(8, 3))
    b = a.copy(new_model=model)
    # Linear(8->8) on [2, 8]: 128; ReLU on [2, 8]: 16, twice; Linear(8->3): 2*8*3 = 48.
    assert b.by_module() == {"": 128 + 16 + 16 + 48, "0": 128, "1": 16, "2": 16, "extra": 48}


def test_changes_after_the_first_result_leave_the_results() -> None:
    model = _model()
    a = FlopCountAnalysis(model, torch.randn(2, 8))
    before = a.by_module()
    model.add_module("extra", nn.Linear(8, 3))
    assert a.by_module() == before  # the trace taken is what the results describe


def test_parameters_rebound_with_another_shape_trace_as_they_are_now() -> None:
    # Parameters are read when the trace runs, not when the analysis is made: nothing to mix.
    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 4))
    a = FlopCountAnalysis(model, torch.randn(2, 8), tracer="dispatch")
    model[1].weight = nn.Parameter(torch.randn(6, 8))
    model[1].bias = nn.Parameter(torch.randn(6))
    assert a.by_module() == {"": 2 * 8 * 8 + 2 * 8 * 6, "0": 2 * 8 * 8, "1": 2 * 8 * 6}
