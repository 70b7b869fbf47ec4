"""Property-test examples for the backward kernels' handles (opcount.handles.backward).

Each is a real call of the backward kernel on small CPU tensors, with the arguments autograd
passes it (the saved forward values made by the forward kernel); batch ``n``, free size ``k``.
GPU-only kernels (cuDNN, MIOpen, flash / efficient attention) have specs built by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from opcount.ir import Const, Spec, TensorSpec

aten = torch.ops.aten
Example = Callable[[int, int], tuple[Callable[..., Any], tuple[Any, ...]]]
BACKWARD_EXAMPLES: dict[str, Example] = {}
BACKWARD_SPEC_EXAMPLES: dict[str, Callable[[int, int], tuple[list[Spec], list[Spec]]]] = {}
# The bias gradient sums over the batch: numel(grad) - c_out adds, not linear in the batch.
BACKWARD_NOT_BATCH_LINEAR = {"aten::convolution_backward"}


def _x(n: int, k: int, *rest: int) -> torch.Tensor:
    return torch.rand(n, k, *rest) + 0.5


def _example(name: str, make: Callable[[int, int], tuple[Any, ...]]) -> None:
    BACKWARD_EXAMPLES[f"aten::{name}"] = lambda n, k: (getattr(aten, name), make(n, k))


def _grad_self(name: str, *extra: Any) -> None:
    """(grad, self, *extra) on [n, k, 3]."""
    _example(name, lambda n, k: (_x(n, k, 3), _x(n, k, 3), *extra))


_example(
    "convolution_backward",
    lambda n, k: (
        _x(n, 4, 3, 3),
        _x(n, k, 5, 5),
        _x(4, k, 3, 3),
        [4],
        [1, 1],
        [0, 0],
        [1, 1],
        False,
        [0, 0],
        1,
        [True, True, True],
    ),
)
for _name in ("threshold_backward",):
    _grad_self(_name, 0.0)
for _name in ("silu_backward", "sigmoid_backward", "tanh_backward", "hardswish_backward"):
    _grad_self(_name)
for _name in ("hardsigmoid_backward", "mish_backward"):
    _grad_self(_name)
BACKWARD_EXAMPLES["aten::gelu_backward"] = lambda n, k: (
    lambda g, x, approximate: aten.gelu_backward(g, x, approximate=approximate),  # as the tracer binds it
    (_x(n, k, 3), _x(n, k, 3), "none"),
)
_grad_self("hardtanh_backward", -1.0, 1.0)
_grad_self("leaky_relu_backward", 0.01, False)
_grad_self("softplus_backward", 1.0, 20.0)
_example("elu_backward", lambda n, k: (_x(n, k, 3), 1.0, 1.0, 1.0, False, _x(n, k, 3)))
_example("log_sigmoid_backward", lambda n, k: (_x(n, k, 3), x := _x(n, k, 3), aten.log_sigmoid_forward(x)[1]))
_example("glu_backward", lambda n, k: (_x(n, k, 2), _x(n, k, 4), -1))
_example("_prelu_kernel_backward", lambda n, k: (_x(n, k, 3), _x(n, k, 3), torch.rand(k, 1)))
_example("native_dropout_backward", lambda n, k: (_x(n, k, 3), torch.rand(n, k, 3) > 0.5, 2.0))
for _name in ("_softmax_backward_data", "_log_softmax_backward_data"):
    _example(_name, lambda n, k: (_x(n, k, 3), _x(n, k, 3), -1, torch.float32))


def _max_pool(d: int) -> Callable[[int, int], tuple[Any, ...]]:
    def make(n: int, k: int) -> tuple[Any, ...]:
        x = _x(n, k, *[4] * d)
        out, indices = getattr(aten, f"max_pool{d}d_with_indices")(x, [2] * d)
        return out, x, [2] * d, [2] * d, [0] * d, [1] * d, False, indices

    return make


def _adaptive_max(d: int) -> Callable[[int, int], tuple[Any, ...]]:
    def make(n: int, k: int) -> tuple[Any, ...]:
        x = _x(n, k, *[4] * d)
        out, indices = getattr(aten, f"adaptive_max_pool{d}d")(x, [2] * d)
        return out, x, indices

    return make


for _d in (2, 3):
    _example(f"max_pool{_d}d_with_indices_backward", _max_pool(_d))
    _example(
        f"avg_pool{_d}d_backward",
        lambda n, k, d=_d: (_x(n, k, *[2] * d), _x(n, k, *[4] * d), [2] * d, [2] * d, [0] * d, False, True, None),
    )
    _example(f"_adaptive_avg_pool{_d}d_backward", lambda n, k, d=_d: (_x(n, k, *[2] * d), _x(n, k, *[4] * d)))
    _example(f"adaptive_max_pool{_d}d_backward", _adaptive_max(_d))


def _batch_norm(n: int, k: int) -> tuple[Any, ...]:
    x, w, mean, var = _x(n, k, 3), torch.rand(k), torch.zeros(k), torch.ones(k)
    _, save_mean, save_invstd = aten.native_batch_norm(x, w, None, mean, var, True, 0.1, 1e-5)
    return _x(n, k, 3), x, w, mean, var, save_mean, save_invstd, True, 1e-5, [True, True, True]


def _layer_norm(n: int, k: int) -> tuple[Any, ...]:
    x, w, b = _x(n, k, 3), torch.rand(3), torch.rand(3)
    _, mean, rstd = aten.native_layer_norm(x, [3], w, b, 1e-5)
    return _x(n, k, 3), x, [3], mean, rstd, w, b, [True, True, True]


def _group_norm(n: int, k: int) -> tuple[Any, ...]:
    x, w = _x(n, 2 * k, 3), torch.rand(2 * k)
    _, mean, rstd = aten.native_group_norm(x, w, None, n, 2 * k, 3, 2, 1e-5)
    return _x(n, 2 * k, 3), x, mean, rstd, w, n, 2 * k, 3, 2, [True, True, False]


def _rms_norm(n: int, k: int) -> tuple[Any, ...]:
    # fused rms norm has CUDA and meta kernels only: meta tensors give the shapes
    x, w = torch.empty(n, k, 3, device="meta"), torch.empty(3, device="meta")
    _, rstd = aten._fused_rms_norm(x, [3], w, 1e-5)
    return torch.empty_like(x), x, [3], rstd, w, [True, True]


_example("native_batch_norm_backward", _batch_norm)
_example("native_layer_norm_backward", _layer_norm)
_example("native_group_norm_backward", _group_norm)
_example("_fused_rms_norm_backward", _rms_norm)


def _cudnn_batch_norm(n: int, k: int) -> tuple[list[Spec], list[Spec]]:
    x, c = TensorSpec((n, k, 3, 3)), TensorSpec((k,))
    return [x, TensorSpec((n, k, 3, 3)), c, c, c, c, c, Const(1e-5), TensorSpec((0,), "uint8")], [x, c, c]


BACKWARD_SPEC_EXAMPLES["aten::cudnn_batch_norm_backward"] = _cudnn_batch_norm
BACKWARD_SPEC_EXAMPLES["aten::miopen_batch_norm_backward"] = _cudnn_batch_norm

# upsample_*_backward(grad, output_size, input_size, *options): an upscale by 2
for _mode, _d, _options in (
    ("nearest", 1, (None,)),
    ("linear", 1, (False, None)),
    ("nearest", 2, (None, None)),
    ("bilinear", 2, (False, None, None)),
    ("bicubic", 2, (False, None, None)),
    ("nearest", 3, (None, None, None)),
    ("trilinear", 3, (False, None, None, None)),
):
    _example(
        f"upsample_{_mode}{_d}d_backward",
        lambda n, k, d=_d, o=_options: (_x(n, k, *[4] * d), [4] * d, [n, k, *[2] * d], *o),
    )


def _flash_cpu(n: int, k: int) -> tuple[Any, ...]:
    q, kv = _x(n, 2, k, 8), _x(n, 2, 5, 8)
    out, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu(q, kv, kv)
    return _x(n, 2, k, 8), q, kv, kv, out, logsumexp, 0.0, False, None, None


BACKWARD_EXAMPLES["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] = lambda n, k: (
    lambda *a: aten._scaled_dot_product_flash_attention_for_cpu_backward(*a[:8], attn_mask=a[8], scale=a[9]),
    _flash_cpu(n, k),
)


def _attention_specs(n_args: int, causal_at: int) -> Callable[[int, int], tuple[list[Spec], list[Spec]]]:
    """(grad_out, query, key, value, ...) of a GPU attention backward kernel, flags False, sizes None."""

    def specs(n: int, k: int) -> tuple[list[Spec], list[Spec]]:
        q, kv = TensorSpec((n, 2, k, 8)), TensorSpec((n, 2, 5, 8))
        rest: list[Spec] = [Const(None)] * (n_args - 4)
        rest[causal_at - 4] = Const(False)
        return [TensorSpec((n, 2, k, 8)), q, kv, kv, *rest], [q, kv, kv]

    return specs


BACKWARD_SPEC_EXAMPLES["aten::_scaled_dot_product_efficient_attention_backward"] = _attention_specs(13, 11)
BACKWARD_SPEC_EXAMPLES["aten::_scaled_dot_product_flash_attention_backward"] = _attention_specs(15, 11)
BACKWARD_SPEC_EXAMPLES["aten::_scaled_dot_product_cudnn_attention_backward"] = _attention_specs(16, 14)


def _mkldnn_lstm_layer(n: int, k: int) -> tuple[list[Spec], list[Spec]]:
    """One LSTM layer (oneDNN), 3 steps, batch n, input size k, hidden size 2, with biases."""
    x, out, h = TensorSpec((3, n, k)), TensorSpec((3, n, 2)), TensorSpec((1, n, 2))
    w_ih, w_hh, b = TensorSpec((8, k)), TensorSpec((8, 2)), TensorSpec((8,))
    flags = [Const(False), Const(2), Const(2), Const(1), Const(True), Const(True), Const(False), Const(())]
    inputs: list[Spec] = [x, w_ih, w_hh, b, b, h, h, out, h, h, out, h, h, *flags, Const(False), TensorSpec((0,))]
    return inputs, [x, w_ih, w_hh, b, b, h, h]


BACKWARD_SPEC_EXAMPLES["aten::mkldnn_rnn_layer_backward"] = _mkldnn_lstm_layer
