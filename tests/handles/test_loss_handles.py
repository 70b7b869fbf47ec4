"""Loss functions and their backward kernels: closed forms worked by hand, and training steps
with a loss that leave no operator unsupported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from opcount import FlopCountAnalysis, MemoryTrafficAnalysis, TensorShape
from opcount.handles import FLOPS, MEMORY
from opcount.ir import Const, TensorSpec

NONE, MEAN, SUM = Const(0), Const(1), Const(2)
X, Y = TensorSpec((2, 3)), TensorSpec((2, 3))  # N = 6 elements, float32
G = TensorSpec(())  # the incoming gradient of a reduced loss


def flops(op: str, *inputs: Any, out: TensorSpec = G) -> Any:
    return FLOPS.handles[op](list(inputs), [out])


def moved(op: str, *inputs: Any, outputs: tuple[TensorSpec, ...] = (G,)) -> tuple[float, float]:
    traffic: Any = MEMORY.handles[op](list(inputs), list(outputs))
    return traffic.read_bytes, traffic.write_bytes


# ----- pointwise losses: per-element operations * 6, plus the reduction (none 0, sum 5, mean 6) ---
@pytest.mark.parametrize(("reduction", "r"), [(NONE, 0), (SUM, 5), (MEAN, 6)])
def test_pointwise_losses(reduction: Const, r: int) -> None:
    assert flops("aten::mse_loss", X, Y, reduction) == 2 * 6 + r  # subtract, square
    assert flops("aten::l1_loss", X, Y, reduction) == 2 * 6 + r  # subtract, abs
    assert flops("aten::smooth_l1_loss", X, Y, reduction, Const(1.0)) == 6 * 6 + r
    assert flops("aten::huber_loss", X, Y, reduction, Const(1.0)) == 7 * 6 + r
    assert flops("aten::soft_margin_loss", X, Y, reduction) == 4 * 6 + r  # mul, neg, exp, log1p
    assert flops("aten::kl_div", X, Y, reduction, Const(False)) == 3 * 6 + r  # log, sub, mul
    assert flops("aten::binary_cross_entropy", X, Y, Const(None), reduction) == 9 * 6 + r
    assert flops("aten::binary_cross_entropy", X, Y, TensorSpec((3,)), reduction) == 10 * 6 + r
    bcel = "aten::binary_cross_entropy_with_logits"
    assert flops(bcel, X, Y, Const(None), Const(None), reduction) == 10 * 6 + r
    assert flops(bcel, X, Y, TensorSpec((3,)), TensorSpec((3,)), reduction) == (10 + 4 + 1) * 6 + r
    # max(0, -y * (x1 - x2) + margin) on three [4] operands: 5 * 4, sum 3 / mean 4
    m = flops("aten::margin_ranking_loss", *[TensorSpec((4,))] * 3, Const(0.0), reduction)
    assert m == 5 * 4 + {0: 0, 5: 3, 6: 4}[r]


def test_a_broadcast_target_counts_the_broadcast_shape() -> None:
    # [2, 3] against [3]: six differences and squares, then the mean's 6
    assert flops("aten::mse_loss", X, TensorSpec((3,)), MEAN) == 2 * 6 + 6


def test_pointwise_backward_kernels() -> None:
    for reduction in (NONE, SUM, MEAN):
        grad = TensorSpec((2, 3)) if reduction is NONE else G
        # norm * (x - y) * grad: 3 per element, norm (2 or 2 / N) a scalar
        assert flops("aten::mse_loss_backward", grad, X, Y, reduction, out=X) == 3 * 6
        assert flops("aten::smooth_l1_loss_backward", grad, X, Y, reduction, Const(1.0), out=X) == 6 * 6
        assert flops("aten::huber_loss_backward", grad, X, Y, reduction, Const(1.0), out=X) == 6 * 6
        assert flops("aten::soft_margin_loss_backward", grad, X, Y, reduction, out=X) == 8 * 6
    bce = "aten::binary_cross_entropy_backward"
    # grad * (x - y) / max((1 - x) * x, eps): 6 per element; a weight +1; mean's divide by N +1
    assert flops(bce, G, X, Y, Const(None), SUM, out=X) == 6 * 6
    assert flops(bce, G, X, Y, Const(None), MEAN, out=X) == 7 * 6
    assert flops(bce, G, X, Y, TensorSpec((3,)), MEAN, out=X) == 8 * 6


# ----- class losses: S = 4 samples of C = 5 classes ---------------------------------------------
LOGP, T, W = TensorSpec((4, 5)), TensorSpec((4,), "int64"), TensorSpec((5,))


@pytest.mark.parametrize("op", ["aten::nll_loss", "aten::nll_loss_nd", "aten::nll_loss_forward"])
def test_nll_loss(op: str) -> None:
    ignore = Const(-100)
    assert flops(op, LOGP, T, Const(None), NONE, ignore) == 4  # one negation per sample
    assert flops(op, LOGP, T, Const(None), SUM, ignore) == 4 + 3
    assert flops(op, LOGP, T, Const(None), MEAN, ignore) == 4 + 4
    # weighted: + 4 multiplies; the mean divides by the 4 picked weights' sum (+ 3 adds)
    assert flops(op, LOGP, T, W, MEAN, ignore) == 8 + 4 + 3
    assert flops(op, LOGP, T, W, SUM, ignore) == 8 + 3


def test_nll_loss2d_counts_each_position_a_sample() -> None:
    x, t = TensorSpec((2, 5, 3, 3)), TensorSpec((2, 3, 3), "int64")  # S = 18
    assert flops("aten::nll_loss2d", x, t, Const(None), MEAN, Const(-100)) == 18 + 18


def test_nll_loss_backward() -> None:
    for op in ("aten::nll_loss_backward", "aten::nll_loss2d_backward"):
        args = (Const(-100), TensorSpec(()))
        assert flops(op, G, LOGP, T, Const(None), SUM, *args, out=LOGP) == 4  # -grad per sample
        assert flops(op, G, LOGP, T, Const(None), MEAN, *args, out=LOGP) == 4 + 4  # / total weight
        assert flops(op, G, LOGP, T, W, MEAN, *args, out=LOGP) == 4 + 4 + 4


def test_cross_entropy() -> None:
    op = "aten::cross_entropy_loss"
    ignore, no_smoothing = Const(-100), Const(0.0)
    # log_softmax 3 * 20, then nll_loss: 4 negations + mean 4
    assert flops(op, LOGP, T, Const(None), MEAN, ignore, no_smoothing) == 60 + 8
    assert flops(op, LOGP, T, Const(None), NONE, ignore, no_smoothing) == 60 + 4
    # class probabilities [4, 5]: 20 multiplies, 16 adds + 4 negations, mean over 4 samples
    probs = TensorSpec((4, 5))
    assert flops(op, LOGP, probs, Const(None), MEAN, ignore, no_smoothing) == 60 + 20 + 20 + 4
    # label smoothing with indices: the smoothing term 16 adds + 4 negations, its mean 4, mixing 3
    assert flops(op, LOGP, T, Const(None), MEAN, ignore, Const(0.1)) == 60 + 8 + 20 + 4 + 3


def test_a_bad_reduction_names_the_operator() -> None:
    with pytest.raises(ValueError, match=r"mse_loss.*reduction"):
        flops("aten::mse_loss", X, Y, Const(7))


def test_presets_fvcore_and_macs_leave_losses_out() -> None:
    model, ids = _embedding_linear()
    step = {"tracer": "dispatch", "mode": "train", "loss_fn": _LOSSES["mse"]}
    fvcore = FlopCountAnalysis(model, ids, preset="fvcore", **step)
    fvcore.unsupported_ops_warnings(False)
    assert {"aten::mse_loss", "aten::mse_loss_backward"} <= set(fvcore.unsupported_ops())  # as fvcore
    macs = FlopCountAnalysis(model, ids, preset="macs", **step).by_operator()
    assert not any("loss" in op for op, n in macs.items() if n)
    assert not FLOPS.handles["aten::mse_loss"].macs and not FLOPS.handles["aten::mse_loss"].fvcore


# ----- bytes (float32: 4 bytes an element) ------------------------------------------------------
def test_loss_traffic() -> None:
    # reads x and y (24 bytes each), writes the scalar loss (4)
    assert moved("aten::mse_loss", X, Y, MEAN) == (48, 4)
    # the backward reads grad (4), x and y, writes d_x (24)
    assert moved("aten::mse_loss_backward", G, X, Y, MEAN, outputs=(X,)) == (4 + 48, 24)
    # nll_loss reads the 4 picked log-probabilities (16) and the int64 target (32), writes the loss
    assert moved("aten::nll_loss_nd", LOGP, T, Const(None), MEAN, Const(-100)) == (16 + 32, 4)
    # its backward reads grad, target and total weight (4 + 32 + 4), writes d_x [4, 5] in full (80)
    bw = moved("aten::nll_loss_backward", G, LOGP, T, Const(None), MEAN, Const(-100), G, outputs=(LOGP,))
    assert bw == (4 + 32 + 4, 80)
    # cross_entropy: reads x (80), writes log-probs (80), reads 4 of them back (16) and the target
    ce = moved("aten::cross_entropy_loss", LOGP, T, Const(None), MEAN, Const(-100), Const(0.0))
    assert ce == (80 + 16 + 32, 80 + 4)


def test_embedding_dense_backward_traffic() -> None:
    # reads grad [4, 8, 16] (2048 bytes) and int64 indices [4, 8] (256), writes [100, 16] (6400)
    grad, idx, out = TensorSpec((4, 8, 16)), TensorSpec((4, 8), "int64"), TensorSpec((100, 16))
    args = (grad, idx, Const(100), Const(-1), Const(False))
    assert moved("aten::embedding_dense_backward", *args, outputs=(out,)) == (2048 + 256, 6400)


def test_a_view_gradient_reads_the_gradient_and_writes_the_input_size() -> None:
    # select_backward(grad [4], input_sizes [4, 2], dim 1, index 0): reads 16 bytes, writes [4, 2] (32)
    args = (TensorSpec((4,)), Const((4, 2)), Const(1), Const(0))
    assert moved("aten::select_backward", *args, outputs=(TensorSpec((4, 2)),)) == (16, 32)


# ----- training steps with a loss -----------------------------------------------------------------
def _embedding_linear() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(100, 16), nn.Linear(16, 10)), torch.randint(0, 100, (4, 8))


_CLASSES = torch.randint(0, 10, (32,))
_TARGET = torch.rand(4, 8, 10)
_LOSSES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "cross_entropy": lambda o: F.cross_entropy(o.reshape(-1, 10), _CLASSES),
    "mse": lambda o: F.mse_loss(o, _TARGET),
    "l1": lambda o: F.l1_loss(o, _TARGET),
    "bce_with_logits": lambda o: F.binary_cross_entropy_with_logits(o, _TARGET),
    "smooth_l1": lambda o: F.smooth_l1_loss(o, _TARGET),
    "nll_loss": lambda o: F.nll_loss(F.log_softmax(o, -1).reshape(-1, 10), _CLASSES),
    "margin_ranking": lambda o: F.margin_ranking_loss(o[..., 0], o[..., 1], _TARGET[..., 0]),
}


@pytest.mark.parametrize("loss", sorted(_LOSSES))
def test_a_training_step_with_a_loss_is_priced_in_full(loss: str) -> None:
    model, ids = _embedding_linear()
    for analysis in (FlopCountAnalysis, MemoryTrafficAnalysis):
        step = analysis(model, ids, tracer="dispatch", mode="train", loss_fn=_LOSSES[loss])
        step.unsupported_ops_warnings(False)
        assert not step.unsupported_ops(), (analysis.__name__, dict(step.unsupported_ops()))


def test_a_training_step_counts_the_loss_and_its_backward() -> None:
    model, ids = _embedding_linear()
    step = FlopCountAnalysis(model, ids, tracer="dispatch", mode="train", loss_fn=_LOSSES["mse"]).by_operator()
    # 320 outputs: (x - y)^2 and the mean, 2 * 320 + 320; backward 3 * 320
    assert (step["mse_loss"], step["mse_loss_backward"]) == (3 * 320, 3 * 320)
    # the embedding's weight gradient: one add per looked-up row element, 32 * 16
    assert step["embedding_dense_backward"] == 32 * 16


def test_gpt2_training_with_its_own_loss_is_priced_in_full() -> None:
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    with torch.device("meta"):
        model = transformers.GPT2LMHeadModel(cfg)
    ids = TensorShape((1, 16), torch.long)
    for analysis in (FlopCountAnalysis, MemoryTrafficAnalysis):
        step = analysis(model, (ids,), {"labels": ids}, tracer="dispatch", mode="train", loss_fn=lambda out: out.loss)
        step.unsupported_ops_warnings(False)
        assert not step.unsupported_ops(), (analysis.__name__, dict(step.unsupported_ops()))
        assert "cross_entropy_loss" in step.by_operator()


class _WithLoss(nn.Module):
    """The embedding + linear model returning its loss: the jit tracer records the loss forward."""

    def __init__(self, loss: str) -> None:
        super().__init__()
        self.model, self.loss = _embedding_linear()[0], _LOSSES[loss]

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.loss(self.model(ids))


@pytest.mark.parametrize("loss", sorted(_LOSSES))
def test_the_jit_tracer_records_the_same_loss_operators(loss: str) -> None:
    ids = _embedding_linear()[1]
    jit = FlopCountAnalysis(_WithLoss(loss), ids).unsupported_ops_warnings(False)
    dispatch = FlopCountAnalysis(_WithLoss(loss), ids, tracer="dispatch").unsupported_ops_warnings(False)
    assert not jit.unsupported_ops()
    assert jit.by_operator() == dispatch.by_operator()
