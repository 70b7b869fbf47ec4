"""The process state an analysis may touch is as it was afterwards, however many analyses ran at once
in however many threads: the recursion limit, torch's default dtype, its random number generators,
grad mode, the garbage collector, the patched class attributes and torch's dispatch state (issue 42).

Inputs are made before each "before" is taken: ``torch.randn`` itself draws from the generator.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch
from torch import nn
from torch.autograd import Function
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

import opcount
from opcount import ActivationCountAnalysis, FlopCountAnalysis, MemoryTrafficAnalysis
from opcount._runtime import TRACE_FRAMES, gc_paused, kineto_quiet
from opcount.tracers import patching


class Dropping(nn.Module):
    """Linear(8, 8) then dropout: in training every forward draws from torch's CPU generator."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc(x))


def _state() -> dict[str, Any]:
    """What the analyses must leave as they found it, in this thread and in the process."""
    from torch.nn.modules import module as nn_module

    return {
        "recursion limit": sys.getrecursionlimit(),
        "default dtype": torch.get_default_dtype(),
        "cpu generator": torch.get_rng_state().tolist(),
        "grad mode": torch.is_grad_enabled(),
        "collector": gc.isenabled(),
        "Module.__call__": nn.Module.__dict__["__call__"],
        "Function.apply": Function.__dict__["apply"],
        "global hooks": (len(nn_module._global_forward_hooks), len(nn_module._global_forward_pre_hooks)),
        "dispatch modes": len(_get_current_dispatch_mode_stack()),
        "function modes": torch._C._len_torch_function_stack(),
        "dispatch keys": (
            str(torch._C._dispatch_tls_local_include_set()),
            str(torch._C._dispatch_tls_local_exclude_set()),
        ),
        "warning filters": list(warnings.filters),
        "patch lock": (patching._holder[0], patching._depth[0]),
        "kineto": os.environ.get("KINETO_LOG_LEVEL"),
    }


# ----- the recursion limit ------------------------------------------------------------------------


def test_concurrent_analyses_leave_the_recursion_limit_exactly() -> None:
    # Before: each overlap saved another thread's raised limit, and 80 analyses left 16,000 (more
    # with every round). The limit inside a forward is the caller's plus opcount's headroom.
    before = sys.getrecursionlimit()
    inside: list[int] = []

    class Looks(nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            inside.append(sys.getrecursionlimit())
            return super().forward(x)

    x = torch.ones(1, 4)

    def one(i: int) -> float:
        return FlopCountAnalysis(Looks(4, 4, bias=False), x, tracer=("jit", "dispatch")[i % 2]).total()

    for _ in range(2):  # a second round started from the first's end
        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(one, range(80))) == {16}  # [1, 4] x [4, 4]: 16 multiply-adds
        assert sys.getrecursionlimit() == before
    assert set(inside) == {before + TRACE_FRAMES}


