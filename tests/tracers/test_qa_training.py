"""A training step analyzed as a careful user would: mistakes in ``loss_fn`` and failed backward
passes named as such, torch.utils.checkpoint (reentrant too), models returning their own loss,
frozen and lazy models, inference tensors, LSTMs, and profile() beside a training step. Expected
numbers are worked by hand (1 multiply-add = 1 flop)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint, set_checkpoint_early_stop

from opcount import FlopCountAnalysis, OpcountError, OpcountTypeError, OpcountValueError, TraceError

# ----- loss_fn mistakes --------------------------------------------------------------------------


def _boom(out: torch.Tensor) -> torch.Tensor:
    raise RuntimeError("labels missing")


def _train(model: nn.Module, x: torch.Tensor, **kw: Any) -> FlopCountAnalysis:
    return FlopCountAnalysis(model, x, tracer="dispatch", mode="train", **kw)


@pytest.mark.parametrize("device", [None, "meta"])
def test_a_loss_fn_that_raises_is_named_and_leaves_the_model_as_it_was(device: str | None) -> None:
    # Before: "could not trace the model (Sequential) with the dispatch tracer: RuntimeError:
    # labels missing. Hint: check the inputs' shapes and types." -- the model and its inputs
    # blamed for the loss function's own error.
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    stats = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(2, 4)
    with pytest.raises(OpcountError, match=r"loss_fn raised RuntimeError: labels missing") as info:
        _train(model, x, loss_fn=_boom, device=device).total()
    assert "inputs' shapes" not in str(info.value)
    assert all(torch.equal(v, stats[k]) for k, v in model.state_dict().items())
    assert all(p.grad is None and p.requires_grad for p in model.parameters()) and model.training


def test_a_loss_fn_that_is_not_callable_is_a_type_error() -> None:
    # Before: TraceError "could not trace the model (Linear) ...: TypeError: 'int' object is not
    # callable. Hint: check the inputs' shapes and types."
    with pytest.raises(OpcountTypeError, match=r"loss_fn must be callable, got int"):
        _train(nn.Linear(4, 3), torch.randn(2, 4), loss_fn=3).total()


def test_a_loss_fn_returning_a_vector_names_its_shape() -> None:
    # Before: "loss_fn must return a one-element tensor, got Tensor" -- the shape not said.
    with pytest.raises(OpcountValueError, match=r"one-element tensor, got a tensor of shape \(2, 3\)"):
        _train(nn.Linear(4, 3), torch.randn(2, 4), loss_fn=lambda out: out).total()


# ----- torch.utils.checkpoint ---------------------------------------------------------------------
class Checkpointed(nn.Module):
    """b(relu(a(x))) under torch.utils.checkpoint: a and b run again in the backward pass."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8, bias=False)
        self.b = nn.Linear(8, 8, bias=False)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block: Callable[[torch.Tensor], torch.Tensor] = lambda z: self.b(torch.relu(self.a(z)))
        return checkpoint(block, x, use_reentrant=self.reentrant)


def test_checkpoint_recomputation_is_priced_in_the_module_that_recomputes() -> None:
    # One product of a [4, 8] input and an [8, 8] weight: P = 4 * 8 * 8 = 256 multiply-adds.
    # a: forward P, recomputed P, weight gradient P (the input needs none) = 3P = 768.
    # b: forward P, recomputed P, weight gradient P, input gradient P = 4P = 1024, plus the
    # relu recomputed outside any module (4 * 8 = 32), which takes the scope of the backward
    # node that asked for it, b's.
    # Before: a's recomputation was priced under b (the backward node asking for it): a 512,
    # b 1312.
    p = 4 * 8 * 8
    with set_checkpoint_early_stop(False):  # recompute the whole block, as torch did before 2.1
        by_module = _train(Checkpointed(reentrant=False), torch.randn(4, 8)).by_module()
    assert by_module["a"] == 3 * p
    assert by_module["b"] == 4 * p + 4 * 8


@pytest.mark.parametrize("device", [None, "meta"])
def test_reentrant_checkpoint_is_differentiated_and_leaves_no_grad(device: str | None) -> None:
    # transformers' gradient_checkpointing_enable() uses use_reentrant=True, which
    # torch.autograd.grad cannot run through. Before: TraceError "could not trace the model
    # (Checkpointed) ...: RuntimeError: When use_reentrant=True, ... Hint: check the inputs'
    # shapes and types."
    # P = 4*8*8 = 256. Forward: a P, relu 32, b P. The backward runs the block again (a P,
    # relu 32, b P), then b's weight and input gradients, relu's (2 relus: 64), a's weight and
    # input gradients (the input requires grad): 4P. The loss, a sum of 4*8 outputs: 31.
    p = 4 * 8 * 8
    model = Checkpointed(reentrant=True)
    model.a.weight.grad = torch.ones(8, 8)  # a gradient already there stays as it was
    x = torch.randn(4, 8, requires_grad=True)
    assert _train(model, x, device=device).total() == 8 * p + 2 * 32 + 64 + 31
    assert x.grad is None and model.b.weight.grad is None
    assert torch.equal(model.a.weight.grad, torch.ones(8, 8))


class FailingBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("no backward here")


def test_a_failing_backward_pass_is_named_as_one() -> None:
    # Before: "could not trace the model (Linear) ...: RuntimeError: no backward here. Hint:
    # check the inputs' shapes and types" -- though the forward had run.
    model = nn.Linear(4, 3)
    with pytest.raises(TraceError, match=r"the backward pass failed: RuntimeError: no backward here") as info:
        _train(model, torch.randn(2, 4), loss_fn=lambda out: FailingBackward.apply(out).sum()).total()
    assert "inputs' shapes" not in str(info.value)


# ----- cross-checks that passed (kept so they stay true) ------------------------------------------
def test_frozen_first_layer_costs_only_the_second_layers_weight_gradient() -> None:
    # Linear(8, 16) frozen, then Linear(16, 4), batch 2, no bias: forward 2*8*16 + 2*16*4 = 384;
    # backward: the second layer's weight gradient 2*16*4 = 128 (its input gradient is not
    # needed: nothing before it requires grad); the loss, a sum of 2*4 outputs, 7 adds.
    model = nn.Sequential(nn.Linear(8, 16, bias=False), nn.Linear(16, 4, bias=False))
    model[0].weight.requires_grad_(False)
    for device in (None, "meta"):
        assert _train(model, torch.randn(2, 8), device=device).total() == 384 + 128 + 7
    assert not model[0].weight.requires_grad


def test_cross_entropy_on_a_frozen_model_with_a_grad_input() -> None:
    # No trainable parameter, the input requires grad: input gradients only.
    model = nn.Linear(6, 4, bias=False).requires_grad_(False)
    x = torch.randn(3, 6, requires_grad=True)
    y = torch.tensor([0, 2, 1])
    flops = _train(model, x, loss_fn=lambda out: F.cross_entropy(out, y)).by_operator()
    # forward 3*6*4 = 72; input gradient g W: 72 again
    assert flops["linear"] == 72 and flops["mm"] == 72
    assert x.grad is None


