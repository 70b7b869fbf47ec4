"""Analyses beside other threads: overlapping analyses give the sequential numbers, the patched
``nn.Module.__call__`` and ``Function.apply`` are torch's own afterwards, and work in other
threads is never attributed to an analysis. The overlaps are forced with events inside the
models' forwards (the waits' timeouts only turn a hang into a failure). Numbers worked by hand
(1 MAC = 1 flop): Linear(8, 16) and Linear(16, 8) on one row of 8 are 8 * 16 = 128 flops each.
"""

from __future__ import annotations

import re
import threading
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
from torch import nn
from torch.autograd import Function

from opcount import FlopCountAnalysis, TraceError
from opcount.tracers import patching

WAIT = 60.0  # seconds: a deadlock guard, never reached when the code is right
EXPECTED = {"": 256, "pre": 128, "post": 128}

TRACERS = {
    "jit": {},
    "dispatch": {"tracer": "dispatch"},
    "meta": {"tracer": "dispatch", "device": "meta"},
}


class PrePost(nn.Module):
    """Two linear layers with a call between them, where the tests make threads meet."""

    def __init__(self, between: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self.pre = nn.Linear(8, 16, bias=False)
        self.post = nn.Linear(16, 8, bias=False)
        self.between = between

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        self.between()
        return self.post(x)


class Double(Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, between: Callable[[], None]) -> torch.Tensor:
        between()
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * 2, None


def _wait(event: threading.Event) -> None:
    assert event.wait(WAIT), "the other thread never got there"


def _by_module(model: nn.Module, **options: Any) -> dict[str, int]:
    flops = FlopCountAnalysis(model, torch.randn(1, 8), **options)
    return {name: n for name, n in flops.by_module().items() if name in EXPECTED}


class _SpyLock:
    """The patch lock, setting ``blocked`` when a thread has to wait for it."""

    def __init__(self, lock: Any, blocked: threading.Event) -> None:
        self._lock, self._blocked = lock, blocked

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        if self._lock.acquire(blocking=False):
            return True
        self._blocked.set()
        return bool(self._lock.acquire(blocking, timeout)) if blocking else False

    def release(self) -> None:
        self._lock.release()


class _Worker(threading.Thread):
    """Runs ``work`` and keeps its result or its exception."""

    def __init__(self, work: Callable[[], Any]) -> None:
        super().__init__(daemon=True)
        self._work, self.result, self.error = work, None, None

    def run(self) -> None:
        try:
            self.result = self._work()
        except BaseException as e:  # re-raised by value()
            self.error = e

    def value(self) -> Any:
        self.join(WAIT)
        assert not self.is_alive(), "the worker thread hangs"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def originals() -> Iterator[tuple[Any, Any]]:
    """torch's own ``nn.Module.__call__`` and ``Function.apply``; checked (and put back) afterwards."""
    call, apply = nn.Module.__dict__["__call__"], Function.__dict__["apply"]
    yield call, apply
    left = nn.Module.__dict__["__call__"], Function.__dict__["apply"]
    nn.Module.__call__, Function.apply = call, apply  # type: ignore[method-assign]
    assert left == (call, apply), "a patch was left in place"


def _scope_names(model: nn.Module) -> set[str]:
    with warnings.catch_warnings():  # torch.jit.trace is the check here; torch >= 2.10 deprecates it
        warnings.filterwarnings("ignore", "`torch.jit.trace", FutureWarning)
        graph = torch.jit.trace(model, torch.randn(1, 8)).inlined_graph
    return {node.scopeName() for node in graph.nodes() if node.kind() == "aten::linear"}


@pytest.mark.parametrize("tracer_b", list(TRACERS))
@pytest.mark.parametrize("tracer_a", list(TRACERS))
def test_overlapping_analyses_give_the_sequential_numbers(
    tracer_a: str, tracer_b: str, originals: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A's forward stops between its layers until B has arrived: B's forward started, or B waits
    # for A's patches to go. B's forward stops there too until A's analysis has returned (the
    # order in which an unguarded patch of B's outlives A's restore).
    b_arrived, a_between, a_done = threading.Event(), threading.Event(), threading.Event()
    monkeypatch.setattr(patching, "_LOCK", _SpyLock(patching._LOCK, b_arrived))
    filters = list(warnings.filters)  # each analysis filters the tracer's warnings for its trace

    def a_meets() -> None:
        a_between.set()
        _wait(b_arrived)

    def b_meets() -> None:
        b_arrived.set()
        _wait(a_done)

    def analysis_a() -> dict[str, int]:
        try:
            return _by_module(PrePost(a_meets), **TRACERS[tracer_a])
        finally:
            a_done.set()

    worker = _Worker(analysis_a)
    worker.start()
    _wait(a_between)
    model_b = PrePost(b_meets)
    numbers_b = _by_module(model_b, **TRACERS[tracer_b])
    assert worker.value() == EXPECTED
    assert numbers_b == EXPECTED
    assert (nn.Module.__dict__["__call__"], Function.__dict__["apply"]) == originals
    assert warnings.filters == filters
    # a later torch.jit.trace of the same model still records its module scopes
    model_b.between = lambda: None
    assert _scope_names(model_b) == {"__module.pre", "__module.post"}


@pytest.mark.parametrize("tracer", list(TRACERS))
def test_the_analyzed_model_run_by_another_thread_is_named(tracer: str, originals: tuple[Any, Any]) -> None:
    # The other thread runs the analyzed model itself while the analysis is inside its forward,
    # and is not held up by the analysis (it finishes before the analysis goes on). Its work is
    # not the analysis's and is never recorded; the analysis fails naming it, as the docs say no
    # other thread may run the analyzed model meanwhile (it may see the analysis's stand-ins).
    analyzing, other_done = threading.Event(), threading.Event()
    main = threading.get_ident()

    def meets() -> None:
        if threading.get_ident() == main:
            analyzing.set()
            _wait(other_done)

    model = PrePost(meets)

    def plain_forward() -> torch.Tensor:
        _wait(analyzing)
        try:
            with torch.no_grad():
                return model(torch.ones(3, 8))
        finally:
            other_done.set()

    worker = _Worker(plain_forward)
    worker.start()
    with pytest.raises(
        TraceError, match=r"the model itself ran in another thread .*and 2 more of its modules \(pre, post\)"
    ):
        _by_module(model, **TRACERS[tracer])
    assert worker.value().shape == (3, 8)


@pytest.mark.parametrize("tracer", ["dispatch", "meta"])
def test_a_custom_function_in_another_thread_does_not_rename_the_models_operators(
    tracer: str, originals: tuple[Any, Any]
) -> None:
    # The Function is called in the other thread once the analysis is inside the model's forward,
    # and is still running while the analysis records the model's `post`.
    analyzing, inside, analysis_done = threading.Event(), threading.Event(), threading.Event()

    def meets() -> None:
        analyzing.set()
        _wait(inside)

    def in_function() -> None:
        inside.set()
        _wait(analysis_done)

    def run_function() -> torch.Tensor:
        _wait(analyzing)
        return Double.apply(torch.ones(2), in_function)

    worker = _Worker(run_function)
    worker.start()
    try:
        flops = FlopCountAnalysis(PrePost(meets), torch.randn(1, 8), **TRACERS[tracer])
        by_operator = dict(flops.by_operator())
    finally:
        analysis_done.set()
    assert torch.equal(worker.value(), torch.full((2,), 2.0))
    assert by_operator == {"linear": 256}


def test_a_custom_function_in_the_analyzed_thread_is_still_named(originals: tuple[Any, Any]) -> None:
    class Doubling(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.mm(Double.apply(x, lambda: None), x.t())

    flops = FlopCountAnalysis(Doubling(), torch.randn(4, 8), tracer="dispatch")
    # [4, 4] = mm([4, 8], [8, 4]): 4 * 8 * 4; the Function's own multiply has no flop formula
    assert flops.by_operator()["mm"] == 128


@pytest.mark.parametrize("tracer", list(TRACERS))
def test_a_failing_forward_leaves_nothing_patched(tracer: str, originals: tuple[Any, Any]) -> None:
    def fails() -> None:
        raise ValueError("stop here")

    hooked = PrePost(fails)
    hooked.post.register_forward_hook(lambda *a: None)  # the jit tracer patches this one per instance
    with pytest.raises(TraceError, match="stop here"):
        FlopCountAnalysis(hooked, torch.randn(1, 8), **TRACERS[tracer]).total()
    for module in hooked.modules():
        assert "_slow_forward" not in module.__dict__ and "forward" not in module.__dict__
    # and the next analysis in this process is right
    assert _by_module(PrePost(), **TRACERS[tracer]) == EXPECTED


@pytest.mark.parametrize("tracer", list(TRACERS))
def test_a_call_replaced_by_the_users_code_during_the_analysis_is_kept(tracer: str, originals: tuple[Any, Any]) -> None:
    torch_call = originals[0]
    calls: list[str] = []

    def users_call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
        calls.append(type(module).__name__)
        return torch_call(module, *args, **kwargs)

    def replace() -> None:
        nn.Module.__call__ = users_call  # type: ignore[method-assign]

    FlopCountAnalysis(PrePost(replace), torch.randn(1, 8), **TRACERS[tracer]).total()
    assert nn.Module.__dict__["__call__"] is users_call
    nn.Linear(2, 2)(torch.ones(2))
    assert calls[-1] == "Linear"
    nn.Module.__call__ = torch_call  # type: ignore[method-assign]


@pytest.mark.parametrize("tracer", ["dispatch", "meta"])
def test_an_analysis_inside_an_analysed_forward_nests(tracer: str, originals: tuple[Any, Any]) -> None:
    # The lock is re-entrant: an analysis started by a model's forward, in the same thread,
    # runs (here on another model) instead of waiting for itself. (Inside a jit trace, torch's
    # tracer would record the inner analysis's own arithmetic.)
    inner: dict[str, int] = {}

    def analyze_another() -> None:
        if not inner:
            inner.update(_by_module(PrePost(), **TRACERS["meta"]))

    _by_module(PrePost(analyze_another), **TRACERS[tracer])
    assert inner == EXPECTED


# ----- work of the analyzed forward in other threads ---------------------------------------------


class Pooled(nn.Module):
    """17 Linear(4, 4, bias=False) layers: the first in the forward's own thread, the other 16 mapped
    over a thread pool. Whole: 17 x 16 = 272 multiply-adds on one row of 4; the forward's thread
    alone runs 16 (what the analysis reported, with a warning that called the others unused)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4, bias=False) for _ in range(17))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers[0](x)
        with ThreadPoolExecutor(2) as pool:
            outs = list(pool.map(lambda layer: layer(x), self.layers[1:]))
        return torch.stack(outs).sum(0).detach()


@pytest.mark.parametrize("tracer", list(TRACERS))
def test_a_forward_that_runs_its_layers_in_a_thread_pool_is_refused_naming_them(
    tracer: str, originals: tuple[Any, Any]
) -> None:
    with pytest.raises(TraceError) as e:
        FlopCountAnalysis(Pooled(), torch.ones(1, 4), **TRACERS[tracer]).total()
    message = str(e.value)
    assert re.search(r"module 'layers\.\d+' \(Linear\) ran in another thread \('ThreadPoolExecutor-", message)
    assert "missing from the counts" in message
    if tracer != "meta":  # on meta the pool's first calls fail (shape-only tensors have no values) and map stops
        assert re.search(r"and 15 more of its modules \(layers\.\d+, ", message)


# ----- an analysis started from a thread the analyzed forward waits for ---------------------------


def _analysis_elsewhere() -> float:
    return FlopCountAnalysis(PrePost(), torch.ones(1, 8), tracer="dispatch").total()


class Joins(nn.Module):
    """Starts an analysis in a thread and waits for it, in one of the ways Python offers."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8, bias=False)
        self.how = how
        self.inner: BaseException | float | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "join":
            worker = _Worker(_analysis_elsewhere)
            worker.start()
            worker.join()
            self.inner = worker.error or worker.result
        elif self.how == "result":
            with ThreadPoolExecutor(1) as pool:
                self.inner = pool.submit(_analysis_elsewhere).exception()
        elif self.how == "map":
            with ThreadPoolExecutor(1) as pool:
                try:
                    list(pool.map(lambda _: _analysis_elsewhere(), [0]))
                except TraceError as e:
                    self.inner = e
        else:  # "event": a wait no thread can be matched to, given up after PATIENCE
            done = threading.Event()
            worker = _Worker(lambda: (_analysis_elsewhere(), done.set()))
            worker.start()
            # set only if the analysis ran, which it cannot while this forward holds the lock
            while not done.wait(0.05) and worker.is_alive():
                pass
            self.inner = worker.error
        return self.fc(x)


@pytest.mark.parametrize("how", ["join", "result", "map", "event"])
def test_an_analysis_in_a_thread_the_forward_waits_for_fails_instead_of_hanging(
    how: str, originals: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: the thread waited for the patch lock, which the forward held while it waited for
    # the thread: both hung. Run in a worker, so that a hang fails the test after WAIT seconds.
    monkeypatch.setattr(patching, "PATIENCE", 0.5)
    model = Joins(how)
    worker = _Worker(lambda: FlopCountAnalysis(model, torch.ones(1, 8), tracer="dispatch").total())
    worker.start()
    assert worker.value() == 64  # the outer analysis goes on: [1, 8] x [8, 8]
    assert isinstance(model.inner, TraceError)
    waits = {"join": "joins it", "result": "waits for the result", "map": "waits for the result"}
    assert re.search(
        rf"cannot start an analysis: thread '.+' is tracing a model.* and {waits.get(how, 'has waited 0.5 s')}",
        str(model.inner),
    )
