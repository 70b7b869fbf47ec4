"""What the dispatch tracer records for an aten operator: the jit tracer's kind and argument layout.

The handles are written against the operators the jit tracer records (``aten::linear``,
``aten::_convolution``, ``aten::batch_norm``, ...). The dispatch tracer sees the same operators in
the forward pass (it runs it below autograd, where composite operators arrive whole, see
:mod:`.dispatch`); this module only has to

- bind each call's arguments to its schema, defaults included, as jit records them;
- rename the few operators the jit tracer records differently (``conv2d`` -> ``_convolution``);
- express backward kernels as the forward operators they mirror, so the same handles price
  them (``convolution_backward`` -> one ``_convolution`` per gradient computed).

A record is ``(kind, inputs, outputs)`` with values still as torch gives them (tensors, Python
scalars, lists) or already as :mod:`opcount.ir` specs; the tracer converts the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from ..ir import TensorSpec
from ..torch_internals import op_schema

Record = tuple[str, list[Any], list[Any]]
Normalizer = Callable[[list[Any], list[Any]], list[Record]]

# The jit tracer's constants for dtypes, layouts and memory formats are c10's enum values.
_SCALAR_TYPES = [
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex32",
    "complex64",
    "complex128",
    "bool",
    "qint8",
    "quint8",
    "qint32",
    "bfloat16",
    "quint4x2",
    "quint2x4",
    "bits1x8",
    "bits2x4",
    "bits4x2",
    "bits8",
    "bits16",
    "float8_e5m2",
    "float8_e4m3fn",
    "float8_e5m2fnuz",
    "float8_e4m3fnuz",
    "uint16",
    "uint32",
    "uint64",
]
JIT_DTYPE: dict[torch.dtype, int] = {
    getattr(torch, name): code for code, name in enumerate(_SCALAR_TYPES) if hasattr(torch, name)
}
JIT_LAYOUT: dict[torch.layout, int] = {torch.strided: 0, torch.sparse_coo: 1}
JIT_MEMORY_FORMAT: dict[torch.memory_format, int] = {
    torch.contiguous_format: 0,
    torch.preserve_format: 1,
    torch.channels_last: 2,
    torch.channels_last_3d: 3,
}


def jit_constant(value: Any) -> Any:
    """A torch enum argument as the jit tracer records it (an int); other values unchanged."""
    if isinstance(value, torch.dtype):
        return JIT_DTYPE.get(value, value)
    if isinstance(value, torch.layout):
        return JIT_LAYOUT.get(value, value)
    if isinstance(value, torch.memory_format):
        return JIT_MEMORY_FORMAT.get(value, value)
    return value


class Schema(NamedTuple):
    """What the tracer reads of an operator's schema, read once per operator."""

    name: str  # "aten::conv2d"
    defaults: tuple[tuple[str, Any], ...]  # (argument name, default or None), in order
    returns: int
    number: int  # numbers the operators seen: a cheap key (an OpOverload hashes in Python)


_SCHEMAS: dict[Any, Schema] = {}


def schema(func: Any) -> Schema:
    """What the tracer reads of ``func``'s (an ``OpOverload``'s) schema, read once per operator."""
    found = _SCHEMAS.get(func)
    if found is None:
        s = op_schema(func)
        defaults = tuple((a.name, a.default_value if a.has_default_value() else None) for a in s.arguments)
        found = _SCHEMAS[func] = Schema(s.name, defaults, len(s.returns), len(_SCHEMAS))
    return found