# ----- a model that returns its own loss ----------------------------------------------------------
class WithLoss(nn.Module):
    """Returns {"loss", "logits"}, as transformers models do when given labels."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 4, bias=False)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
        logits = self.fc(x)
        return {"loss": F.mse_loss(logits, target), "logits": logits}


def test_the_default_loss_of_a_model_returning_its_loss_is_that_loss() -> None:
    # A training step differentiates the model's own loss; the logits are not summed into it.
    # Before: loss + logits.sum(), so 3*4 - 1 = 11 adds of the logits' sum and one add priced
    # that no training step runs.
    x, target = torch.randn(3, 6), torch.randn(3, 4)
    step = FlopCountAnalysis(WithLoss(), (x, target), tracer="dispatch", mode="train")
    ops = step.by_operator()
    assert "sum" not in ops and "add" not in ops
    # forward 3*6*4 = 72; the weight gradient gᵀ x, 72 (the input needs none)
    assert ops["linear"] == 72 and ops["mm"] == 72
    given = FlopCountAnalysis(WithLoss(), (x, target), tracer="dispatch", mode="train", loss_fn=lambda o: o["loss"])
    assert step.total() == given.total()


def test_transformers_labels_train_on_the_models_loss() -> None:
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=8)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 50, (1, 8))
    kw = {"input_ids": ids, "labels": ids}
    default = FlopCountAnalysis(model, (), kwargs=kw, tracer="dispatch", mode="train", device="meta")
    own = FlopCountAnalysis(
        model, (), kwargs=kw, tracer="dispatch", mode="train", device="meta", loss_fn=lambda o: o.loss
    )
    assert default.total() == own.total()


@pytest.mark.parametrize("loss_fn", [None, lambda out: F.cross_entropy(out, torch.tensor([0, 1]))])
def test_a_model_with_nothing_to_train_says_so(loss_fn: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
    # Before: "the loss does not require grad" (with loss_fn) or "no output tensor requires
    # grad; pass loss_fn" (without): neither says that no parameter or input requires grad.
    model = nn.Linear(4, 3).requires_grad_(False)
    with pytest.raises(OpcountValueError, match=r"no parameter or input requires grad"):
        _train(model, torch.randn(2, 4), loss_fn=loss_fn).total()
    assert not any(p.requires_grad for p in model.parameters())


# ----- lazy modules ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("mode", "device"), [("eval", None), ("eval", "meta"), ("train", None), ("train", "meta")])
def test_uninitialized_lazy_parameters_are_named(mode: str, device: str | None) -> None:
    # Before: a bare ValueError from torch ("Attempted to use an uninitialized parameter in
    # is_set_to") raised while putting the model back, or a TraceError blaming the inputs.
    model = nn.Sequential(nn.Linear(4, 4), nn.LazyLinear(3))
    with pytest.raises(OpcountValueError, match=r"'1\.weight'.*uninitialized.*model\(x\)"):
        FlopCountAnalysis(model, torch.randn(2, 4), tracer="dispatch", mode=mode, device=device).total()
    assert isinstance(model[1].weight, nn.parameter.UninitializedParameter)


def test_uninitialized_lazy_parameters_are_named_under_jit_too() -> None:
    # The check is the trace's, before either tracer. Before: a bare ValueError from torch.
    model = nn.Sequential(nn.Linear(4, 4), nn.LazyLinear(3))
    with pytest.raises(OpcountValueError, match=r"'1\.weight'.*uninitialized.*model\(x\)"):
        FlopCountAnalysis(model, torch.randn(2, 4)).total()
    assert isinstance(model[1].weight, nn.parameter.UninitializedParameter)


def test_lazy_modules_once_initialized_are_analyzed() -> None:
    model = nn.Sequential(nn.LazyLinear(3))
    model(torch.randn(2, 4))  # the first call sizes the weight: [3, 4]
    # forward 2*4*3 = 24; weight gradient 24; bias gradient (2-1)*3 = 3; loss sum 2*3-1 = 5
    assert _train(model, torch.randn(2, 4)).total() == 24 + 24 + 3 + 5


# ----- profiling a training step ----------------------------------------------------------------------
def test_profile_refuses_a_training_steps_prediction() -> None:
    # profile() measures forward passes. Before: a training step's roofline (forward and
    # backward) was put beside a measured forward pass, "% of speed of light" and "achieved
    # FLOP/s" dividing the step's numbers by the forward's time.
    from opcount import profile

    model, x = nn.Linear(4, 3), torch.randn(2, 4)
    step = _train(model, x)
    with pytest.raises(OpcountValueError, match=r"profile measures forward passes.*mode='train'"):
        profile(model, x, hardware="h100-sxm", predicted=step, repeats=1, warmup=0)
    with pytest.raises(OpcountValueError, match=r"profile measures forward passes.*mode='train'"):
        profile(
            model, x, hardware="h100-sxm", repeats=1, warmup=0, roofline_options={"tracer": "dispatch", "mode": "train"}
        )


def test_cli_profile_refuses_mode_train(capsys: pytest.CaptureFixture[str]) -> None:
    from opcount import cli

    argv = ["tests.fixtures.report_models:tiny_model", "--input", "1,3,8,8", "--tracer", "dispatch", "--mode", "train"]
    assert cli.main([*argv, "--profile", "--hardware", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--profile measures forward passes: leave out --mode train" in err, (
        err
    )


# ----- bytes of multilabel_soft_margin_loss's pieces ---------------------------------------------------
def test_log_sigmoid_moves_its_input_and_output() -> None:
    # F.multilabel_soft_margin_loss runs log_sigmoid. Before: aten::log_sigmoid and its backward
    # were unsupported in bytes (flops had a formula). Elementwise: read 3*4 floats, write 3*4.
    from opcount import MemoryTrafficAnalysis

    model = nn.Sequential(nn.Linear(6, 4), nn.LogSigmoid())
    x = torch.randn(3, 6)
    forward = MemoryTrafficAnalysis(model, x, tracer="dispatch")
    assert forward.unsupported_ops() == {} and forward.by_operator()["log_sigmoid"] == 2 * 3 * 4 * 4
    step = MemoryTrafficAnalysis(model, x, tracer="dispatch", mode="train")
    assert step.unsupported_ops() == {} and step.by_operator()["log_sigmoid_backward"] > 0


# ----- recurrent layers ---------------------------------------------------------------------------------
def test_lstm_backward_on_the_cpu_is_two_forward_layers() -> None:
    # LSTM(4, 6), no bias, batch 2 x 5 steps = 10 tokens. Forward (chainer-computational-cost's
    # gate arithmetic): 10 * (4*6*4 + 4*6*6) = 2400 multiply-adds + 10 * (30 - 8) * 6 = 1320
    # flops = 3720. The CPU's oneDNN kernel mkldnn_rnn_layer_backward, two forwards: 7440.
    # Before: unsupported, so the training step cost about its forward.
    model = nn.LSTM(4, 6, batch_first=True, bias=False)
    step = _train(model, torch.randn(2, 5, 4))
    ops = step.by_operator()
    if "mkldnn_rnn_layer_backward" not in ops and not step.unsupported_ops():
        pytest.skip("this torch build runs the LSTM's backward without oneDNN")
    assert step.unsupported_ops() == {}
    assert ops["lstm"] == 3720 and ops["mkldnn_rnn_layer_backward"] == 2 * 3720


def test_a_loss_fn_reading_values_on_meta_gets_the_meta_hint() -> None:
    # gaussian_nll_loss checks its variance for negative values: a value meta tensors lack.
    # Before the loss_fn was named: "could not trace the model (Linear)"; it then said the
    # loss_fn raised DataDependentOutputException, without the way out.
    def loss(out: torch.Tensor) -> torch.Tensor:
        return F.gaussian_nll_loss(out, torch.zeros(2, 3), torch.ones(2, 3))

    with pytest.raises(OpcountValueError, match=r"loss_fn raised .*Hint: on the meta device.*device=None"):
        _train(nn.Linear(4, 3), torch.randn(2, 4), loss_fn=loss, device="meta").total()
    assert _train(nn.Linear(4, 3), torch.randn(2, 4), loss_fn=loss).total() > 0  # real tensors: fine


# ----- torch.inference_mode ---------------------------------------------------------------------------
# Linear(4, 3), batch 2: forward 2*4*3 = 24; weight gradient 24; bias gradient (2-1)*3 = 3; the
# default loss, the sum of 2*3 outputs, 5 adds.
LINEAR_STEP = 24 + 24 + 3 + 5


@pytest.mark.parametrize(("tracer", "mode"), [("jit", "eval"), ("dispatch", "eval"), ("dispatch", "train")])
def test_inputs_made_under_inference_mode_are_analyzed(tracer: str, mode: str) -> None:
    # Before: a bare "RuntimeError: Inference tensors do not track version counter." while
    # saving the caller's inputs, with every tracer.
    with torch.inference_mode():
        x = torch.randn(2, 4)
    kw: dict[str, Any] = {"mode": mode} if tracer == "dispatch" else {}
    flops = FlopCountAnalysis(nn.Linear(4, 3), x, tracer=tracer, **kw)
    assert flops.total() == (LINEAR_STEP if mode == "train" else 24)
    assert x.is_inference()


@pytest.mark.parametrize("device", [None, "meta"])
def test_a_training_step_analyzed_inside_inference_mode(device: str | None) -> None:
    # Before: "no output tensor requires grad; pass loss_fn" (meta) or the bare RuntimeError.
    model = nn.Linear(4, 3)
    with torch.inference_mode():
        assert _train(model, torch.randn(2, 4), device=device).total() == LINEAR_STEP


@pytest.mark.parametrize("device", [None, "meta"])
def test_a_model_built_under_inference_mode_is_analyzed(device: str | None) -> None:
    # Its parameters and buffers are inference tensors, without a version counter. Before: a bare
    # "RuntimeError: Inference tensors do not track version counter." while saving them.
    with torch.inference_mode():
        model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).eval()
    # linear 2*4*3 = 24; batch norm in eval, affine: 2 per element (fvcore), 2*3*2 = 12
    assert FlopCountAnalysis(model, torch.randn(2, 4), tracer="dispatch", device=device).total() == 24 + 12


# transformers 5 deprecates the name (activation_checkpointing_enable); this test is of the reentrant path it takes
@pytest.mark.filterwarnings("ignore:`gradient_checkpointing_enable` is deprecated:FutureWarning")
def test_transformers_gradient_checkpointing_prices_the_recomputation() -> None:
    # gradient_checkpointing_enable() checkpoints each block with use_reentrant=True: the step
    # costs at least one more forward of the blocks, the same on real and meta tensors, and
    # writes no .grad. Before: TraceError (torch.autograd.grad through a reentrant checkpoint).
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=16, n_head=2, vocab_size=50, n_positions=8)
    model = transformers.GPT2LMHeadModel(config)
    ids = torch.randint(0, 50, (1, 8))
    kw = {"input_ids": ids, "labels": ids}
    plain = FlopCountAnalysis(model, (), kwargs=kw, tracer="dispatch", mode="train").total()
    blocks = FlopCountAnalysis(model, (), kwargs={"input_ids": ids}, tracer="dispatch").by_module()
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    real, meta = (
        FlopCountAnalysis(model, (), kwargs=kw, tracer="dispatch", mode="train", device=device).total()
        for device in (None, "meta")
    )
    assert real == meta
    assert real - plain >= blocks["transformer.h.0"] + blocks["transformer.h.1"]
    assert all(p.grad is None for p in model.parameters())