def test_a_nested_analysis_raises_the_limit_again_and_both_come_back() -> None:
    before = sys.getrecursionlimit()
    seen: list[int] = []

    class Nests(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(sys.getrecursionlimit())
            if len(seen) == 1:
                FlopCountAnalysis(Nests(), x, tracer="dispatch", device="meta").total()
            return x * 2

    FlopCountAnalysis(Nests(), torch.ones(2), tracer="dispatch").total()
    assert seen == [before + TRACE_FRAMES, before + 2 * TRACE_FRAMES]
    assert sys.getrecursionlimit() == before


# ----- the random number generators ---------------------------------------------------------------

DRAWING = [
    pytest.param(lambda m, x: FlopCountAnalysis(m, x).total(), id="jit"),
    pytest.param(lambda m, x: FlopCountAnalysis(m, x, tracer="dispatch").total(), id="dispatch"),
    pytest.param(lambda m, x: FlopCountAnalysis(m, x, tracer="dispatch", mode="train").total(), id="dispatch-train"),
    pytest.param(lambda m, x: MemoryTrafficAnalysis(m, x).total(), id="memory"),
    pytest.param(lambda m, x: ActivationCountAnalysis(m, x).total(), id="activations"),
    pytest.param(lambda m, x: opcount.trace(m, x), id="trace"),
]


@pytest.mark.parametrize("analyze", DRAWING)
def test_the_callers_random_stream_goes_on_as_without_the_analysis(analyze: Callable[..., Any]) -> None:
    # A train-mode dropout draws in the traced forward: before, the caller's next draw differed.
    model, x = Dropping().train(), torch.ones(2, 8)
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    analyze(model, x)
    assert torch.equal(torch.rand(4), expected)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_cuda_generator_goes_on_as_without_the_analysis() -> None:
    model, x = Dropping().train().cuda(), torch.ones(2, 8, device="cuda")
    torch.cuda.manual_seed(0)
    expected = torch.rand(4, device="cuda")
    torch.cuda.manual_seed(0)
    FlopCountAnalysis(model, x, tracer="dispatch", mode="train").total()
    assert torch.equal(torch.rand(4, device="cuda"), expected)


def test_a_forward_that_reseeds_leaves_the_callers_stream_alone() -> None:
    class Reseeds(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.manual_seed(1234)
            return x + torch.rand_like(x)

    x = torch.ones(3)
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    FlopCountAnalysis(Reseeds(), x, tracer="dispatch").total()
    assert torch.equal(torch.rand(4), expected)


# ----- torch's default dtype and grad mode --------------------------------------------------------


def test_a_forward_that_changes_the_default_dtype_or_grad_mode_leaves_the_callers() -> None:
    class SetsGlobals(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            torch.set_default_dtype(torch.float64)
            torch.set_grad_enabled(False)
            return x * 2

    for tracer in ("jit", "dispatch"):
        x = torch.ones(2, requires_grad=True)
        FlopCountAnalysis(SetsGlobals(), x, tracer=tracer).total()
        assert torch.get_default_dtype() == torch.float32
        assert torch.is_grad_enabled()
        assert nn.Linear(2, 2).weight.dtype == torch.float32


def test_threaded_llm_phases_leave_the_default_dtype() -> None:
    # transformers' from_config(dtype=bfloat16) sets the process's default dtype while it builds
    # and puts back what it saw: two builds at once left bfloat16, and the user's next
    # nn.Linear was silently bfloat16 (issue 42).
    pytest.importorskip("transformers")
    from opcount.llm.causal_lm import CausalLM
    from opcount.llm.models.catalogue import config

    def decode(i: int) -> float:
        small = config("llama-3-8b", num_hidden_layers=1, hidden_size=64, intermediate_size=128, vocab_size=128)
        return CausalLM(small).phase("decode", kv_len=8).flops.total()

    with ThreadPoolExecutor(4) as pool:
        assert len(set(pool.map(decode, range(8)))) == 1
    assert torch.get_default_dtype() == torch.float32
    assert nn.Linear(2, 2).weight.dtype == torch.float32


# ----- settings shared by overlapping blocks ------------------------------------------------------


def test_overlapping_collector_pauses_end_with_the_collector_running() -> None:
    # Blocks that end in another order than they began: the last one out restarts it.
    assert gc.isenabled()
    first, second = gc_paused(), gc_paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled()  # the second still runs
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_overlapping_kineto_quiets_remove_the_variable_once_the_last_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KINETO_LOG_LEVEL", raising=False)
    first, second = kineto_quiet(False), kineto_quiet(False)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert os.environ.get("KINETO_LOG_LEVEL") == "6"  # the second profile still runs
    second.__exit__(None, None, None)
    assert "KINETO_LOG_LEVEL" not in os.environ
    monkeypatch.setenv("KINETO_LOG_LEVEL", "2")  # the user's own level is never touched
    with kineto_quiet(False):
        assert os.environ["KINETO_LOG_LEVEL"] == "2"
    assert os.environ["KINETO_LOG_LEVEL"] == "2"


def test_threaded_calibrations_leave_the_tf32_flag() -> None:
    # Forced overlap: B starts while A's measurement runs with the flag set. Before, B saved A's
    # setting as the caller's and put it back last; now B waits for A's block to end.
    from opcount.hardware import calibrate

    before = torch.backends.cuda.matmul.allow_tf32
    a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()

    def matmul_a(dtype: torch.dtype, device: torch.device) -> float:
        a_inside.set()
        b_inside.wait(timeout=0.5)  # B gets in meanwhile only where nothing keeps it out
        return 1.0

    def matmul_b(dtype: torch.dtype, device: torch.device) -> float:
        b_inside.set()
        a_done.wait(timeout=5)
        return 1.0

    def measure_a() -> float:
        try:
            return calibrate._float32_with_tf32(matmul_a, torch.device("cpu"), not before)
        finally:
            a_done.set()

    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(measure_a)
        assert a_inside.wait(timeout=5)
        assert calibrate._float32_with_tf32(matmul_b, torch.device("cpu"), not before) == 1.0
        assert first.result() == 1.0
    assert torch.backends.cuda.matmul.allow_tf32 == before


# ----- everything at once --------------------------------------------------------------------------


class Convs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x)).relu()


def test_a_hundred_threaded_analyses_of_mixed_models_leave_the_process_as_it_was() -> None:
    pytest.importorskip("transformers")
    from opcount.llm.causal_lm import CausalLM
    from opcount.llm.models.catalogue import config

    # the models are made first: initializing their weights draws from the generator
    x8, image = torch.ones(2, 8), torch.ones(1, 3, 6, 6)
    small = config("llama-3-8b", num_hidden_layers=1, hidden_size=64, intermediate_size=128, vocab_size=128)
    kinds: list[tuple[Callable[[], nn.Module], bool, Callable[[nn.Module], object]]] = [
        (Dropping, True, lambda m: FlopCountAnalysis(m, x8).total()),
        (Dropping, False, lambda m: FlopCountAnalysis(m, x8, tracer="dispatch", mode="train").total()),
        (Convs, True, lambda m: MemoryTrafficAnalysis(m, image, tracer="dispatch").total()),
        (Convs, False, lambda m: FlopCountAnalysis(m, image, tracer="dispatch", device="meta").total()),
        (Convs, False, lambda m: ActivationCountAnalysis(m, image).total()),
        (Dropping, True, lambda m: opcount.roofline(m, x8, hardware="h100-sxm").total_time),
        (Convs, False, lambda m: FlopCountAnalysis(m, image, tracer="dispatch", mode="train").total()),
        (Dropping, True, lambda m: FlopCountAnalysis(m, x8).copy().total()),
        (Convs, False, lambda m: FlopCountAnalysis(m, image).total()),
    ]
    work: list[Callable[[], object]] = []
    for i in range(96):
        make, training, analyze = kinds[i % len(kinds)]
        work.append(functools.partial(analyze, make().train(training)))
    work += [lambda: CausalLM(small).phase("decode", kv_len=8).flops.total()] * 4  # built in the threads
    mine = Convs()
    with torch.no_grad():  # grad mode off in the caller's thread: each analysis keeps it so
        before = _state()
        with ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(run) for run in work]
            FlopCountAnalysis(mine, image, tracer="dispatch").total()  # one in the caller's thread too
            assert all(f.result() is not None for f in futures)
        after = _state()
    assert after == before
    assert len(work) == 100
