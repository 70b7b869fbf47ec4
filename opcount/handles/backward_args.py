"""Backward kernels' arguments, rebuilt as the forward call each one mirrors.

A training step's backward kernels (``threshold_backward``, ``native_batch_norm_backward``,
``convolution_backward``, ...) are priced in :mod:`.backward` as the forward operators they
mirror. This module says, for each kernel, which forward operator that is and how its
arguments are rebuilt from the kernel's own: a :data:`Rebuild` takes the kernel's inputs and
outputs and returns the forward calls (kind, inputs, outputs) it costs. The forward's output
is the incoming gradient: both have the forward output's shape.

The argument positions are those of the kernels' aten schemas (torch 2.13 and 2.14).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from ..ir import Const, ListSpec, Spec, TensorSpec, const, tensor

Forward = tuple[str, list[Spec], list[Spec]]  # (forward kind, its inputs, its outputs)
Rebuild = Callable[[Sequence[Spec], Sequence[Spec]], list[Forward]]

CONVOLUTION = "aten::_convolution"
SDPA = "aten::scaled_dot_product_attention"
NONE = Const(None)
# _convolution's trailing flags: benchmark, deterministic, cudnn_enabled, allow_tf32 (as jit records them).
_CONV_FLAGS = [Const(False), Const(False), Const(True), Const(True)]


class Mirror(NamedTuple):
    """A backward kernel priced as ``times`` calls of ``forward`` (plus any ``extra`` kinds the
    rebuild adds, such as the bias gradient's sum), with the forward arguments ``rebuild`` makes."""

    forward: str
    times: int
    rebuild: Rebuild
    args: str  # the forward's arguments in words, for the docs
    extra: tuple[str, ...] = ()


def _twice(kind: str, rebuild_args: Callable[[Sequence[Spec]], list[Spec]], args: str) -> Mirror:
    """Two calls of ``kind`` on ``rebuild_args(kernel inputs)``, each writing the gradient's shape."""

    def rebuild(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> list[Forward]:
        call: Forward = (kind, rebuild_args(inputs), [inputs[0]])
        return [call, call]

    return Mirror(kind, 2, rebuild, args)


# ----- convolution: one forward-sized convolution per gradient computed -------------------------
# convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
#                      transposed, output_padding, groups, output_mask) -> (d_input, d_weight, d_bias)
# The one statement of its argument layout: the roofline and the sparsity roofline read it too.
CONV_BACKWARD = "aten::convolution_backward"
CONV_BW_TRANSPOSED, CONV_BW_GROUPS, CONV_BW_MASK = 7, 9, 10


def output_mask(inputs: Sequence[Spec]) -> tuple[bool, bool, bool] | None:
    """Which of (d_input, d_weight, d_bias) a ``convolution_backward`` call computes; None when
    its ``output_mask`` argument is missing or not three flags."""
    try:
        mask = const(inputs[CONV_BW_MASK])
    except (IndexError, ValueError):
        return None
    return mask if isinstance(mask, tuple) and len(mask) == 3 else None


def required_output_mask(inputs: Sequence[Spec]) -> tuple[bool, bool, bool]:
    """:func:`output_mask`, or a ValueError naming the argument a handle cannot do without."""
    mask = output_mask(inputs)
    if mask is None:
        given = inputs[CONV_BW_MASK] if len(inputs) > CONV_BW_MASK else "nothing"
        raise ValueError(f"convolution_backward: argument {CONV_BW_MASK} is not 'output_mask': {given!r}")
    return mask


def conv_backward(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> list[Forward]:
    grad, x, w, _, stride, padding, dilation, transposed, output_padding, groups = inputs[:CONV_BW_MASK]
    mask = required_output_mask(inputs)
    conv_args = [x, w, NONE, stride, padding, dilation, transposed, output_padding, groups, *_CONV_FLAGS]
    calls: list[Forward] = [(CONVOLUTION, conv_args, [grad]) for needed in mask[:2] if needed]
    if mask[2]:
        # d_bias = grad_output summed over the batch and the positions, as linear's bias gradient
        dims = Const(tuple(d for d in range(tensor(grad).rank) if d != 1))
        calls.append(("aten::sum", [grad, dims, Const(False), NONE], [outputs[2]]))
    return calls


# ----- activations, dropout, softmax, pooling: two of the forward ------------------------
def _shape_tail(spec: Spec, n: int) -> Const:
    return Const(tensor(spec).shape[-n:])


# kernel -> (forward kind, the forward's arguments from the kernel's, those arguments in words)
_FUSED: dict[str, tuple[str, Callable[[Sequence[Spec]], list[Spec]], str]] = {
    "threshold_backward": ("aten::relu", lambda a: [a[1]], "self"),  # (grad, self, threshold)
    "gelu_backward": ("aten::gelu", lambda a: [a[1], a[2]], "self, approximate"),
    "silu_backward": ("aten::silu", lambda a: [a[1]], "self"),
    "sigmoid_backward": ("aten::sigmoid", lambda a: [a[1]], "output"),  # (grad, output)
    "tanh_backward": ("aten::tanh", lambda a: [a[1]], "output"),  # (grad, output)
    "hardswish_backward": ("aten::hardswish", lambda a: [a[1]], "self"),
    "hardsigmoid_backward": ("aten::hardsigmoid", lambda a: [a[1]], "self"),
    "hardtanh_backward": ("aten::hardtanh", lambda a: [a[1], a[2], a[3]], "self, min, max"),
    "leaky_relu_backward": ("aten::leaky_relu", lambda a: [a[1], a[2]], "self, slope"),
    # (grad, alpha, scale, input_scale, is_result, self_or_result)
    "elu_backward": ("aten::elu", lambda a: [a[5], a[1], a[2], a[3]], "self_or_result, alpha, scale, input_scale"),
    "softplus_backward": ("aten::softplus", lambda a: [a[1], a[2], a[3]], "self, beta, threshold"),
    "mish_backward": ("aten::mish", lambda a: [a[1]], "self"),
    "log_sigmoid_backward": ("aten::log_sigmoid", lambda a: [a[1]], "self"),  # (grad, self, buffer)
    "glu_backward": ("aten::glu", lambda a: [a[1], a[2]], "self, dim"),
    "_prelu_kernel_backward": ("aten::_prelu_kernel", lambda a: [a[1], a[2]], "self, weight"),
    # (grad, mask, scale): the forward's input has the gradient's shape
    "native_dropout_backward": ("aten::dropout", lambda a: [a[0], Const(0.5), Const(True)], "grad, 0.5, train"),
    "_softmax_backward_data": (
        "aten::softmax",
        lambda a: [a[1], a[2], NONE],
        "output, dim",
    ),  # (grad, output, dim, dtype)
    "_log_softmax_backward_data": ("aten::log_softmax", lambda a: [a[1], a[2], NONE], "output, dim"),
    # pooling: (grad, self, kernel_size, stride, padding, ...) as the forward's arguments
    "max_pool2d_with_indices_backward": ("aten::max_pool2d", lambda a: [a[1], *a[2:7]], "self, window"),
    "max_pool3d_with_indices_backward": ("aten::max_pool3d", lambda a: [a[1], *a[2:7]], "self, window"),
    "avg_pool2d_backward": ("aten::avg_pool2d", lambda a: [a[1], *a[2:8]], "self, window"),
    "avg_pool3d_backward": ("aten::avg_pool3d", lambda a: [a[1], *a[2:8]], "self, window"),
    # (grad, self): the output size is the gradient's
    "_adaptive_avg_pool2d_backward": ("aten::adaptive_avg_pool2d", lambda a: [a[1], _shape_tail(a[0], 2)], "self"),
    "_adaptive_avg_pool3d_backward": ("aten::adaptive_avg_pool3d", lambda a: [a[1], _shape_tail(a[0], 3)], "self"),
    "adaptive_max_pool2d_backward": ("aten::adaptive_max_pool2d", lambda a: [a[1], _shape_tail(a[0], 2)], "self"),
    "adaptive_max_pool3d_backward": ("aten::adaptive_max_pool3d", lambda a: [a[1], _shape_tail(a[0], 3)], "self"),
}

MIRRORS: dict[str, Mirror] = {
    CONV_BACKWARD: Mirror(CONVOLUTION, 2, conv_backward, "input, weight, stride, ... (no bias)", extra=("aten::sum",)),
    **{"aten::" + name: _twice(kind, fn, args) for name, (kind, fn, args) in _FUSED.items()},
}


# ----- normalizations ------------------------------------------------------------------------------
_EPS, _MOMENTUM, _ON = Const(1e-5), Const(0.1), Const(True)
# native_batch_norm_backward(grad, input, weight, running_mean, running_var, save_mean, save_invstd,
#                            train, eps, output_mask)
MIRRORS["aten::native_batch_norm_backward"] = _twice(
    "aten::batch_norm", lambda a: [a[1], a[2], NONE, a[3], a[4], a[7], _MOMENTUM, a[8], _ON], "input, weight, train"
)
# cudnn/miopen_batch_norm_backward(input, grad, weight, running_mean, running_var, save_mean, save_var, eps, ...)
for _name in ("cudnn_batch_norm_backward", "miopen_batch_norm_backward"):
    MIRRORS["aten::" + _name] = Mirror(
        "aten::batch_norm",
        2,
        lambda ins, outs: (
            2 * [("aten::batch_norm", [ins[0], ins[2], NONE, ins[3], ins[4], _ON, _MOMENTUM, ins[7], _ON], [ins[1]])]
        ),
        "input, weight, training",
    )
# native_layer_norm_backward(grad, input, normalized_shape, mean, rstd, weight, bias, output_mask)
MIRRORS["aten::native_layer_norm_backward"] = _twice(
    "aten::layer_norm", lambda a: [a[1], a[2], a[5], a[6], _EPS, _ON], "input, normalized_shape, weight, bias"
)
# native_group_norm_backward(grad, input, mean, rstd, weight, N, C, HxW, group, output_mask)
MIRRORS["aten::native_group_norm_backward"] = _twice(
    "aten::group_norm", lambda a: [a[1], a[8], a[4], NONE, _EPS, _ON], "input, groups, weight"
)
# _fused_rms_norm_backward(grad, input, normalized_shape, rstd, weight, output_mask)
MIRRORS["aten::_fused_rms_norm_backward"] = _twice(
    "aten::rms_norm", lambda a: [a[1], a[2], a[4], NONE], "input, normalized_shape, weight"
)


# ----- resampling: upsample_*_backward(grad, output_size, input_size, *options) -------------------
def _upsample(kind: str, n_options: int) -> Mirror:
    def rebuild(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> list[Forward]:
        grad, output_size, input_size = inputs[:3]
        size = const(input_size)
        if not isinstance(size, tuple):
            raise ValueError(f"{kind}_backward: argument 2 is not 'input_size': {size!r}")
        # the forward's input, which the kernel only names by its size
        x = TensorSpec(tuple(int(s) for s in size), tensor(grad).dtype)
        call: Forward = (kind, [x, output_size, *inputs[3 : 3 + n_options]], [grad])
        return [call, call]

    return Mirror(kind, 2, rebuild, "an input of size input_size, output_size, options")


for _dims, _modes in (
    (1, {"nearest": 1, "linear": 2}),
    (2, {"nearest": 2, "bilinear": 3, "bicubic": 3}),
    (3, {"nearest": 3, "trilinear": 4}),
):
    for _mode, _n in _modes.items():
        _kind = f"aten::upsample_{_mode}{_dims}d"
        MIRRORS[f"{_kind}_backward"] = _upsample(_kind, _n)


# ----- attention: four products where the forward runs two, so two forwards exactly --------------
def attention(q_at: int, mask_at: int | None, dropout_at: int, causal_at: int, scale_at: int) -> Mirror:
    """Two sdpa(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa) calls."""

    def rebuild(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> list[Forward]:
        q, k, v = inputs[q_at : q_at + 3]
        mask = inputs[mask_at] if mask_at is not None else NONE
        args = [q, k, v, mask, inputs[dropout_at], inputs[causal_at], inputs[scale_at], Const(False)]
        call: Forward = (SDPA, args, [inputs[0]])
        return [call, call]

    return Mirror(SDPA, 2, rebuild, "query, key, value, attn_mask, dropout_p, is_causal, scale")


# (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask, scale)
MIRRORS["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] = attention(1, 8, 6, 7, 9)
# (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
#  grad_input_mask, is_causal, scale)
MIRRORS["aten::_scaled_dot_product_efficient_attention_backward"] = attention(1, 4, 9, 11, 12)
# (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
#  is_causal, philox_seed, philox_offset, scale)
MIRRORS["aten::_scaled_dot_product_flash_attention_backward"] = attention(1, None, 10, 11, 14)
# (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q,
#  cum_seq_k, max_q, max_k, dropout_p, is_causal, scale)
MIRRORS["aten::_scaled_dot_product_cudnn_attention_backward"] = attention(1, 8, 13, 14, 15)
ATTENTION_BACKWARD = tuple(op for op, m in MIRRORS.items() if m.forward == SDPA)


# ----- recurrent layers: CPU's oneDNN LSTM, one layer and direction per kernel ---------------------
# mkldnn_rnn_layer_backward(input, weight1 (w_ih), weight2 (w_hh), weight3 (b_ih), weight4 (b_hh), hx_,
#   cx_tmp, output, hy_, cy_, grad_output, grad_hy, grad_cy, reverse, mode, hidden_size, num_layers,
#   has_biases, train, bidirectional, batch_sizes, batch_first, workspace)
MKLDNN_RNN_HAS_BIASES, MKLDNN_RNN_TRAIN, MKLDNN_RNN_BATCH_FIRST = 17, 18, 21


def _mkldnn_lstm_layer(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> list[Forward]:
    biases = const(inputs[MKLDNN_RNN_HAS_BIASES])
    if not isinstance(biases, bool):
        raise ValueError(f"mkldnn_rnn_layer_backward: argument {MKLDNN_RNN_HAS_BIASES} is not 'has_biases': {biases!r}")
    weights = ListSpec(tuple(inputs[1:5] if biases else inputs[1:3]))
    # lstm.input(input, hx[], params[], has_biases, num_layers, dropout, train, bidirectional, batch_first)
    args = [inputs[0], ListSpec((inputs[5], inputs[6])), weights, Const(biases), Const(1), Const(0.0)]
    args += [inputs[MKLDNN_RNN_TRAIN], Const(False), inputs[MKLDNN_RNN_BATCH_FIRST]]
    call: Forward = ("aten::lstm", args, [inputs[7]])
    return [call, call]


MIRRORS["aten::mkldnn_rnn_layer_backward"] = Mirror(
    "aten::lstm", 2, _mkldnn_lstm_layer, "input, hx, the layer's weights, has_biases, one layer and direction"
)
