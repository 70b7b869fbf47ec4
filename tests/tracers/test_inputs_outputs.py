"""Inputs and outputs of any structure; the model is left exactly as it was, even on failure."""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TraceError

pytestmark = pytest.mark.smoke  # also run on the oldest supported torch (scripts/smoke_torch213.sh)


class TwoArgs(nn.Module):
    """fc 2*4*3 = 24 on x; scale is a Python constant; ``extra`` a keyword tensor through fc again."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x, scale=1.0, extra=None):
        y = self.fc(x) * scale
        return y if extra is None else (y, self.fc(extra))


def test_tuple_of_arguments_and_constants() -> None:
    a = FlopCountAnalysis(TwoArgs(), (torch.randn(2, 4), 0.5))
    assert a.by_operator() == {"linear": 24, "mul": 2 * 3}  # the scale multiplies each output once


def test_keyword_arguments() -> None:
    a = FlopCountAnalysis(TwoArgs(), (torch.randn(2, 4),), kwargs={"extra": torch.randn(5, 4)})
    assert a.total("fc") == 24 + 5 * 4 * 3
    assert a.by_operator() == {"linear": 24 + 5 * 4 * 3, "mul": 2 * 3}


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, batch):
        images, meta = batch["images"], batch["meta"]
        return [self.fc(img) for img in images] if meta["flag"] else []


def test_nested_dicts_lists_and_constants() -> None:
    batch = {"images": [torch.randn(1, 4), torch.randn(3, 4)], "meta": {"flag": True, "name": "x"}}
    assert FlopCountAnalysis(Nested(), batch).total() == (1 + 3) * 4 * 2


Point = collections.namedtuple("Point", "a b")


@dataclasses.dataclass
class Out:
    logits: torch.Tensor
    label: str


class Cache:
    def __init__(self, t: torch.Tensor) -> None:
        self.layers = [{"k": t, "v": t}]


class RichOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        y = self.fc(x)
        return {"p": Point(y, 3), "o": Out(y, "s"), "c": Cache(y), "n": None}


def test_outputs_of_any_structure() -> None:
    assert FlopCountAnalysis(RichOutputs(), torch.randn(2, 4)).total() == 2 * 4 * 4


def test_list_input_is_one_argument() -> None:
    class TakesList(nn.Module):
        def forward(self, images):
            return torch.stack([i.sum() for i in images])

    a = FlopCountAnalysis(TakesList(), [torch.randn(3, 2), torch.randn(3, 2)], preset="fvcore")
    assert a.total() == 0 and a.unsupported_ops() == {"aten::sum": 2}


def test_invalid_inputs_raise_type_error() -> None:
    with pytest.raises(TypeError, match="numpy"):
        FlopCountAnalysis(TwoArgs(), (np.zeros((2, 4)),)).total()
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        FlopCountAnalysis("resnet50", torch.randn(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="kwargs"):
        FlopCountAnalysis(TwoArgs(), torch.randn(2, 4), kwargs=[1])  # type: ignore[arg-type]


class Fails(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Linear(5, 2))

    def forward(self, x):
        return self.body(x)


_MODULE_CALL = nn.Module.__call__


def _hooks(model: nn.Module) -> int:
    """Hooks and overrides (the tracers' scope marks) left on the model or on nn.Module."""
    overrides = ("_slow_forward", "_compiled_call_impl", "forward")
    left = sum(
        len(m._forward_hooks) + len(m._forward_pre_hooks) + sum(k in vars(m) for k in overrides)
        for m in model.modules()
    )
    return left + (nn.Module.__call__ is not _MODULE_CALL)


def test_trace_failure_names_the_module_and_leaves_the_model_unchanged() -> None:
    model = Fails().train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(TraceError, match=r"module 'body\.2' \(Linear\)") as info:
        FlopCountAnalysis(model, torch.randn(3, 4)).total()
    assert "shapes cannot be multiplied" in str(info.value)
    assert _hooks(model) == 0
    assert model.training and all(m.training for m in model.modules())
    for k, v in model.state_dict().items():
        assert torch.equal(v, state[k]), k  # batch norm running stats restored


def test_successful_analysis_leaves_the_model_unchanged() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    a = FlopCountAnalysis(model, torch.randn(3, 4))
    assert a.total() == 3 * 4 * 4 + 3 * 4 * 5  # batch norm in training: 5 per element
    assert _hooks(model) == 0 and model.training
    assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


def test_queries_on_unknown_module_name() -> None:
    a = FlopCountAnalysis(TwoArgs(), torch.randn(2, 4))
    with pytest.raises(KeyError, match="no module named 'fc2'"):
        a.total("fc2")
