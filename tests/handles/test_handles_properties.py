"""Properties of every registered flop formula (hypothesis).

Each registered operator has an example here: a real call of the aten (or torchvision) operator
on small CPU tensors whose batch size ``n`` and a free size ``k`` hypothesis draws. The call's
arguments and results become specs, and the handle must return a non-negative int (or a Counter
of them) that doubles when the batch doubles. A test fails when an operator has no example, so
new handles come with one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opcount.handles import FLOPS
from opcount.handles.counts import Cost
from opcount.ir import Const, ListSpec, Spec, TensorSpec
from tests.fixtures.backward_examples import BACKWARD_EXAMPLES, BACKWARD_NOT_BATCH_LINEAR, BACKWARD_SPEC_EXAMPLES

pytest.importorskip("torchvision")  # registers torch.ops.torchvision

aten = torch.ops.aten
tv = torch.ops.torchvision

# An example: (n, k) -> (operator callable, positional arguments). n is the batch.
Example = Callable[[int, int], tuple[Callable[..., Any], tuple[Any, ...]]]


def _x(n: int, k: int, *rest: int) -> torch.Tensor:
    return torch.rand(n, k, *rest) + 0.5  # positive: log, sqrt, pow stay finite


def _unary(name: str) -> Example:
    return lambda n, k: (getattr(aten, name), (_x(n, k, 3),))


def _binary(name: str) -> Example:
    return lambda n, k: (getattr(aten, name), (_x(n, k, 3), _x(1, k, 3)))


def _with(name: str, *extra: Any) -> Example:
    return lambda n, k: (getattr(aten, name), (_x(n, k, 3), *extra))


EXAMPLES: dict[str, Example] = {}

UNARY = [
    "abs",
    "acos",
    "acosh",
    "asin",
    "asinh",
    "atan",
    "atanh",
    "cos",
    "cosh",
    "erf",
    "erfc",
    "erfinv",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log10",
    "log1p",
    "log2",
    "neg",
    "negative",
    "reciprocal",
    "rsqrt",
    "sin",
    "sinh",
    "sqrt",
    "square",
    "tan",
    "relu",
    "tanh",
    "sigmoid",
    "silu",
    "hardsigmoid",
    "hardswish",
    "relu6",
    "selu",
    "mish",
    "log_sigmoid",
    "celu",
    "elu",
    "gelu",
    "softplus",
    "hardtanh",
    "leaky_relu",
]
for _name in UNARY:
    EXAMPLES[f"aten::{_name}"] = _unary(_name)
    if hasattr(aten, _name + "_") and _name not in ("log_sigmoid", "negative"):
        EXAMPLES[f"aten::{_name}_"] = _unary(_name + "_")
EXAMPLES["aten::negative"] = _unary("negative")
EXAMPLES["aten::rrelu"] = _unary("rrelu")
EXAMPLES["aten::rrelu_"] = _unary("rrelu_")

BINARY = [
    "add",
    "sub",
    "subtract",
    "mul",
    "multiply",
    "div",
    "divide",
    "true_divide",
    "pow",
    "atan2",
    "copysign",
    "fmax",
    "fmin",
    "hypot",
    "maximum",
    "minimum",
    "xlogy",
    "float_power",
]
for _name in BINARY:
    EXAMPLES[f"aten::{_name}"] = _binary(_name)
    if hasattr(aten, _name + "_") and _name not in ("maximum", "minimum", "fmax", "fmin", "float_power"):
        EXAMPLES[f"aten::{_name}_"] = _binary(_name + "_")
EXAMPLES["aten::float_power"] = lambda n, k: (aten.float_power, (_x(n, k, 3).double(), 2.0))
EXAMPLES["aten::rsub"] = _with("rsub", 1.0)
EXAMPLES["aten::gelu_"] = _unary("gelu_")


def _ternary(name: str) -> Example:
    return lambda n, k: (getattr(aten, name), (_x(n, k, 3), _x(n, k, 3), _x(1, k, 3)))


for _name in ("addcmul", "addcdiv", "addcmul_", "addcdiv_"):
    EXAMPLES[f"aten::{_name}"] = _ternary(_name)
EXAMPLES["aten::lerp"] = lambda n, k: (aten.lerp, (_x(n, k, 3), _x(n, k, 3), 0.3))
EXAMPLES["aten::lerp_"] = lambda n, k: (aten.lerp_, (_x(n, k, 3), _x(n, k, 3), 0.3))
# self[index] += source along dim 0: the source's rows (n of them) land on rows of self
for _name in ("index_add", "index_add_"):
    EXAMPLES[f"aten::{_name}"] = lambda n, k, _name=_name: (
        getattr(aten, _name),
        (_x(n, k, 3), 0, torch.arange(n), _x(n, k, 3)),
    )
for _name in ("scatter_add", "scatter_add_"):
    EXAMPLES[f"aten::{_name}"] = lambda n, k, _name=_name: (
        getattr(aten, _name),
        (_x(n, k, 3), 0, torch.zeros(n, k, 3, dtype=torch.long), _x(n, k, 3)),
    )
EXAMPLES["aten::where"] = lambda n, k: (aten.where, (_x(n, k, 3) > 1, _x(n, k, 3), _x(n, k, 3)))
for _name in ("clamp", "clamp_", "clip", "clip_"):
    EXAMPLES[f"aten::{_name}"] = _with(_name, 0.6, 1.2)
for _name in ("clamp_min", "clamp_min_", "clamp_max", "clamp_max_"):
    EXAMPLES[f"aten::{_name}"] = _with(_name, 1.0)
for _name in ("threshold", "threshold_"):
    EXAMPLES[f"aten::{_name}"] = _with(_name, 1.0, 0.0)
EXAMPLES["aten::prelu"] = lambda n, k: (aten.prelu, (_x(n, k, 3), torch.rand(k)))
EXAMPLES["aten::_prelu_kernel"] = lambda n, k: (aten._prelu_kernel, (_x(n, k, 3), torch.rand(k, 1)))
EXAMPLES["aten::glu"] = lambda n, k: (aten.glu, (_x(n, 2 * k, 3), 1))

for _name in ("softmax", "log_softmax", "special_softmax", "special_log_softmax"):
    EXAMPLES[f"aten::{_name}"] = _with(_name, -1)
EXAMPLES["aten::_softmax"] = _with("_softmax", 1, False)
EXAMPLES["aten::_log_softmax"] = _with("_log_softmax", 1, False)

# reductions over non-batch dims, so that doubling the batch doubles the work
for _name in (
    "sum",
    "nansum",
    "mean",
    "nanmean",
    "amax",
    "amin",
    "var",
    "std",
    "var_mean",
    "std_mean",
    "logsumexp",
    "frobenius_norm",
):
    EXAMPLES[f"aten::{_name}"] = _with(_name, [1, 2])
for _name in ("prod", "argmax", "argmin", "cumsum", "cumsum_", "cumprod", "cumprod_"):
    EXAMPLES[f"aten::{_name}"] = _with(_name, 1)
EXAMPLES["aten::diff"] = lambda n, k: (aten.diff, (_x(n, k, 3), 2, 1))
EXAMPLES["aten::max"] = _with("max", 1)
EXAMPLES["aten::min"] = lambda n, k: (aten.min, (_x(n, k, 3), _x(n, k, 3)))
EXAMPLES["aten::norm"] = _with("norm", 3, [1, 2])
EXAMPLES["aten::linalg_vector_norm"] = _with("linalg_vector_norm", 2, [1, 2])

# matrix products: the batch is the row count or the leading dim
EXAMPLES["aten::mm"] = lambda n, k: (aten.mm, (torch.rand(n, k), torch.rand(k, 3)))
EXAMPLES["aten::addmm"] = lambda n, k: (aten.addmm, (torch.rand(3), torch.rand(n, k), torch.rand(k, 3)))
EXAMPLES["aten::bmm"] = lambda n, k: (aten.bmm, (torch.rand(n, 2, k), torch.rand(n, k, 3)))


def _batched_product(name: str, bias_shape: tuple[int, ...] | None) -> Example:
    def build(n: int, k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        bias = torch.rand(*(bias_shape or (n, 2, 3)))
        return getattr(aten, name), (bias, torch.rand(n, 2, k), torch.rand(n, k, 3))

    return build


for _name in ("baddbmm", "baddbmm_"):
    EXAMPLES[f"aten::{_name}"] = _batched_product(_name, None)
for _name in ("addbmm", "addbmm_"):
    EXAMPLES[f"aten::{_name}"] = _batched_product(_name, (2, 3))
EXAMPLES["aten::matmul"] = lambda n, k: (aten.matmul, (torch.rand(n, 1, 2, k), torch.rand(4, k, 3)))
EXAMPLES["aten::linear"] = lambda n, k: (aten.linear, (torch.rand(n, 2, k), torch.rand(3, k), torch.rand(3)))
EXAMPLES["aten::mv"] = lambda n, k: (aten.mv, (torch.rand(n, k), torch.rand(k)))


def _addmv(name: str) -> Example:
    return lambda n, k: (getattr(aten, name), (torch.rand(n), torch.rand(n, k), torch.rand(k)))


for _name in ("addmv", "addmv_"):
    EXAMPLES[f"aten::{_name}"] = _addmv(_name)
EXAMPLES["aten::dot"] = lambda n, k: (aten.dot, (torch.rand(n * k), torch.rand(n * k)))
EXAMPLES["aten::vdot"] = lambda n, k: (aten.vdot, (torch.rand(n * k), torch.rand(n * k)))
EXAMPLES["aten::outer"] = lambda n, k: (aten.outer, (torch.rand(n), torch.rand(k)))
EXAMPLES["aten::ger"] = lambda n, k: (aten.ger, (torch.rand(n), torch.rand(k)))
EXAMPLES["aten::tensordot"] = lambda n, k: (aten.tensordot, (torch.rand(n, k, 3), torch.rand(k, 3, 2), [1, 2], [0, 1]))
# every operand carries the batch: with batch-free operands the cheapest order changes with the batch
EXAMPLES["aten::einsum"] = lambda n, k: (
    aten.einsum,
    ("bij,bjk,bkl->bil", [torch.rand(n, 2, k), torch.rand(n, k, 3), torch.rand(n, 3, 4)]),
)
EXAMPLES["aten::bilinear"] = lambda n, k: (
    aten.bilinear,
    (torch.rand(n, k), torch.rand(n, 3), torch.rand(2, k, 3), None),
)


def _conv_example(name: str, rank: int, transposed: bool = False) -> Example:
    def build(n: int, k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        x = torch.rand(n, 4, *(6,) * rank)
        w = torch.rand(4, 2 * k, *(3,) * rank) if transposed else torch.rand(2 * k, 2, *(3,) * rank)
        one, zero = [1] * rank, [0] * rank
        f = getattr(aten, name)
        if name == "_convolution":
            return f, (x, w, None, one, zero, one, transposed, zero, 1 if transposed else 2, False, False, True, True)
        if name == "convolution":
            return f, (x, w, None, one, zero, one, transposed, zero, 1 if transposed else 2)
        if name == "_convolution_mode":
            return f, (x, w, None, one, "same", one, 2)
        if transposed:
            return f, (x, w, None, one, zero, zero, 1, one)
        return f, (x, w, None, one, zero, one, 2)

    return build


for _rank in (1, 2, 3):
    EXAMPLES[f"aten::conv{_rank}d"] = _conv_example(f"conv{_rank}d", _rank)
    EXAMPLES[f"aten::conv_transpose{_rank}d"] = _conv_example(f"conv_transpose{_rank}d", _rank, transposed=True)
EXAMPLES["aten::_convolution"] = _conv_example("_convolution", 2, transposed=True)
EXAMPLES["aten::convolution"] = _conv_example("convolution", 1)
EXAMPLES["aten::_convolution_mode"] = _conv_example("_convolution_mode", 2)
# F.fold of 3x3 blocks, padding 1, stride 2, onto 6x6: 3x3 = 9 blocks
EXAMPLES["aten::col2im"] = lambda n, k: (aten.col2im, (torch.rand(n, 9 * k, 9), [6, 6], [3, 3], [1, 1], [1, 1], [2, 2]))


def _qkv(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.rand(n, 2, k, 8), torch.rand(n, 2, 5, 8), torch.rand(n, 2, 5, 4)


EXAMPLES["aten::scaled_dot_product_attention"] = lambda n, k: (
    aten.scaled_dot_product_attention,
    (*_qkv(n, k), None, 0.0, False),
)
EXAMPLES["aten::_scaled_dot_product_attention_math"] = lambda n, k: (
    aten._scaled_dot_product_attention_math,
    _qkv(n, k),
)
EXAMPLES["aten::_scaled_dot_product_flash_attention_for_cpu"] = lambda n, k: (
    aten._scaled_dot_product_flash_attention_for_cpu,
    (torch.rand(n, 2, k, 8), torch.rand(n, 2, 5, 8), torch.rand(n, 2, 5, 8)),
)


def _mha(n: int, k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    e = 8
    q = kv = torch.rand(n, k, e)  # the kernel wants equal shapes
    return aten._native_multi_head_attention, (
        q,
        kv,
        kv,
        e,
        2,
        torch.rand(3 * e, e),
        torch.rand(3 * e),
        torch.rand(e, e),
        torch.rand(e),
        None,
        False,
    )


EXAMPLES["aten::_native_multi_head_attention"] = _mha


def _encoder_layer(n: int, k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    e, f = 8, 16
    w = torch.rand

    return aten._transformer_encoder_layer_fwd, (
        torch.rand(n, k, e),
        e,
        2,
        w(3 * e, e),
        w(3 * e),
        w(e, e),
        w(e),
        False,
        False,
        1e-5,
        w(e),
        w(e),
        w(e),
        w(e),
        w(f, e),
        w(f),
        w(e, f),
        w(e),
    )


EXAMPLES["aten::_transformer_encoder_layer_fwd"] = _encoder_layer


def _bn(name: str) -> Example:
    def build(n: int, k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        c = torch.rand(k)
        x = torch.rand(n, k, 4)
        if name == "batch_norm":
            return aten.batch_norm, (x, c, c, c.clone(), c.clone() + 1, False, 0.1, 1e-5, False)
        if name == "_native_batch_norm_legit_no_training":
            return getattr(aten, name), (x, c, c, c.clone(), c.clone() + 1, 0.1, 1e-5)
        return getattr(aten, name), (x, c, c, c.clone(), c.clone() + 1, True, 0.1, 1e-5)

    return build


for _name in ("batch_norm", "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training"):
    EXAMPLES[f"aten::{_name}"] = _bn(_name)
EXAMPLES["aten::layer_norm"] = lambda n, k: (aten.layer_norm, (torch.rand(n, k, 4), [4], torch.rand(4), torch.rand(4)))
EXAMPLES["aten::native_layer_norm"] = lambda n, k: (
    aten.native_layer_norm,
    (torch.rand(n, k, 4), [4], torch.rand(4), torch.rand(4), 1e-5),
)
EXAMPLES["aten::group_norm"] = lambda n, k: (aten.group_norm, (torch.rand(n, 2 * k, 4), 2, torch.rand(2 * k), None))
EXAMPLES["aten::native_group_norm"] = lambda n, k: (
    aten.native_group_norm,
    (torch.rand(n, 2 * k, 4), None, None, n, 2 * k, 4, 2, 1e-5),
)
EXAMPLES["aten::instance_norm"] = lambda n, k: (
    aten.instance_norm,
    (torch.rand(n, k, 4), None, None, None, None, True, 0.1, 1e-5, False),
)
EXAMPLES["aten::rms_norm"] = lambda n, k: (aten.rms_norm, (torch.rand(n, k, 4), [4], torch.rand(4), None))


def _pool(name: str, rank: int, *extra: Any) -> Example:
    return lambda n, k: (getattr(aten, name), (torch.rand(n, k, *(6,) * rank), [2] * rank, *extra))


for _rank in (1, 2, 3):
    EXAMPLES[f"aten::max_pool{_rank}d"] = _pool(f"max_pool{_rank}d", _rank)
    EXAMPLES[f"aten::max_pool{_rank}d_with_indices"] = _pool(f"max_pool{_rank}d_with_indices", _rank)
    EXAMPLES[f"aten::avg_pool{_rank}d"] = _pool(f"avg_pool{_rank}d", _rank)
    EXAMPLES[f"aten::adaptive_max_pool{_rank}d"] = _pool(f"adaptive_max_pool{_rank}d", _rank)
for _name, _rank in (
    ("adaptive_avg_pool1d", 1),
    ("adaptive_avg_pool2d", 2),
    ("adaptive_avg_pool3d", 3),
    ("_adaptive_avg_pool2d", 2),
    ("_adaptive_avg_pool3d", 3),
):
    EXAMPLES[f"aten::{_name}"] = _pool(_name, _rank)


def _resize(name: str, rank: int, *extra: Any) -> Example:
    return lambda n, k: (getattr(aten, name), (torch.rand(n, k, *(3,) * rank), [5] * rank, *extra))


for _name, _rank, _extra in (
    ("upsample_nearest1d", 1, ()),
    ("upsample_nearest2d", 2, ()),
    ("upsample_nearest3d", 3, ()),
    ("_upsample_nearest_exact1d", 1, ()),
    ("_upsample_nearest_exact2d", 2, ()),
    ("_upsample_nearest_exact3d", 3, ()),
    ("upsample_linear1d", 1, (False,)),
    ("upsample_bilinear2d", 2, (False,)),
    ("upsample_bicubic2d", 2, (False,)),
    ("upsample_trilinear3d", 3, (False,)),
    ("_upsample_bilinear2d_aa", 2, (False,)),
    ("_upsample_bicubic2d_aa", 2, (False,)),
):
    EXAMPLES[f"aten::{_name}"] = _resize(_name, _rank, *_extra)
EXAMPLES["aten::grid_sampler"] = lambda n, k: (
    aten.grid_sampler,
    (torch.rand(n, k, 4, 4), torch.rand(n, 3, 3, 2) * 2 - 1, 0, 0, False),
)
EXAMPLES["aten::grid_sampler_2d"] = lambda n, k: (
    aten.grid_sampler_2d,
    (torch.rand(n, k, 4, 4), torch.rand(n, 3, 3, 2) * 2 - 1, 2, 0, False),
)
EXAMPLES["aten::grid_sampler_3d"] = lambda n, k: (
    aten.grid_sampler_3d,
    (torch.rand(n, k, 4, 4, 4), torch.rand(n, 3, 3, 3, 3) * 2 - 1, 0, 0, False),
)


def _rnn(name: str, gates: int) -> Example:
    def build(n: int, k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        hidden = 4
        params = [
            torch.rand(gates * hidden, 3),
            torch.rand(gates * hidden, hidden),
            torch.rand(gates * hidden),
            torch.rand(gates * hidden),
        ]
        x = torch.rand(k, n, 3)  # [T, B, I]: doubling the batch doubles the tokens
        h = torch.zeros(1, n, hidden)
        hx: Any = [h, h.clone()] if name == "lstm" else h
        return getattr(aten, name), (x, hx, params, True, 1, 0.0, False, False, False)

    return build


def _rnn_cell(name: str, gates: int) -> Example:
    def build(n: int, k: int) -> tuple[Callable[..., Any], tuple[Any, ...]]:
        hidden = 4
        x, h = torch.rand(n, 3), torch.zeros(n, hidden)
        hx: Any = [h, h.clone()] if name == "lstm" else h
        weights = (torch.rand(gates * hidden, 3), torch.rand(gates * hidden, hidden))
        return getattr(aten, f"{name}_cell"), (x, hx, *weights, torch.rand(gates * hidden), torch.rand(gates * hidden))

    return build


for _name, _gates in (("lstm", 4), ("gru", 3), ("rnn_tanh", 1), ("rnn_relu", 1)):
    EXAMPLES[f"aten::{_name}"] = _rnn(_name, _gates)
    EXAMPLES[f"aten::{_name}_cell"] = _rnn_cell(_name, _gates)


def _bag(name: str) -> Example:
    return lambda n, k: (
        getattr(aten, name),
        (torch.rand(10, k), torch.randint(0, 10, (4 * n,)), torch.arange(0, 4 * n, 4), False, 1),
    )


EXAMPLES["aten::embedding_bag"] = _bag("embedding_bag")
EXAMPLES["aten::_embedding_bag"] = _bag("_embedding_bag")
EXAMPLES["aten::embedding_dense_backward"] = lambda n, k: (
    aten.embedding_dense_backward,
    (torch.rand(n, k, 4), torch.randint(0, 10, (n, k)), 10, -1, False),
)


# Losses, reduction "none" (0): linear in the batch (a sum or mean is N - 1 or N).
def _target(n: int, k: int) -> torch.Tensor:
    return torch.rand(n, k, 3) * 0.5 + 0.25  # probabilities, away from 0 and 1


def _classes(n: int, k: int, *rest: int) -> torch.Tensor:
    return torch.randint(0, k, (n, *rest))


for _name, _extra in {
    "mse_loss": (),
    "l1_loss": (),
    "soft_margin_loss": (),
    "smooth_l1_loss": (1.0,),
    "huber_loss": (1.0,),
}.items():
    EXAMPLES[f"aten::{_name}"] = lambda n, k, name=_name, extra=_extra: (
        getattr(aten, name),
        (_x(n, k, 3), _target(n, k), 0, *extra),
    )
    if _name not in ("l1_loss",):
        EXAMPLES[f"aten::{_name}_backward"] = lambda n, k, name=_name, extra=_extra: (
            getattr(aten, f"{name}_backward"),
            (_x(n, k, 3), _x(n, k, 3), _target(n, k), 0, *extra),
        )
EXAMPLES["aten::kl_div"] = lambda n, k: (aten.kl_div, (_x(n, k, 3).log(), _target(n, k), 0))
EXAMPLES["aten::margin_ranking_loss"] = lambda n, k: (
    aten.margin_ranking_loss,
    (_x(n, k), _x(n, k), torch.ones(n, k), 0.0, 0),
)
EXAMPLES["aten::binary_cross_entropy"] = lambda n, k: (
    aten.binary_cross_entropy,
    (_target(n, k), _target(n, k), torch.rand(3), 0),
)
EXAMPLES["aten::binary_cross_entropy_backward"] = lambda n, k: (
    aten.binary_cross_entropy_backward,
    (_x(n, k, 3), _target(n, k), _target(n, k), torch.rand(3), 0),
)
EXAMPLES["aten::binary_cross_entropy_with_logits"] = lambda n, k: (
    aten.binary_cross_entropy_with_logits,
    (_x(n, k, 3), _target(n, k), torch.rand(3), torch.rand(3), 0),
)
for _name in ("nll_loss", "nll_loss_nd", "nll_loss_forward"):
    EXAMPLES[f"aten::{_name}"] = lambda n, k, name=_name: (
        getattr(aten, name),
        (_x(n, k).log(), _classes(n, k), torch.rand(k), 0, -100),
    )
for _name in ("nll_loss2d", "nll_loss2d_forward"):
    EXAMPLES[f"aten::{_name}"] = lambda n, k, name=_name: (
        getattr(aten, name),
        (_x(n, k, 2, 2).log(), _classes(n, k, 2, 2), torch.rand(k), 0, -100),
    )
EXAMPLES["aten::nll_loss_backward"] = lambda n, k: (
    aten.nll_loss_backward,
    (torch.rand(n), _x(n, k).log(), _classes(n, k), torch.rand(k), 0, -100, torch.tensor(1.0)),
)
EXAMPLES["aten::nll_loss2d_backward"] = lambda n, k: (
    aten.nll_loss2d_backward,
    (torch.rand(n, 2, 2), _x(n, k, 2, 2).log(), _classes(n, k, 2, 2), torch.rand(k), 0, -100, torch.tensor(1.0)),
)
EXAMPLES["aten::soft_margin_loss_backward"] = lambda n, k: (
    aten.soft_margin_loss_backward,
    (_x(n, k, 3), _x(n, k, 3), _target(n, k), 0),
)
EXAMPLES["aten::cross_entropy_loss"] = lambda n, k: (
    aten.cross_entropy_loss,
    (_x(n, k), _classes(n, k), torch.rand(k), 0, -100, 0.1),
)


def _rois(n: int) -> torch.Tensor:
    return torch.tensor([[0, 0.0, 0.0, 3.0, 3.0]] * n)


EXAMPLES["torchvision::roi_align"] = lambda n, k: (
    tv.roi_align,
    (torch.rand(1, k, 8, 8), _rois(n), 1.0, 2, 2, 2, False),
)
EXAMPLES["torchvision::ps_roi_align"] = lambda n, k: (
    tv.ps_roi_align,
    (torch.rand(1, 4 * k, 8, 8), _rois(n), 1.0, 2, 2, 2),
)
EXAMPLES["torchvision::roi_pool"] = lambda n, k: (tv.roi_pool, (torch.rand(1, k, 8, 8), _rois(n), 1.0, 2, 2))
EXAMPLES["torchvision::ps_roi_pool"] = lambda n, k: (tv.ps_roi_pool, (torch.rand(1, 4 * k, 8, 8), _rois(n), 1.0, 2, 2))
EXAMPLES["torchvision::nms"] = lambda n, k: (tv.nms, (torch.rand(n * k, 4).cumsum(1), torch.rand(n * k), 0.5))
EXAMPLES["torchvision::deform_conv2d"] = lambda n, k: (
    tv.deform_conv2d,
    (
        torch.rand(n, 2, 5, 5),
        torch.rand(k, 2, 3, 3),
        torch.rand(n, 18, 3, 3),
        torch.rand(n, 9, 3, 3),
        torch.rand(k),
        1,
        1,
        0,
        0,
        1,
        1,
        1,
        1,
        True,
    ),
)

# Not linear in the batch: nms compares every pair of boxes.
NOT_BATCH_LINEAR = {"torchvision::nms", "prim::CallFunction.torchvision.ops.boxes._batched_nms_coordinate_trick"}
# Kernels that only run on an accelerator, and TorchScript helpers: specs built by hand.
SPEC_EXAMPLES: dict[str, Callable[[int, int], tuple[list[Spec], list[Spec]]]] = {}


def _fused_specs(n: int, k: int) -> tuple[list[Spec], list[Spec]]:
    q, kv, out = TensorSpec((n, 2, k, 8)), TensorSpec((n, 2, 5, 8)), TensorSpec((n, 2, k, 8))
    return [q, kv, kv, Const(0.0), Const(False)], [out]


for _name in (
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention",
):
    SPEC_EXAMPLES[f"aten::{_name}"] = _fused_specs
SPEC_EXAMPLES["aten::cudnn_grid_sampler"] = lambda n, k: (
    [TensorSpec((n, k, 4, 4)), TensorSpec((n, 3, 3, 2))],
    [TensorSpec((n, k, 3, 3))],
)


_FN = Const(None, known=False)  # the called function, argument 0 of a prim::CallFunction
SPEC_EXAMPLES["prim::CallFunction.torchvision.ops.boxes._batched_nms_coordinate_trick"] = lambda n, k: (
    [_FN, TensorSpec((n * k, 4)), TensorSpec((n * k,)), TensorSpec((n * k,), "int64"), Const(0.5)],
    [TensorSpec((k,), "int64")],
)
SPEC_EXAMPLES["prim::CallFunction.torchvision.models.detection.roi_heads._onnx_paste_masks_in_image_loop"] = (
    lambda n, k: (
        [_FN, TensorSpec((n, 1, 7, 7)), TensorSpec((n, 4)), TensorSpec((), "int64"), TensorSpec((), "int64")],
        [TensorSpec((n, 1, 4 * k, 5 * k))],
    )
)
SPEC_EXAMPLES["prim::CallFunction.torchvision.models.detection.roi_heads._onnx_heatmaps_to_keypoints_loop"] = (
    lambda n, k: (
        [_FN, TensorSpec((n, k, 6, 6)), TensorSpec((n, 4)), *[TensorSpec((n,))] * 6, TensorSpec((), "int64")],
        [TensorSpec((n, 3, k)), TensorSpec((n, k))],
    )
)

# The backward kernels' examples live beside their handles' tests.
EXAMPLES.update(BACKWARD_EXAMPLES)
SPEC_EXAMPLES.update(BACKWARD_SPEC_EXAMPLES)
NOT_BATCH_LINEAR |= BACKWARD_NOT_BATCH_LINEAR


def to_spec(value: Any) -> Spec:
    if isinstance(value, torch.Tensor):
        return TensorSpec(tuple(value.shape), str(value.dtype).removeprefix("torch."))
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, torch.Tensor) or v is None for v in value):
            return ListSpec(tuple(to_spec(v) for v in value))
        return Const(tuple(value))
    return Const(value)


def _outputs(result: Any) -> list[Spec]:
    if isinstance(result, (list, tuple)):
        return [to_spec(r) for r in result]
    return [to_spec(result)]


def specs_of(op: str, n: int, k: int) -> tuple[list[Spec], list[Spec]]:
    if op in SPEC_EXAMPLES:
        return SPEC_EXAMPLES[op](n, k)
    fn, args = EXAMPLES[op](n, k)
    with torch.no_grad():
        result = fn(*args)
    return [to_spec(a) for a in args], _outputs(result)


def total(value: int | Counter[str] | Cost) -> int:
    if isinstance(value, Cost):  # multiply-adds and flops apart: each a count
        assert all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (value.macs, value.flops))
        return value.macs + value.flops
    if isinstance(value, Counter):
        assert all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value.values()), value
        return sum(value.values())
    assert isinstance(value, int) and not isinstance(value, bool), f"{value!r} is not an int"
    return value


def test_every_registered_operator_has_an_example() -> None:
    missing = sorted(set(FLOPS.handles) - set(EXAMPLES) - set(SPEC_EXAMPLES))
    assert not missing, f"add property-test examples for: {missing}"


def test_every_registered_operator_exists() -> None:
    """Catches misspelt operator names: each must be a real aten / torchvision operator."""
    for op in list(FLOPS.handles) + sorted(FLOPS.zero):
        namespace, name = op.split("::")
        if namespace in ("aten", "torchvision"):
            assert hasattr(getattr(torch.ops, namespace), name), op


@pytest.mark.parametrize("op", sorted(FLOPS.handles))
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), k=st.integers(1, 3))
def test_formula_is_a_non_negative_int_linear_in_batch(op: str, n: int, k: int) -> None:
    handle = FLOPS.handles[op]
    inputs, outputs = specs_of(op, n, k)
    once = total(handle(inputs, outputs))
    assert once >= 0
    inputs2, outputs2 = specs_of(op, 2 * n, k)
    twice = total(handle(inputs2, outputs2))
    if op in NOT_BATCH_LINEAR:
        assert twice >= once
    else:
        assert twice == 2 * once, f"{op}: batch {n} -> {once}, batch {2 * n} -> {twice}"