def bind(s: Schema, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """Every schema argument in order, defaults filled in: the layout the jit tracer records."""
    defaults = s.defaults
    if len(args) == len(defaults):
        return list(args)
    return [*args, *(kwargs.get(name, default) for name, default in defaults[len(args) :])]


def outputs_of(s: Schema, out: Any) -> list[Any]:
    """The op's return values as a list: one entry per schema return (a Tensor[] is one entry)."""
    if s.returns == 1:
        return [out]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def forward_records(name: str, bound: list[Any], outs: list[Any]) -> list[Record]:
    """The records of one forward call seen by the dispatch tracer (``name``: ``"aten::conv2d"``)."""
    normalize = FORWARD.get(name)
    return normalize(bound, outs) if normalize is not None else [(name, bound, outs)]


def backward_records(name: str, bound: list[Any], outs: list[Any]) -> list[Record]:
    """The records of one operator run by autograd's backward pass."""
    normalize = BACKWARD.get(name)
    return normalize(bound, outs) if normalize is not None else [(name, bound, outs)]


# --- forward: the jit tracer records convolutions as aten::_convolution ----------------------

CONVOLUTION = "aten::_convolution"
# _convolution's trailing flags: benchmark, deterministic, cudnn_enabled, allow_tf32 (as recorded by jit).
_CONV_FLAGS = [False, False, True, True]


def _convolution(
    x: Any,
    w: Any,
    b: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: Any,
    outs: list[Any],
) -> Record:
    return CONVOLUTION, [x, w, b, stride, padding, dilation, transposed, output_padding, groups, *_CONV_FLAGS], outs


def _conv_nd(bound: list[Any], outs: list[Any]) -> list[Record]:
    # convNd(input, weight, bias, stride, padding, dilation, groups); padding may be "same"/"valid"
    x, w, b, stride, padding, dilation, groups = bound[:7]
    spatial = max(_rank(w) - 2, 1)
    return [_convolution(x, w, b, stride, padding, dilation, False, [0] * spatial, groups, outs)]


def _conv_transpose_nd(bound: list[Any], outs: list[Any]) -> list[Record]:
    # conv_transposeNd(input, weight, bias, stride, padding, output_padding, groups, dilation)
    x, w, b, stride, padding, output_padding, groups, dilation = bound[:8]
    return [_convolution(x, w, b, stride, padding, dilation, True, output_padding, groups, outs)]


def _convolution_public(bound: list[Any], outs: list[Any]) -> list[Record]:
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = bound[:9]
    return [_convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups, outs)]


def _rank(t: Any) -> int:
    return t.dim() if isinstance(t, torch.Tensor) else len(getattr(t, "shape", ()))


FORWARD: dict[str, Normalizer] = {
    **{f"aten::conv{d}d": _conv_nd for d in (1, 2, 3)},
    **{f"aten::conv_transpose{d}d": _conv_transpose_nd for d in (1, 2, 3)},
    "aten::convolution": _convolution_public,
}


# --- backward: kernels priced as the forward operators they mirror ---------------------------
#
# Products are priced as the products they are: one forward-sized product per gradient
# computed (mm/bmm/addmm are recorded as themselves; convolution_backward below). A fused
# backward kernel of any other operator (normalization, activation, softmax, pooling,
# resampling, attention, loss) is priced as two of its forward operator: its gradient
# expression is about the size of the forward one, applied to the incoming gradient.
# Attention's backward runs four products where its forward runs two, so 2x is exact there.

BACKWARD: dict[str, Normalizer] = {}


def _backward(*names: str) -> Callable[[Normalizer], Normalizer]:
    def register(fn: Normalizer) -> Normalizer:
        for name in names:
            BACKWARD["aten::" + name] = fn
        return fn

    return register


def _twice(kind: str, inputs: list[Any], outputs: list[Any]) -> list[Record]:
    return [(kind, inputs, outputs), (kind, inputs, outputs)]


def _tensor_like(shape: Sequence[int], like: Any) -> TensorSpec:
    """A spec for a tensor the backward kernel only names by its size (e.g. upsampling's input)."""
    dtype = str(like.dtype).removeprefix("torch.") if isinstance(like, torch.Tensor) else "float32"
    return TensorSpec(tuple(int(s) for s in shape), dtype)


@_backward("convolution_backward")
def _convolution_backward(bound: list[Any], outs: list[Any]) -> list[Record]:
    # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation,
    #                      transposed, output_padding, groups, output_mask) -> (d_input, d_weight, d_bias)
    grad, x, w, _, stride, padding, dilation, transposed, output_padding, groups, mask = bound[:11]
    conv = _convolution(x, w, None, stride, padding, dilation, transposed, output_padding, groups, [grad])
    records = [conv for needed in mask[:2] if needed]
    if mask[2] and isinstance(grad, torch.Tensor):
        # d_bias = grad_output summed over batch and spatial positions, as linear's bias gradient
        dims = [d for d in range(grad.dim()) if d != 1]
        records.append(("aten::sum", [grad, dims, False, None], [outs[2]]))
    return records


