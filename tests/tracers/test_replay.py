"""Leaf module calls replayed from their records (opcount/tracers/replay.py): a replayed pass records
exactly what running every module records (operators, shapes, scopes and value ids), and a call
runs whenever its key or records cannot capture it. The reference is the same pass with replay
switched off, and torch's real tensors where values matter."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, MemoryTrafficAnalysis
from opcount.ir import ListSpec, OpCall, TensorSpec
from opcount.scopes import ModuleTree
from opcount.tracers import replay, trace_dispatch
from opcount.tracers.shapes import ShapeRunner
from tests.fixtures import zoo
from tests.fixtures.optional import torchvision


class Assorted(nn.Module):
    """Leaf modules with buffers, no parameters, identity outputs, in-place outputs, a tensor passed
    twice, keyword arguments, a tuple output and attributes that are no plain values (LSTM)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.act = nn.ReLU(inplace=True)
        self.drop = nn.Dropout(0.1)
        self.keep = nn.Identity()
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.bilinear = nn.Bilinear(8, 8, 4)
        self.lstm = nn.LSTM(4, 4, batch_first=True)
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True)
        self.norm = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.keep(self.drop(self.act(self.bn(self.conv(x)))))
        y = self.act(self.bn(self.conv(x)))  # the same calls again: replayed
        v = self.pool(y).flatten(1)
        b = self.bilinear(v, v) + self.bilinear(v, input2=v.clone())
        seq, _ = self.lstm(b.unsqueeze(1).expand(-1, 3, -1))
        out, _ = self.attn(seq, seq, seq, need_weights=False)
        return self.norm(out).sum() + y.mean()


class _First(nn.Module):
    def forward(self, pair: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return pair[0] * 2


def _chained() -> nn.Module:
    """Sequentials of leaves that return their argument, a new
    tensor or a tuple, with children that are not replayed: a module of the model's own, a
    nested Sequential, a module called twice."""
    shared = nn.Linear(8, 8)
    return nn.Sequential(
        shared,
        nn.ReLU(inplace=True),
        nn.Identity(),
        nn.Dropout(0.1),
        shared,
        nn.Sequential(nn.Linear(8, 8), nn.GELU()),
        nn.Unflatten(1, (2, 4)),
        nn.MaxPool1d(2, return_indices=True),
        _First(),
        nn.Flatten(),
        nn.Linear(4, 8),
        nn.LayerNorm(8),
        nn.Sequential(),
        nn.Softmax(-1),
    ).eval()


def _mlp(blocks: int) -> nn.Module:
    return nn.Sequential(*[m for _ in range(blocks) for m in (nn.Linear(16, 16), nn.GELU())]).eval()


def _records(calls: tuple[OpCall, ...]) -> list[tuple]:
    """Each call with the ids and parameter names of its tensors, which record equality ignores."""

    def ids(specs: tuple) -> tuple:
        flat: list = []
        for s in specs:
            items = s.items if isinstance(s, ListSpec) else (s,)
            flat += [(t.id, t.param) for t in items if isinstance(t, TensorSpec)]
        return tuple(flat)

    return [(c, c.within, ids(c.inputs), ids(c.outputs)) for c in calls]


def _meta_calls(model: nn.Module, inputs: object) -> tuple[OpCall, ...]:
    return trace_dispatch(model, inputs, None, ModuleTree(model), device="meta").calls


@pytest.fixture(autouse=True)
def fresh_templates() -> None:
    replay._TEMPLATES.clear()


def _models() -> dict[str, tuple[nn.Module, object]]:
    return {
        "assorted": (Assorted().eval(), torch.randn(2, 3, 8, 8)),
        "mlp": (_mlp(6), torch.randn(4, 16)),
        "chained": (_chained(), torch.randn(3, 8)),
        "resnet18": (torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 64, 64)),
        "mobilenet_v3_small": (torchvision.models.mobilenet_v3_small(weights=None).eval(), torch.randn(1, 3, 64, 64)),
    }


