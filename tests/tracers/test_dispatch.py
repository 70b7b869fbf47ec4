"""The dispatch tracer: parity with the jit tracer, meta tensors, shape inputs, training cost,
custom Functions and custom operators, and a model left as it was. Numbers worked by hand
(1 MAC = 1 flop, fvcore's convention)."""

from __future__ import annotations

import resource
from collections import Counter
from collections.abc import Callable

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TensorShape, TraceError, spec_handle
from opcount.scopes import ModuleTree
from opcount.tracers import trace_dispatch, trace_jit
from tests.fixtures.models import CalledTwice, Nested, OwnerVsCaller, Recursive, Shared, ViaForward, WithHooks
from tests.fixtures.optional import torchvision
from tests.fixtures.zoo8 import ZOO8, zoo_model

pytestmark = pytest.mark.smoke  # also run on the oldest supported torch (scripts/smoke_torch213.sh)

transformers = pytest.importorskip("transformers")

# Function.apply as torch defines it, for the checks that the trace restored it (torch 2.14 takes
# it from torch._C._FunctionBase, 2.13 defines its own classmethod).
FUNCTION_APPLY = torch.autograd.Function.__dict__["apply"]


def _both(model: nn.Module, inputs: object, kwargs: dict | None = None, **options: object):
    jit = FlopCountAnalysis(model, inputs, kwargs)
    dispatch = FlopCountAnalysis(model, inputs, kwargs, tracer="dispatch", **options)
    return jit, dispatch


def _gpt2() -> nn.Module:
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    return transformers.GPT2LMHeadModel(cfg).eval()


def _bert() -> nn.Module:
    cfg = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=1000
    )
    return transformers.BertModel(cfg).eval()


# ----- parity with the jit tracer ---------------------------------------------------------------


def test_records_equal_the_jit_tracers_on_resnet18() -> None:
    # Every record: kind, argument layout (defaults, dtype codes, conv as _convolution), scope.
    model, x = torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 64, 64)
    tree = ModuleTree(model)
    jit, dispatch = trace_jit(model, x, None, tree), trace_dispatch(model, x, None, tree)
    assert dispatch.calls == jit.calls
    assert dispatch.called == jit.called
    params = [s.param for c in dispatch.calls for s in c.inputs if getattr(s, "param", None)]
    assert params == [s.param for c in jit.calls for s in c.inputs if getattr(s, "param", None)]


def test_dtype_and_keyword_arguments_are_recorded_as_jit_records_them() -> None:
    class Casts(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = x.to(torch.float16).float().softmax(-1, dtype=torch.float64)
            return torch.nn.functional.gelu(y.sum(-1, dtype=torch.float32), approximate="tanh")

    model, x = Casts(), torch.randn(2, 4)
    tree = ModuleTree(model)
    assert trace_dispatch(model, x, None, tree).calls == trace_jit(model, x, None, tree).calls


def test_resnet18_parity_and_meta_parity() -> None:
    model, x = torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 224, 224)
    jit, dispatch = _both(model, x)
    assert dispatch.by_module_and_operator() == jit.by_module_and_operator()
    meta = FlopCountAnalysis(model, x, tracer="dispatch", device="meta")
    assert meta.by_module_and_operator() == jit.by_module_and_operator()
    assert meta.unsupported_ops() == dispatch.unsupported_ops() == Counter()


def test_gpt2_parity_on_real_and_meta_tensors() -> None:
    model, ids = _gpt2(), torch.randint(0, 1000, (1, 16))
    jit, dispatch = _both(model, (ids,))
    assert dispatch.by_module_and_operator() == jit.by_module_and_operator()
    meta = FlopCountAnalysis(model, (TensorShape((1, 16), torch.long),), tracer="dispatch", device="meta")
    assert meta.by_module_and_operator() == jit.by_module_and_operator()


