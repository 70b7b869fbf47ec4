"""Scope semantics: which module each operator's cost lands in. Numbers worked by hand."""

from __future__ import annotations

import itertools
import sys
import threading

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TraceError, spec_handle
from opcount.ir import tensor
from tests.fixtures.models import CalledTwice, Nested, OwnerVsCaller, Recursive, Shared, ViaForward, WithHooks

pytestmark = pytest.mark.smoke  # also run on the oldest supported torch (scripts/smoke_torch213.sh)


def test_nested_modules_roll_up_to_every_ancestor() -> None:
    a = FlopCountAnalysis(Nested(), torch.randn(4, 10))
    assert a.total() == 800 + 400 + 60
    by_module = a.by_module()
    assert by_module["inner"] == 1200
    assert by_module["inner.fc1"] == 800
    assert by_module["inner.fc2"] == 400
    assert by_module["head"] == 60
    assert by_module["unused"] == 0
    assert a.total("inner.fc2") == 400
    assert a.by_operator("inner") == {"linear": 1200}
    assert a.by_module_and_operator()["head"] == {"linear": 60}


def test_module_called_twice_counts_both_calls() -> None:
    a = FlopCountAnalysis(CalledTwice(), torch.randn(2, 8))
    assert a.total() == 256
    assert a.total("fc") == 256


def test_shared_module_is_reported_under_its_first_name() -> None:
    a = FlopCountAnalysis(Shared(), torch.randn(2, 8))
    assert a.canonical_module_name("b") == "a"
    assert "b" not in a.by_module()
    assert a.total("a") == a.total("b") == 256
    assert a.total() == 256


def test_recursive_scopes_count_each_operator_once_per_module() -> None:
    for mode in ("owner", "caller"):
        a = FlopCountAnalysis(Recursive(), torch.randn(2, 6)).ancestor_mode(mode)
        assert a.total() == 3 * 72, mode
        assert a.total("fc") == 3 * 72, mode


def test_forward_called_directly_is_attributed_to_the_caller() -> None:
    a = FlopCountAnalysis(ViaForward(), torch.randn(3, 4))
    assert a.total() == 3 * 4 * 4
    assert a.total("child") == 0
    assert "child" in a.uncalled_modules()


def test_operators_of_forward_hooks_count_in_the_caller() -> None:
    a = FlopCountAnalysis(WithHooks(), torch.randn(2, 4))
    assert a.by_module_and_operator()["child"] == {"linear": 32}
    assert a.by_module_and_operator()[""] == {"linear": 32, "matmul": 32, "mul": 8}
    assert not any("_slow_forward" in m.__dict__ for m in a.model.modules())


def test_owner_and_caller_modes() -> None:
    x = torch.randn(2, 4)
    owner = FlopCountAnalysis(OwnerVsCaller(), x).ancestor_mode("owner")
    caller = FlopCountAnalysis(OwnerVsCaller(), x).ancestor_mode("caller")
    assert owner.total() == caller.total() == 64
    assert owner.total("a") == 32  # only a.proj: b is owned by the root
    assert caller.total("a") == 64  # b ran inside a's forward
    assert owner.total("b") == caller.total("b") == 32
    with pytest.raises(ValueError, match="ancestor mode"):
        owner.ancestor_mode("parent")


def test_unused_modules_are_reported() -> None:
    a = FlopCountAnalysis(Nested(), torch.randn(4, 10))
    assert a.uncalled_modules() == {"unused"}


def test_data_parallel_is_unwrapped_with_module_prefix() -> None:
    model = Nested()
    a = FlopCountAnalysis(nn.DataParallel(model), torch.randn(4, 10))
    assert a.total() == 1260
    assert a.by_module()["module.inner.fc1"] == 800
    assert a.by_module()["module"] == 1260


def test_fvcore_style_handle_receives_jit_values() -> None:
    def relu_handle(inputs, outputs):
        return outputs[0].type().sizes()[0] * outputs[0].type().sizes()[1]

    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
    a = FlopCountAnalysis(model, torch.randn(2, 4)).set_op_handle("aten::relu", relu_handle)
    assert a.by_operator() == {"linear": 2 * 4 * 6, "relu": 2 * 6}


def test_spec_handle_and_kwargs_form() -> None:
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU())
    double = spec_handle(lambda i, o: 2 * tensor(i[0]).numel)
    a = FlopCountAnalysis(model, torch.randn(2, 4)).set_op_handle(**{"aten::relu": double})
    assert a.by_operator()["relu"] == 2 * 2 * 6


def test_ignored_op_counts_nothing_and_is_not_unsupported() -> None:
    a = FlopCountAnalysis(Nested(), torch.randn(4, 10)).set_op_handle("aten::linear", None)
    assert a.total() == 0
    assert a.unsupported_ops() == {}


def test_handle_change_recomputes_without_retracing(monkeypatch: pytest.MonkeyPatch) -> None:
    from opcount import tracing

    a = FlopCountAnalysis(Nested(), torch.randn(4, 10))
    assert a.total() == 1260
    calls = []
    monkeypatch.setattr(tracing, "trace_jit", lambda *args: calls.append(args))
    a.set_op_handle("aten::linear", spec_handle(lambda i, o: 1))
    assert a.total() == 3
    assert calls == []