# grad_fn name -> forward kind and how to rebuild its arguments from the backward kernel's.
_ACTIVATIONS: dict[str, tuple[str, Callable[[list[Any]], list[Any]]]] = {
    "threshold_backward": ("aten::relu", lambda a: [a[1]]),  # (grad, self, threshold)
    "gelu_backward": ("aten::gelu", lambda a: [a[1], a[2]]),  # (grad, self, approximate)
    "silu_backward": ("aten::silu", lambda a: [a[1]]),
    "sigmoid_backward": ("aten::sigmoid", lambda a: [a[1]]),  # (grad, output)
    "tanh_backward": ("aten::tanh", lambda a: [a[1]]),  # (grad, output)
    "hardswish_backward": ("aten::hardswish", lambda a: [a[1]]),
    "hardsigmoid_backward": ("aten::hardsigmoid", lambda a: [a[1]]),
    "hardtanh_backward": ("aten::hardtanh", lambda a: [a[1], a[2], a[3]]),  # (grad, self, min, max)
    "leaky_relu_backward": ("aten::leaky_relu", lambda a: [a[1], a[2]]),  # (grad, self, slope, is_result)
    "elu_backward": ("aten::elu", lambda a: [a[5], a[1], a[2], a[3]]),  # (grad, alpha, scale, in_scale, is_result, x)
    "softplus_backward": ("aten::softplus", lambda a: [a[1], a[2], a[3]]),  # (grad, self, beta, threshold)
    "mish_backward": ("aten::mish", lambda a: [a[1]]),
    "log_sigmoid_backward": ("aten::log_sigmoid", lambda a: [a[1]]),  # (grad, self, buffer)
    "glu_backward": ("aten::glu", lambda a: [a[1], a[2]]),  # (grad, self, dim)
    "_prelu_kernel_backward": ("aten::_prelu_kernel", lambda a: [a[1], a[2]]),  # (grad, self, weight)
    "native_dropout_backward": ("aten::dropout", lambda a: [a[0], 0.5, True]),  # (grad, mask, scale)
    "_softmax_backward_data": ("aten::softmax", lambda a: [a[1], a[2], None]),  # (grad, output, dim, dtype)
    "_log_softmax_backward_data": ("aten::log_softmax", lambda a: [a[1], a[2], None]),
    # pooling: (grad, self, kernel_size, stride, padding, ...) as the forward's arguments
    "max_pool2d_with_indices_backward": ("aten::max_pool2d", lambda a: [a[1], *a[2:7]]),
    "max_pool3d_with_indices_backward": ("aten::max_pool3d", lambda a: [a[1], *a[2:7]]),
    "avg_pool2d_backward": ("aten::avg_pool2d", lambda a: [a[1], *a[2:8]]),
    "avg_pool3d_backward": ("aten::avg_pool3d", lambda a: [a[1], *a[2:8]]),
    "_adaptive_avg_pool2d_backward": ("aten::adaptive_avg_pool2d", lambda a: [a[1], list(a[0].shape[-2:])]),
    "_adaptive_avg_pool3d_backward": ("aten::adaptive_avg_pool3d", lambda a: [a[1], list(a[0].shape[-3:])]),
    "adaptive_max_pool2d_backward": ("aten::adaptive_max_pool2d", lambda a: [a[1], list(a[0].shape[-2:])]),
    "adaptive_max_pool3d_backward": ("aten::adaptive_max_pool3d", lambda a: [a[1], list(a[0].shape[-3:])]),
    # losses: (grad, self, target, ...) as the forward's arguments
    "mse_loss_backward": ("aten::mse_loss", lambda a: [a[1], a[2], a[3]]),
    "smooth_l1_loss_backward": ("aten::smooth_l1_loss", lambda a: [a[1], a[2], a[3], a[4]]),
    "huber_loss_backward": ("aten::huber_loss", lambda a: [a[1], a[2], a[3], a[4]]),
    "binary_cross_entropy_backward": ("aten::binary_cross_entropy", lambda a: [a[1], a[2], a[3], a[4]]),
    "nll_loss_backward": ("aten::nll_loss", lambda a: [a[1], a[2], a[3], a[4], a[5]]),
    "nll_loss2d_backward": ("aten::nll_loss2d", lambda a: [a[1], a[2], a[3], a[4], a[5]]),
}


def _fused(kind: str, rebuild: Callable[[list[Any]], list[Any]]) -> Normalizer:
    def normalize(bound: list[Any], outs: list[Any]) -> list[Record]:
        # the forward's output has the incoming gradient's shape
        return _twice(kind, rebuild(bound), [bound[0]])

    return normalize