def test_bert_parity_but_for_the_attention_mask_transformers_expands_only_under_jit() -> None:
    # transformers 4 skips an all-ones attention mask unless torch.jit.is_tracing(): under jit it
    # builds the [b, 1, L, L] additive mask with one subtraction per element (1 * 16 * 16 = 256).
    # transformers 5 builds the mask the same way under both tracers: full parity.
    import transformers

    model, ids = _bert(), torch.randint(0, 1000, (1, 16))
    jit, dispatch = _both(model, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    jit_only = Counter() if int(transformers.__version__.split(".")[0]) >= 5 else Counter({"sub": 256})
    assert jit.by_operator() - dispatch.by_operator() == jit_only
    assert dispatch.by_operator() - jit.by_operator() == Counter()
    assert {m: c for m, c in dispatch.by_module_and_operator().items() if m} == {
        m: c for m, c in jit.by_module_and_operator().items() if m
    }


@pytest.mark.parametrize("make", [Nested, CalledTwice, Shared, Recursive, ViaForward, OwnerVsCaller, WithHooks])
@pytest.mark.parametrize("ancestors", ["owner", "caller"])
def test_scope_semantics_match_the_jit_tracer(make: Callable[[], nn.Module], ancestors: str) -> None:
    model = make()
    x = torch.randn(2, 10 if make is Nested else 8 if make in (CalledTwice, Shared) else 6 if make is Recursive else 4)
    # on meta tensors too: the shape-only pass, with the same scopes
    meta = FlopCountAnalysis(model, x, tracer="dispatch", device="meta").ancestor_mode(ancestors)
    jit, dispatch = _both(model, x)
    jit.ancestor_mode(ancestors)
    dispatch.ancestor_mode(ancestors)
    assert dispatch.by_module_and_operator() == jit.by_module_and_operator() == meta.by_module_and_operator()
    assert dispatch.uncalled_modules() == jit.uncalled_modules() == meta.uncalled_modules()


def test_global_module_hooks_keep_the_jit_tracers_scopes() -> None:
    # With a global forward hook every module call runs hooks, so every scope comes from a hook
    # pair: the hook's own operator (a doubling, 8 muls per call on [2, 4]) lands in the caller.
    calls: list[str] = []

    def double(module: nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
        calls.append(type(module).__name__)
        return out * 2 if isinstance(module, nn.Linear) else out

    handle = torch.nn.modules.module.register_module_forward_hook(double)
    try:
        model, x = WithHooks(), torch.randn(2, 4)
        jit, dispatch = _both(model, x)
        assert dispatch.by_module_and_operator() == jit.by_module_and_operator()
        assert dispatch.by_module_and_operator()[""]["mul"] == 8 + 8  # the pre-hook's and the global hook's
        assert "_compiled_call_impl" not in vars(model.child)
        assert nn.Module.__call__ is nn.Module._wrapped_call_impl  # restored
    finally:
        handle.remove()


def test_data_parallel_is_unwrapped_as_by_the_jit_tracer() -> None:
    jit, dispatch = _both(nn.DataParallel(Nested()), torch.randn(4, 10))
    assert dispatch.by_module_and_operator() == jit.by_module_and_operator()
    assert dispatch.by_module()["module.inner.fc1"] == 800


# jit traces sizes as tensors: swin_t's ``(C // num_heads) ** -0.5`` becomes one aten::pow on a
# 0-dim tensor per block (12 blocks); the dispatch tracer sees Python ints, no operator.
JIT_ONLY = {"swin_t": Counter({"pow": 12})}


@pytest.mark.slow
@pytest.mark.parametrize("name", ZOO8)
def test_parity_torchvision_zoo(name: str) -> None:
    model, x = zoo_model(name)
    jit, dispatch = _both(model, x)
    extra = JIT_ONLY.get(name, Counter())
    assert jit.by_operator() - dispatch.by_operator() == extra
    assert dispatch.by_operator() - jit.by_operator() == Counter()

    def without_extra(counts: dict[str, Counter[str]]) -> dict[str, Counter[str]]:
        return {m: Counter({k: v for k, v in c.items() if k not in extra}) for m, c in counts.items()}

    assert without_extra(dispatch.by_module_and_operator()) == without_extra(jit.by_module_and_operator())
    meta = FlopCountAnalysis(model, TensorShape(tuple(x.shape)), tracer="dispatch", device="meta")
    assert meta.by_module_and_operator() == dispatch.by_module_and_operator()


@pytest.mark.slow
def test_parity_gpt2_and_bert_default_sizes() -> None:
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=4)).eval()
    ids = torch.randint(0, 1000, (2, 64))
    jit, dispatch = _both(gpt2, (ids,))
    assert dispatch.by_module_and_operator() == jit.by_module_and_operator()
    bert = transformers.BertModel(transformers.BertConfig(num_hidden_layers=4)).eval()
    jit, dispatch = _both(bert, (), {"input_ids": ids, "attention_mask": torch.ones_like(ids)})
    # transformers 4 builds the additive mask under jit only (one subtraction per element); 5.x under both
    jit_only = Counter() if int(transformers.__version__.split(".")[0]) >= 5 else Counter({"sub": 2 * 64 * 64})
    assert jit.by_operator() - dispatch.by_operator() == jit_only