def test_clear_op_handles_makes_everything_unsupported() -> None:
    a = FlopCountAnalysis(Nested(), torch.randn(4, 10)).clear_op_handles()
    assert a.total() == 0
    assert a.unsupported_ops() == {"aten::linear": 3}


def test_unsupported_ops_analyzes_lazily() -> None:
    a = FlopCountAnalysis(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), torch.randn(1, 4), preset="fvcore")
    assert a.unsupported_ops() == {"aten::tanh": 1}
    assert a.unsupported_ops("0") == {}


def test_copy_keeps_class_and_every_setting() -> None:
    class MyAnalysis(FlopCountAnalysis):
        pass

    a = MyAnalysis(OwnerVsCaller(), torch.randn(2, 4), flops_per_mac=2)
    a.ancestor_mode("caller").set_op_handle("aten::linear", None).unsupported_ops_warnings(False)
    b = a.copy()
    assert type(b) is MyAnalysis
    assert b.total() == 0 and b.unsupported_ops() == {}
    c = a.copy(new_model=OwnerVsCaller(), new_inputs=torch.randn(4, 4)).set_op_handle(
        "aten::linear", spec_handle(lambda i, o: tensor(i[0]).shape[0], macs=True)
    )
    assert c.total("a") == 2 * (4 + 4)  # caller mode kept; 2 flops per multiply-add kept
    assert a.total() == 0  # the original is untouched by the copy's new handle


def test_flops_per_mac_scales_multiply_adds_only() -> None:
    model = nn.Sequential(nn.Linear(10, 20), nn.BatchNorm1d(20).eval())
    one = FlopCountAnalysis(model, torch.randn(4, 10))
    two = FlopCountAnalysis(model, torch.randn(4, 10), flops_per_mac=2)
    assert one.by_operator() == {"linear": 800, "batch_norm": 4 * 20 * 2}
    assert two.by_operator() == {"linear": 1600, "batch_norm": 4 * 20 * 2}
    with pytest.raises(ValueError, match="flops_per_mac"):
        FlopCountAnalysis(model, torch.randn(4, 10), flops_per_mac=3)


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * x

    @staticmethod
    def backward(ctx, g):
        return g


