"""The caller's inputs and the model's state are as they were after an analysis, whatever the
forward wrote: inputs changed in place, buffers updated in place or rebound, buffers added or
deleted, parameters rebound or their flags changed. Every tracer, success and failure."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TraceError

TRACERS = [
    pytest.param({"tracer": "jit"}, id="jit"),
    pytest.param({"tracer": "dispatch"}, id="dispatch"),
    pytest.param({"tracer": "dispatch", "device": "meta"}, id="dispatch-meta"),
    pytest.param({"tracer": "dispatch", "mode": "train"}, id="dispatch-train"),
]


class Writes(nn.Module):
    """A forward that writes to everything it can reach. Its one cost the jit tracer keeps in
    every case: linear 2*3*3 = 18 (no bias)."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.fc = nn.Linear(3, 3, bias=False)
        self.register_buffer("ema", torch.zeros(3))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))
        self.register_buffer("old", torch.ones(2))
        self.unused = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor, extra: dict) -> torch.Tensor:
        x.mul_(2)  # the caller's tensor
        extra["more"][0].add_(1)  # one nested in a dict and a list
        self.ema = self.ema * 0.5 + x.mean(0)  # a buffer rebound
        self.steps.add_(1)  # a buffer updated in place, in eval too
        self.register_buffer("tmp", x.sum(0))  # a buffer added
        del self.old  # and one deleted
        self.fc.weight.data = self.fc.weight.data * 2  # a parameter rebound to new memory
        self.unused.requires_grad_(False)
        self.fc.weight.grad = torch.ones(3, 3)
        self.train(not self.training)
        y = self.fc(x)
        if self.fail:
            raise RuntimeError("failing after the writes")
        return y + extra["more"][0]


def _state(model: nn.Module) -> dict:
    return {
        "buffers": {k: (b, b.clone()) for k, b in model._buffers.items()},
        "persistent": set(model.state_dict()),
        "weight": (model.fc.weight, model.fc.weight.detach().clone(), model.fc.weight.data_ptr()),
        "training": [m.training for m in model.modules()],
    }


def _assert_as_before(model: nn.Module, before: dict) -> None:
    assert list(model._buffers) == list(before["buffers"])
    for name, (tensor, value) in before["buffers"].items():
        assert model._buffers[name] is tensor, name
        assert torch.equal(tensor, value), name
    assert set(model.state_dict()) == before["persistent"]
    weight, value, address = before["weight"]
    assert model.fc.weight is weight and weight.data_ptr() == address and torch.equal(weight, value)
    assert weight.grad is None and model.unused.requires_grad
    assert [m.training for m in model.modules()] == before["training"]


@pytest.mark.parametrize("options", TRACERS)
@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
def test_inputs_and_state_restored(options: dict, training: bool) -> None:
    model = Writes().train(training)
    before = _state(model)
    x, y = torch.ones(2, 3), torch.ones(2, 3)
    a = FlopCountAnalysis(model, (x, {"more": [y]}), **options)
    assert a.by_operator()["linear"] == 18
    if options.get("mode") == "train":
        assert a.by_operator()["mm"] == 3 * 2 * 3  # the weight's gradient, x^T @ dy; x needs none
    assert torch.equal(x, torch.ones(2, 3)) and torch.equal(y, torch.ones(2, 3))
    _assert_as_before(model, before)


@pytest.mark.parametrize("options", TRACERS)
def test_state_restored_after_a_failing_forward(options: dict) -> None:
    model = Writes(fail=True).train()
    before = _state(model)
    x, y = torch.ones(2, 3), torch.ones(2, 3)
    with pytest.raises(TraceError, match="failing after the writes"):
        FlopCountAnalysis(model, (x, {"more": [y]}), **options).total()
    assert torch.equal(x, torch.ones(2, 3)) and torch.equal(y, torch.ones(2, 3))
    _assert_as_before(model, before)


def test_in_place_operators_on_inputs_still_count() -> None:
    # the caller's tensor is restored, not withheld: mul_ runs on it, 2*3 elements
    x = torch.ones(2, 3)
    a = FlopCountAnalysis(Writes(), (x, {"more": [torch.ones(2, 3)]}))
    assert a.by_operator()["mul_"] == 6 and a.by_operator()["add_"] == 6


class Doubles(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + y  # y is x: the doubled values, as in a plain call


def test_an_input_passed_twice_stays_one_tensor() -> None:
    x = torch.ones(3)
    a = FlopCountAnalysis(Doubles(), (x, x), tracer="dispatch")
    assert a.by_operator() == {"mul_": 3, "add": 3}
    assert torch.equal(x, torch.ones(3))
    assert torch.equal(Doubles()(x.clone(), x.clone()), torch.full((3,), 3.0))


class Momentum(nn.Module):
    """A momentum encoder's update: the key weights moved toward the query's in place."""

    def __init__(self) -> None:
        super().__init__()
        self.query, self.key = nn.Linear(3, 3), nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            for k, q in zip(self.key.parameters(), self.query.parameters(), strict=True):
                k.mul_(0.9).add_(q, alpha=0.1)
        return self.query(x) + self.key(x)


def test_written_parameters_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    # Parameters' values are not copied (twice the model's memory): a write is reported instead.
    with caplog.at_level(logging.WARNING, logger="opcount"):
        FlopCountAnalysis(Momentum(), torch.ones(2, 3)).total()
    warned = [r.getMessage() for r in caplog.records if "in place" in r.getMessage()]
    assert len(warned) == 1 and "key.weight, key.bias" in warned[0], caplog.text


def test_a_model_on_meta_keeps_its_bindings() -> None:
    with torch.device("meta"):
        model = Writes().eval()
    buffers, weight = dict(model._buffers), model.fc.weight
    x = torch.empty(2, 3, device="meta")
    assert FlopCountAnalysis(model, (x, {"more": [torch.empty(2, 3, device="meta")]}), tracer="dispatch").total() > 0
    assert model._buffers == buffers and all(model._buffers[k] is b for k, b in buffers.items())
    assert model.fc.weight is weight and weight.is_meta and weight.requires_grad and not model.training


class Tagged(torch.Tensor):
    """A tensor subclass, as quantization libraries make weights."""


class Exotic(nn.Module):
    """State the copies leave alone: a subclass parameter and a sparse buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3, 3).as_subclass(Tagged))
        self.register_buffer("sparse", torch.eye(3).to_sparse())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.weight.as_subclass(torch.Tensor)) + self.sparse.to_dense()


@pytest.mark.parametrize("options", TRACERS[:2])
def test_subclass_and_sparse_state_is_left_alone(options: dict) -> None:
    model = Exotic()
    state = model.state_dict(keep_vars=True)
    assert FlopCountAnalysis(model, torch.ones(3, 3), **options).by_operator()["matmul"] == 3 * 3 * 3
    assert all(getattr(model, k) is v for k, v in state.items())