# ----- meta tensors and shapes as inputs ----------------------------------------------------------


def test_meta_model_is_analyzed_without_allocating_its_weights() -> None:
    # 2.5e9 parameters: 10 GB of float32 that this test machine could not hold.
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(50_000, 50_000), nn.ReLU(), nn.Linear(50_000, 10))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    a = FlopCountAnalysis(model, TensorShape((8, 50_000)), tracer="dispatch", preset="macs")
    assert a.by_module() == {
        "": 8 * 50_000 * 50_000 + 8 * 50_000 * 10,
        "0": 8 * 50_000 * 50_000,
        "1": 0,
        "2": 8 * 50_000 * 10,
    }
    train = FlopCountAnalysis(model, TensorShape((8, 50_000)), tracer="dispatch", preset="macs", mode="train")
    assert train.total() == 3 * a.total() - 8 * 50_000 * 50_000  # no gradient for the input
    assert (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024 < 500e6
    assert all(p.is_meta for p in model.parameters())


def test_device_meta_leaves_real_weights_untouched() -> None:
    model = Nested()
    pointers = [p.data_ptr() for p in model.parameters()]
    a = FlopCountAnalysis(model, torch.randn(4, 10), tracer="dispatch", device="meta")
    assert a.total() == 1260
    assert [p.data_ptr() for p in model.parameters()] == pointers
    assert not any(p.is_meta for p in model.parameters())


def test_shapes_as_inputs_for_both_tracers() -> None:
    model = Nested()
    x = TensorShape((4, 10))
    assert FlopCountAnalysis(model, x).total() == 1260  # jit: zeros of that shape
    assert FlopCountAnalysis(model, (x,), tracer="dispatch").total() == 1260
    assert FlopCountAnalysis(model, (), {"x": x}, tracer="dispatch", device="meta").total() == 1260
    with pytest.raises(TypeError, match="sequence of sizes"):
        TensorShape(4)  # type: ignore[arg-type]


def test_data_dependent_forward_on_meta_names_the_module() -> None:
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) if x.sum() > 0 else x

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.branchy = Branchy()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.branchy(x)

    with pytest.raises(TraceError, match=r"module 'branchy' .*meta device"):
        FlopCountAnalysis(Outer(), torch.randn(2, 4), tracer="dispatch", device="meta").total()
    # On real tensors: fc's 2*4*4 = 32, plus the 7 adds of x.sum(), which only steers control
    # flow: the dispatch tracer keeps it where jit tracing prunes it.
    assert FlopCountAnalysis(Outer(), torch.ones(2, 4), tracer="dispatch").by_operator() == {"linear": 32, "sum": 7}
    assert FlopCountAnalysis(Outer(), torch.ones(2, 4)).by_operator() == {"linear": 32}


def test_options_are_checked() -> None:
    model, x = Nested(), torch.randn(4, 10)
    with pytest.raises(ValueError, match="tracer"):
        FlopCountAnalysis(model, x, tracer="fx")
    with pytest.raises(ValueError, match="dispatch"):
        FlopCountAnalysis(model, x, mode="train")
    with pytest.raises(ValueError, match="mode"):
        FlopCountAnalysis(model, x, tracer="dispatch", mode="inference")
    with pytest.raises(ValueError, match="meta"):
        FlopCountAnalysis(model, x, tracer="dispatch", device="cpu").total()


# ----- training: forward and backward ------------------------------------------------------------


def _linear_stack() -> nn.Module:
    return nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 30), nn.ReLU(), nn.Linear(30, 5))