for _name, (_kind, _rebuild) in _ACTIVATIONS.items():
    BACKWARD["aten::" + _name] = _fused(_kind, _rebuild)


@_backward("native_batch_norm_backward")
def _batch_norm_backward(bound: list[Any], outs: list[Any]) -> list[Record]:
    # (grad, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, mask)
    grad, x, w, mean, var, _, _, train, eps = bound[:9]
    return _twice("aten::batch_norm", [x, w, None, mean, var, train, 0.1, eps, True], [grad])


@_backward("cudnn_batch_norm_backward", "miopen_batch_norm_backward")
def _cudnn_batch_norm_backward(bound: list[Any], outs: list[Any]) -> list[Record]:
    # (input, grad, weight, running_mean, running_var, save_mean, save_var, eps, ...)
    x, grad, w, mean, var, _, _, eps = bound[:8]
    return _twice("aten::batch_norm", [x, w, None, mean, var, True, 0.1, eps, True], [grad])


@_backward("native_layer_norm_backward")
def _layer_norm_backward(bound: list[Any], outs: list[Any]) -> list[Record]:
    # (grad, input, normalized_shape, mean, rstd, weight, bias, mask)
    grad, x, shape, _, _, w, b = bound[:7]
    return _twice("aten::layer_norm", [x, shape, w, b, 1e-5, True], [grad])


@_backward("native_group_norm_backward")
def _group_norm_backward(bound: list[Any], outs: list[Any]) -> list[Record]:
    # (grad, input, mean, rstd, weight, N, C, HxW, group, mask)
    grad, x, _, _, w, _, _, _, group = bound[:9]
    return _twice("aten::group_norm", [x, group, w, None, 1e-5, True], [grad])


@_backward("_fused_rms_norm_backward")
def _rms_norm_backward(bound: list[Any], outs: list[Any]) -> list[Record]:
    # (grad, input, normalized_shape, rstd, weight, mask)
    grad, x, shape, _, w = bound[:5]
    return _twice("aten::rms_norm", [x, shape, w, None], [grad])


def _upsample(kind: str, n_options: int) -> Normalizer:
    # upsample_*_backward(grad, output_size, input_size, *options) -> upsample_*(input, output_size, *options)
    def normalize(bound: list[Any], outs: list[Any]) -> list[Record]:
        grad, output_size, input_size = bound[:3]
        x = _tensor_like(input_size, grad)
        return _twice(kind, [x, output_size, *bound[3 : 3 + n_options]], [grad])

    return normalize


for _dims, _modes in (
    (1, {"nearest": 1, "linear": 2}),
    (2, {"nearest": 2, "bilinear": 3, "bicubic": 3}),
    (3, {"nearest": 3, "trilinear": 4}),
):
    for _mode, _n in _modes.items():
        _kind = f"aten::upsample_{_mode}{_dims}d"
        BACKWARD[f"{_kind}_backward"] = _upsample(_kind, _n)


SDPA = "aten::scaled_dot_product_attention"


def _attention(q_at: int, mask_at: int | None, dropout_at: int, causal_at: int, scale_at: int) -> Normalizer:
    # -> scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa)
    def normalize(bound: list[Any], outs: list[Any]) -> list[Record]:
        q, k, v = bound[q_at : q_at + 3]
        mask = bound[mask_at] if mask_at is not None else None
        args = [q, k, v, mask, bound[dropout_at], bound[causal_at], bound[scale_at], False]
        return _twice(SDPA, args, [bound[0]])

    return normalize


# (grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, attn_mask, scale)
BACKWARD["aten::_scaled_dot_product_flash_attention_for_cpu_backward"] = _attention(1, 8, 6, 7, 9)
# (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset, dropout_p,
#  grad_input_mask, is_causal, scale)
BACKWARD["aten::_scaled_dot_product_efficient_attention_backward"] = _attention(1, 4, 9, 11, 12)
# (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p,
#  is_causal, philox_seed, philox_offset, scale)
BACKWARD["aten::_scaled_dot_product_flash_attention_backward"] = _attention(1, None, 10, 11, 14)
# (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias, cum_seq_q,
#  cum_seq_k, max_q, max_k, dropout_p, is_causal, scale)
BACKWARD["aten::_scaled_dot_product_cudnn_attention_backward"] = _attention(1, 8, 13, 14, 15)