@pytest.mark.parametrize("name", ["assorted", "mlp", "chained", "resnet18", "mobilenet_v3_small", "gpt2", "t5"])
def test_replayed_records_equal_the_records_of_running_every_module(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if name in ("gpt2", "t5"):
        pytest.importorskip("transformers")
        model, inputs = zoo.TRANSFORMERS[name]()
    else:
        model, inputs = _models()[name]
    with monkeypatch.context() as m:
        m.setattr(replay.Replayer, "adopt", lambda self, module, name: replay.RUN)
        expected = _records(_meta_calls(model, inputs))
    # replay on: the first pass learns, the second replays what it learned
    assert _records(_meta_calls(model, inputs)) == expected
    assert len(replay._TEMPLATES[(torch.device("cpu"), torch.float32)]) > 0
    assert _records(_meta_calls(model, inputs)) == expected


@pytest.mark.parametrize("name", ["assorted", "chained"])
def test_results_equal_real_tensors(name: str) -> None:
    # Value ids steer the memory traffic (what is read twice, what is written in place).
    model, x = _models()[name]
    for analysis in (FlopCountAnalysis, MemoryTrafficAnalysis):
        real = analysis(model, x, tracer="dispatch").by_module_and_operator()
        for _ in range(2):  # learning, then replaying
            assert analysis(model, x, tracer="dispatch", device="meta").by_module_and_operator() == real


def test_a_replayed_call_runs_no_operator(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    run = ShapeRunner.run

    def counted(self: ShapeRunner, func: object, *args: object, **kwargs: object) -> object:
        ran.append(str(func))
        return run(self, func, *args, **kwargs)

    monkeypatch.setattr(ShapeRunner, "run", counted)
    model, x = _mlp(6), torch.randn(4, 16)
    # 6 x (16*16 MACs + 16 bias adds per row) + 6 GELUs, 4 rows: replayed calls count in full
    flops = FlopCountAnalysis(model, x, tracer="dispatch", device="meta").by_operator()
    assert flops["linear"] == 6 * 4 * 16 * 16
    assert ran.count("aten.linear.default") == 1 and ran.count("aten.gelu.default") == 1
    ran.clear()
    assert FlopCountAnalysis(model, x, tracer="dispatch", device="meta").by_operator() == flops
    assert ran == []  # every call replayed from the first analysis's templates


def test_an_attribute_changed_between_calls_is_a_new_key() -> None:
    class Resamples(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.up = nn.Upsample(scale_factor=2.0)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a = self.up(x)
            self.up.scale_factor = 3.0  # a configuration set by the caller, call by call
            b = self.up(x)
            self.up.scale_factor = 2.0
            return a.sum() + b.sum()

    model, x = Resamples(), torch.randn(1, 2, 4, 4)
    shapes = [c.outputs[0].shape for c in _meta_calls(model, x) if c.kind == "aten::upsample_nearest2d"]
    assert shapes == [(1, 2, 8, 8), (1, 2, 12, 12)]


def test_a_module_changed_between_analyses_is_a_new_key() -> None:
    model, x = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval(), torch.randn(2, 4)
    assert [c.kind for c in _meta_calls(model, x)] == ["aten::linear", "aten::relu"]
    model[1].inplace = True
    assert [c.kind for c in _meta_calls(model, x)] == ["aten::linear", "aten::relu_"]


def test_what_a_template_cannot_express_runs() -> None:
    class ReadsAGlobal(nn.Module):  # not torch.nn's own forward: never replayed
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    table = {"lstm": nn.LSTM(4, 4), "custom": ReadsAGlobal(), "parent": nn.Sequential(nn.ReLU())}
    assert not replay.replayable(table["custom"]) and not replay.replayable(table["parent"])
    lstm = table["lstm"].eval()
    x = torch.randn(3, 1, 4)
    real = FlopCountAnalysis(lstm, x, tracer="dispatch").by_operator()
    for _ in range(2):
        assert FlopCountAnalysis(lstm, x, tracer="dispatch", device="meta").by_operator() == real
    # its weights are held in a list attribute: no key, so no template
    assert replay._TEMPLATES.get((torch.device("cpu"), torch.float32), {}) == {}


def test_hooks_added_during_the_pass_run() -> None:
    class HooksItsChild(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.fc(x)
            handle = self.fc.register_forward_hook(lambda m, i, o: o * 2)
            try:
                return self.fc(y)  # the hook doubles the output: one mul more
            finally:
                handle.remove()

    model, x = HooksItsChild().eval(), torch.randn(2, 4)
    expected = FlopCountAnalysis(model, x, tracer="dispatch").by_module_and_operator()
    assert expected[""]["mul"] == 8
    assert FlopCountAnalysis(model, x, tracer="dispatch", device="meta").by_module_and_operator() == expected


def test_hooks_added_during_the_pass_run_in_a_sequential() -> None:
    class HooksInItsSequential(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.seq = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.seq(x)
            handles = [
                self.seq[2].register_forward_hook(lambda m, i, o: o * 2),  # one mul more
                self.seq.register_forward_pre_hook(lambda m, i: (i[0] + 1,)),
            ]  # one add more
            try:
                return self.seq(y)
            finally:
                for h in handles:
                    h.remove()

    model, x = HooksInItsSequential().eval(), torch.randn(2, 4)
    expected = FlopCountAnalysis(model, x, tracer="dispatch").by_module_and_operator()
    assert expected[""]["mul"] == 8 and expected[""]["add"] == 8
    for _ in range(2):
        assert FlopCountAnalysis(model, x, tracer="dispatch", device="meta").by_module_and_operator() == expected


def test_global_hooks_added_during_the_pass_run() -> None:
    class HooksEveryModule(nn.Module):
        """Registers a global forward hook halfway through its forward: the Linear calls after it
        would otherwise be replayed from the first call's template."""

        def __init__(self) -> None:
            super().__init__()
            self.first, self.second, self.third = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
            self.seen: list[nn.Module] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.first(x)
            handle = nn.modules.module.register_module_forward_hook(lambda m, i, o: self.seen.append(m))
            try:
                return self.third(self.second(y))
            finally:
                handle.remove()

    model, x = HooksEveryModule().eval(), torch.randn(2, 4)
    expected = FlopCountAnalysis(model, x, tracer="dispatch").by_module_and_operator()
    assert model.seen == [model.second, model.third]
    for _ in range(2):  # the second analysis finds the template learned by the first
        model.seen.clear()
        assert FlopCountAnalysis(model, x, tracer="dispatch", device="meta").by_module_and_operator() == expected
        assert model.seen == [model.second, model.third]