def test_training_a_linear_stack_costs_three_forwards() -> None:
    # Forward on [4, 10]: 4*10*20 = 800, 4*20*30 = 2400, 4*30*5 = 600, F = 3800 MACs. Backward:
    # each layer's weight gradient (x^T g) and input gradient (g W) are forward-sized products,
    # 2F; the first layer's input gradient is skipped when the input does not require grad.
    # preset="macs" leaves out the bias gradients' sums and the activations.
    model = _linear_stack()
    x = torch.randn(4, 10)
    forward = FlopCountAnalysis(model, x, tracer="dispatch", preset="macs")
    assert forward.by_operator() == {"linear": 3800}
    train = FlopCountAnalysis(model, x, tracer="dispatch", preset="macs", mode="train")
    assert train.by_operator() == {"linear": 3800, "mm": 2 * 3800 - 800}
    assert train.by_module() == {"": 3 * 3800 - 800, "0": 2 * 800, "1": 0, "2": 3 * 2400, "3": 0, "4": 3 * 600}
    x.requires_grad_(True)
    train = FlopCountAnalysis(model, x, tracer="dispatch", preset="macs", mode="train")
    assert train.total() == 3 * forward.total() == 11400
    assert train.by_module()["0"] == 3 * 800


def test_training_a_conv_stack_costs_three_forwards() -> None:
    # conv1 3->8, 3x3, padding 1 on [2, 3, 16, 16]: 2 * (8*3*3*3) * 16*16 = 110592.
    # conv2 8->16, 3x3, stride 2: out 7x7, 2 * (16*8*3*3) * 7*7 = 112896. F = 223488.
    # convolution_backward is recorded as itself and priced as one forward-sized conv per
    # gradient computed: d_input and d_weight, 2F (preset="macs" leaves out the bias sums).
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2))
    x = torch.randn(2, 3, 16, 16, requires_grad=True)
    forward = FlopCountAnalysis(model, x, tracer="dispatch", preset="macs")
    assert forward.total() == 223488
    train = FlopCountAnalysis(model, x, tracer="dispatch", preset="macs", mode="train", device="meta")
    assert train.by_operator() == {"conv": 223488, "convolution_backward": 2 * 223488}
    assert train.by_module()["0"] == 3 * 110592 and train.by_module()["2"] == 3 * 112896
    no_input_grad = FlopCountAnalysis(model, x.detach(), tracer="dispatch", preset="macs", mode="train")
    assert no_input_grad.total() == 3 * 223488 - 110592


def test_training_counts_fused_backward_kernels_as_two_forwards() -> None:
    # relu's backward (threshold_backward) and batch norm's (native_batch_norm_backward) are
    # recorded as themselves and priced as two of their forward operator; training-mode batch
    # norm is numel * 5 = 24 * 5, relu numel = 24.
    model = nn.Sequential(nn.BatchNorm1d(6), nn.ReLU())
    x = torch.randn(4, 6, requires_grad=True)
    train = FlopCountAnalysis(model, x, tracer="dispatch", mode="train")
    assert train.by_operator()["batch_norm"] == 24 * 5
    assert train.by_operator()["native_batch_norm_backward"] == 2 * 24 * 5
    assert train.by_operator()["relu"] == 24
    assert train.by_operator()["threshold_backward"] == 2 * 24
    assert train.by_operator("0") == {"batch_norm": 24 * 5, "native_batch_norm_backward": 2 * 24 * 5}
    assert train.by_operator()["sum"] == 23  # the default loss: the sum of the output
    assert model.training and model[0].num_batches_tracked.item() == 0


def test_training_with_a_loss_function() -> None:
    model = _linear_stack()
    x, target = torch.randn(4, 10), torch.randn(4, 5)
    train = FlopCountAnalysis(
        model, x, tracer="dispatch", mode="train", loss_fn=lambda out: nn.functional.mse_loss(out, target)
    )
    assert train.by_operator()["mm"] == 2 * 3800 - 800
    # the bias gradients sum g over the batch: 3 * (20 + 30 + 5); no sum of the output is added
    assert train.by_operator()["sum"] == 3 * (20 + 30 + 5)
    # the loss and its backward kernel run at the root; 20 outputs: 2 * 20 + mean 20, backward 3 * 20
    losses = [call.scope for call, _ in train.per_call() if call.kind in ("aten::mse_loss", "aten::mse_loss_backward")]
    assert losses == [("",)] * 2
    assert (train.by_operator()["mse_loss"], train.by_operator()["mse_loss_backward"]) == (60, 60)
    assert not train.unsupported_ops()
    with pytest.raises(ValueError, match="loss_fn"):
        FlopCountAnalysis(model, x, tracer="dispatch", loss_fn=lambda out: out.sum()).total()