@torch.library.custom_op("opcount_scopes_test::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 3


@scale.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesCustomOps(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return scale(Square.apply(x))


def test_custom_operators_are_named_and_take_handles_by_name() -> None:
    a = FlopCountAnalysis(UsesCustomOps(), torch.randn(2, 5))
    assert a.unsupported_ops() == {"prim::PythonOp.Square": 1, "opcount_scopes_test::scale": 1}
    one_per_element = spec_handle(lambda i, o: tensor(i[0]).numel)
    a.set_op_handle("prim::PythonOp.Square", one_per_element, "opcount_scopes_test::scale", one_per_element)
    assert a.by_operator() == {"Square": 10, "scale": 10}  # class name; namespace dropped as for aten
    assert a.unsupported_ops() == {}


class CausalAttention(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_causal_attention_full_or_unmasked() -> None:
    # q, k, v: [batch 1, heads 2, L = S = 8, E = 16]. Full: q.k^T and attn.v are 2*8*8*16 each.
    qkv = tuple(torch.randn(1, 2, 8, 16) for _ in range(3))
    full = FlopCountAnalysis(CausalAttention(), qkv, preset="macs")
    assert full.total() == 2 * (2 * 8 * 8 * 16)
    # Unmasked only: row i of the causal mask keeps i + 1 keys, 8*9/2 = 36 of the 64 pairs.
    unmasked = FlopCountAnalysis(CausalAttention(), qkv, preset="macs", causal_attention="unmasked")
    assert unmasked.total() == 2 * (2 * 36 * 16)
    with pytest.raises(ValueError, match="causal_attention"):
        FlopCountAnalysis(CausalAttention(), qkv, causal_attention="half")


class Gaps(nn.Module):
    """Operators before, between and after child calls, and children that trace nothing: on
    [2, 4], each Linear(4, 4) is 2*4*4 = 32 multiply-adds and each multiply 8."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Identity()
        self.b = nn.Linear(4, 4)
        self.c = nn.Sequential(nn.Identity(), nn.Sequential())
        self.d = nn.Linear(4, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.b(self.a(x * 2.0))
        x = self.c(x) * 3.0
        return self.d(self.a(x)) * x


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_scopes_between_children_and_around_children_that_trace_nothing(tracer: str) -> None:
    a = FlopCountAnalysis(Gaps(), torch.randn(2, 4), tracer=tracer)
    by = a.by_module_and_operator()
    assert by[""] == {"mul": 3 * 8, "linear": 2 * 32}
    assert by["b"] == by["d"] == {"linear": 32}
    assert a.total("a") == a.total("c") == a.total("c.0") == a.total("c.1") == 0
    assert a.uncalled_modules() == {"a", "c", "c.0", "c.1"}  # fvcore's sense: no operator ran in them


class HookedMidPass(nn.Module):
    """``fc`` runs three times; before the second call the forward registers a forward hook
    (``fc``'s own, or a global one) that multiplies the output by 2 (8 multiplies on [2, 4]),
    and removes it after the second call. The hook's multiply runs outside ``fc.forward``: the
    root's cost, as with a hook registered before the pass."""

    def __init__(self, global_hook: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.global_hook = global_hook

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.fc(x)

        def double(module: nn.Module, args: object, out: torch.Tensor) -> torch.Tensor | None:
            return out * 2.0 if module is self.fc else None

        if self.global_hook:
            handle = torch.nn.modules.module.register_module_forward_hook(double)
        else:
            handle = self.fc.register_forward_hook(double)
        x = self.fc(x)
        handle.remove()
        return self.fc(x)


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
@pytest.mark.parametrize("global_hook", [False, True])
def test_hooks_registered_during_the_pass_run_and_cost_the_caller(tracer: str, global_hook: bool) -> None:
    model, x = HookedMidPass(global_hook), torch.randn(2, 4)
    a = FlopCountAnalysis(model, x, tracer=tracer)
    assert a.by_module_and_operator()["fc"] == {"linear": 3 * 32}
    assert a.by_module_and_operator()[""] == {"linear": 3 * 32, "mul": 8}


class Depth(nn.Module):
    """Records the number of Python frames under which each nesting level's forward runs."""

    def __init__(self, child: nn.Module | None, seen: list[int]) -> None:
        super().__init__()
        self.child, self.seen = child, seen

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        frame, depth = sys._getframe(), 0
        while frame is not None:
            frame, depth = frame.f_back, depth + 1
        self.seen.append(depth)
        return self.child(x) if self.child is not None else x + 1


def test_jit_tracing_adds_two_python_frames_per_module_level() -> None:
    # torch's tracer records the whole Python stack at every operator: frames cost time per
    # operator, and a module call without hooks costs __call__ and forward, as without tracing.
    seen: list[int] = []
    FlopCountAnalysis(Depth(Depth(Depth(None, seen), seen), seen), torch.randn(2)).total()
    assert [b - a for a, b in itertools.pairwise(seen)] == [2, 2]


class Waits(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.started, self.go_on = threading.Event(), threading.Event()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.started.set()
        self.go_on.wait(timeout=10)
        return x + 1


class CallsFromAThread(nn.Module):
    """Runs ``fc`` (32 on [2, 4]) while another thread is inside ``side``: torch traces the
    tracing thread only, so ``side``'s work would be missing from the counts."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.side = Waits()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        worker = threading.Thread(target=self.side, args=(torch.randn(2, 4),))
        worker.start()
        self.side.started.wait(timeout=10)
        try:
            return self.fc(x)
        finally:
            self.side.go_on.set()
            worker.join()


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
@pytest.mark.parametrize("hooked", [False, True])
def test_module_calls_from_other_threads_are_named_not_dropped(tracer: str, hooked: bool) -> None:
    # the other thread's work escapes the trace: an error naming the module and the thread, where
    # the count was fc's alone with a warning that called 'side' unused (issue 42)
    model = CallsFromAThread()
    if hooked:  # scoped by hooks instead of __call__
        model.side.register_forward_hook(lambda module, args, out: None)
    with pytest.raises(TraceError, match=r"module 'side' \(Waits\) ran in another thread \('Thread-\d+"):
        FlopCountAnalysis(model, torch.randn(2, 4), tracer=tracer).total()


class RecursesHooked(nn.Module):
    """Runs ``fc`` (32 on [2, 4]) and calls itself twice more, after registering a forward hook
    on itself that multiplies the output by 2 (8). The first call started before the hook: the
    hook runs after the two inner calls only."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
        x = self.fc(x)
        if depth == 2:
            handle = self.register_forward_hook(lambda module, args, out: out * 2.0)
            x = self(x, depth=1)
            handle.remove()
        elif depth == 1:
            x = self(x, depth=0)
        return x


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_module_hooked_during_the_pass_calling_itself(tracer: str) -> None:
    model = RecursesHooked()
    a = FlopCountAnalysis(model, torch.randn(2, 4), tracer=tracer)
    assert a.by_module_and_operator()[""] == {"linear": 3 * 32, "mul": 2 * 8}
    assert a.by_module_and_operator()["fc"] == {"linear": 3 * 32}
    assert "forward" not in vars(model) and "_slow_forward" not in vars(model)


class CountsCalls(nn.Linear):
    """A Linear whose class extends torch's ``_call_impl``: the trace must still go through it."""

    calls = 0

    def _call_impl(self, *args: object, **kwargs: object) -> torch.Tensor:
        CountsCalls.calls += 1
        return super()._call_impl(*args, **kwargs)


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_a_class_s_own_call_impl_runs(tracer: str) -> None:
    model = nn.Sequential(CountsCalls(4, 4), nn.ReLU())
    CountsCalls.calls = 0
    a = FlopCountAnalysis(model, torch.randn(2, 4), tracer=tracer)
    assert a.total("0") == 32
    assert CountsCalls.calls == 1