def test_training_a_transformer_on_meta_tensors() -> None:
    # Every multiply-add kind costs 3x its forward when the embeddings' output needs a gradient
    # (it does: the embeddings are parameters); the input ids are integers.
    model = _gpt2()
    ids = TensorShape((1, 16), torch.long)
    forward = FlopCountAnalysis(model, (ids,), tracer="dispatch", device="meta", preset="macs")
    train = FlopCountAnalysis(model, (ids,), tracer="dispatch", device="meta", preset="macs", mode="train")
    assert train.total() == 3 * forward.total()
    assert train.by_module()["transformer.h.1.mlp"] == 3 * forward.by_module()["transformer.h.1.mlp"]


# ----- custom autograd Functions and custom operators ---------------------------------------------


class MyOp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.save_for_backward(x, w)
        return (x @ w).relu()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        x, w = ctx.saved_tensors
        return grad @ w.t(), x.t() @ grad


class UsesMyOp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 16))
        self.fc = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(MyOp.apply(x, self.w))


def test_custom_function_operators_are_reported_under_its_name() -> None:
    # x [2, 8] @ w [8, 16]: 256 MACs, relu on 32 elements, then fc: 2*16*4 = 128.
    model, x = UsesMyOp(), torch.randn(2, 8)
    jit, dispatch = _both(model, x)
    assert jit.unsupported_ops() == {"prim::PythonOp.MyOp": 1}  # jit cannot see inside
    assert dispatch.by_operator() == {"MyOp::matmul": 256, "MyOp::relu": 32, "linear": 128}
    # backward: grad @ w^T and x^T @ grad, 256 each, inside MyOp's backward
    train = FlopCountAnalysis(model, x, tracer="dispatch", mode="train")
    assert train.by_operator()["MyOp::mm"] == 512
    assert train.by_operator("fc")["mm"] == 256
    assert torch.autograd.Function.__dict__["apply"] is FUNCTION_APPLY


@torch.library.custom_op("opcount_test::fused", mutates_args=())
def fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ w)


@fused.register_fake
def _fused_fake(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[1])


class UsesFused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused(x, self.w)


def test_library_custom_op_is_one_operator_under_its_qualified_name() -> None:
    model, x = UsesFused(), torch.randn(2, 8)
    for device in (None, "meta"):
        a = FlopCountAnalysis(model, x, tracer="dispatch", device=device)
        assert a.unsupported_ops() == {"opcount_test::fused": 1}
        a.set_op_handle("opcount_test::fused", spec_handle(lambda ins, outs: ins[0].shape[0] * 8 * 16, macs=True))
        assert a.by_operator() == {"fused": 256}


# ----- the model is left as it was -----------------------------------------------------------------


class WithNorm(nn.Module):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.op = UsesMyOp()
        self.fail = fail

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn(self.conv(x)).mean((2, 3))
        y = torch.cat([y, y], 1)
        return self.op(y[:, :7] if self.fail else y)


def _snapshot(model: nn.Module) -> tuple:
    # every module's attributes too: no hook, no scope wrapper, nothing else left behind
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    return state, [
        (m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks), set(vars(m))) for m in model.modules()
    ]


def _assert_unchanged(model: nn.Module, snapshot: tuple) -> None:
    state, flags = snapshot
    now = model.state_dict()
    assert now.keys() == state.keys() and all(torch.equal(now[k], v) for k, v in state.items())
    assert [
        (m.training, dict(m._forward_hooks), dict(m._forward_pre_hooks), set(vars(m))) for m in model.modules()
    ] == flags
    assert all(p.grad is None for p in model.parameters())
    assert torch.autograd.Function.__dict__["apply"] is FUNCTION_APPLY
    assert nn.Module.__call__ is nn.Module._wrapped_call_impl  # the scopes' __call__ is gone


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("device", [None, "meta"])
def test_model_unchanged_after_success(mode: str, device: str | None) -> None:
    model = WithNorm().eval()
    snapshot = _snapshot(model)
    a = FlopCountAnalysis(model, torch.randn(2, 3, 8, 8), tracer="dispatch", mode=mode, device=device)
    assert a.total("op") > 0
    _assert_unchanged(model, snapshot)


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize("device", [None, "meta"])
def test_model_unchanged_after_failure(mode: str, device: str | None) -> None:
    model = WithNorm(fail=True).train()
    snapshot = _snapshot(model)
    with pytest.raises(TraceError, match="module 'op' \\(UsesMyOp\\)"):
        FlopCountAnalysis(model, torch.randn(2, 3, 8, 8), tracer="dispatch", mode=mode, device=device).total()
    _assert_unchanged(model, snapshot)
