"""torch's fused inference fast paths: the bytes they move, and the transformer layer's flops.

In eval mode under ``no_grad`` torch replaces a module's chain of operators by one fused call:
``nn.MultiheadAttention`` runs ``aten::_native_multi_head_attention``, ``nn.TransformerEncoderLayer``
runs ``aten::_transformer_encoder_layer_fwd``, and ``scaled_dot_product_attention`` dispatches to
a fused kernel (``_scaled_dot_product_flash_attention_for_cpu`` and its GPU siblings). Each fused
call is priced as the unfused operators it replaces (the ones ``torch.is_grad_enabled()`` runs), so
a model costs the same with or without grad: the kernels inside the fused call still write every
intermediate (the projections, the attention output, the feed-forward hidden layer) and read it
back, as torch's implementations do; only attention's score matrix stays on chip, as in the
``products`` rule for ``scaled_dot_product_attention``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..errors import OpcountValueError
from ..ir import Spec, TensorSpec, const, maybe_tensor, tensor
from ._shapes import numel, shape_of
from .attention import MHA_KEY, MHA_PROJ_WEIGHT, MHA_QKV_WEIGHT, MHA_QUERY, mha_cost
from .counts import Cost
from .memory import Access, Traffic, TrafficFn, whole
from .nonlinearity import GELU_EXACT_FLOPS
from .norm import norm_flops
from .registry import FLOPS, MEMORY

# _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
#                              proj_weight, proj_bias, mask, need_weights, average_attn_weights, mask_type)
MHA_VALUE, MHA_QKV_BIAS, MHA_PROJ_BIAS = 2, 6, 8

# _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
#     use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
#     ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, mask, mask_type)
TEL_SRC, TEL_EMBED_DIM, TEL_NUM_HEADS, TEL_QKV_WEIGHT, TEL_QKV_BIAS, TEL_PROJ_WEIGHT, TEL_PROJ_BIAS = range(7)
TEL_USE_GELU, TEL_FFN_WEIGHT_1 = 7, 14
TEL_NORM_WEIGHTS, TEL_FFN = (10, 11, 12, 13), (14, 15, 16, 17)

# The fused kernels scaled_dot_product_attention dispatches to: q, k, v (and a mask) in, the
# output and small statistics (log-sum-exp, RNG state) out.
SDPA_KERNELS = (
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
)


def _register(*ops: str) -> Callable[[TrafficFn], TrafficFn]:
    """``MEMORY.register`` for handles that return :class:`Traffic` (the registry is typed for counts)."""
    return MEMORY.register(*ops)  # type: ignore[return-value]


def _tensors(specs: Sequence[Spec]) -> list[TensorSpec]:
    return [t for t in (maybe_tensor(s) for s in specs) if t is not None]


def _distinct(specs: Sequence[TensorSpec]) -> list[TensorSpec]:
    """Each tensor once: torch's fast paths run self-attention only (``query is key is value``), so
    equal specs, or specs with one trace id, are one tensor read once, as the unfused linear reads it."""
    found: list[TensorSpec] = []
    for t in specs:
        if not any(t == u and (t.id is None or u.id is None or t.id == u.id) for u in found):
            found.append(t)
    return found


def _like(t: TensorSpec, *shape: int) -> Access:
    """An intermediate of ``shape`` in ``t``'s dtype: written by one inner kernel, read by the next."""
    return Access(None, numel(shape) * t.itemsize)


def _attention_block(x: TensorSpec, kv: int, inputs: Sequence[Spec], w: tuple[int, int, int, int]) -> Traffic:
    """linear (in-projection) -> attention -> linear (out-projection) on ``x`` [b, L, E] with ``kv``
    keys per batch: ``w`` the argument indices of qkv weight, qkv bias, proj weight, proj bias."""
    *batch, q_len, e = x.shape
    b = numel(batch)
    q, kv_bytes = _like(x, b, q_len, e), _like(x, 2, b, kv, e)  # the projected queries, keys and values
    o = _like(x, b, q_len, e)  # the attention output, before the out-projection
    params = whole([inputs[i] for i in w if maybe_tensor(inputs[i]) is not None])
    # the projections are read back twice: into the head layout [b, h, L, E/h] (torch's
    # _transform_bias_rescale_qkv; the unfused path's contiguous()) and then by attention; attention's
    # output is read back by the out-projection
    read = (*params, q, kv_bytes, q, kv_bytes, o)
    write = (q, kv_bytes, q, kv_bytes, o)
    return Traffic(read, write)


@_register("aten::_native_multi_head_attention")
def native_multi_head_attention(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """MultiheadAttention's fast path, as the linear, attention, linear it replaces: reads the input
    (query, key and value are one tensor on this path), the projection weights and biases once;
    writes the projected q, k, v, reads them into the heads' layout and writes them there, reads them
    into attention; writes the attention output and reads it back into the out-projection; writes the
    output (and the attention weights when asked for)."""
    xs = _distinct(_tensors([inputs[MHA_QUERY], inputs[MHA_KEY], inputs[MHA_VALUE]]))
    x, key = tensor(inputs[MHA_QUERY]), tensor(inputs[MHA_KEY])
    if x.rank == 2:  # unbatched [L, E]
        x = TensorSpec((1, *x.shape), x.dtype)
    kv = key.shape[-2]
    inner = _attention_block(x, kv, inputs, (MHA_QKV_WEIGHT, MHA_QKV_BIAS, MHA_PROJ_WEIGHT, MHA_PROJ_BIAS))
    return Traffic((*whole(xs), *inner.read), (*inner.write, *whole(outputs)))


@_register("aten::_transformer_encoder_layer_fwd")
def transformer_encoder_layer(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """TransformerEncoderLayer's fast path, as the operators it replaces (post-norm and ``norm_first``
    move the same bytes): the attention block as MultiheadAttention's fast path, then per operator
    (reads -> writes, [b, L, E] as x, [b, L, F] as h): two residual adds (2x -> x), two layer norms
    (x and their weights -> x), linear1 (x and its weights -> h), the activation (h -> h) and linear2
    (h and its weights -> x). In all: the input read twice (the in-projection and the first
    residual), six x-sized and two h-sized intermediates read, five and two written, and the output."""
    x, w1 = tensor(inputs[TEL_SRC]), tensor(inputs[TEL_FFN_WEIGHT_1])
    *batch, q_len, e = x.shape
    b, ff = numel(batch), w1.shape[0]
    attn = _attention_block(x, q_len, inputs, (TEL_QKV_WEIGHT, TEL_QKV_BIAS, TEL_PROJ_WEIGHT, TEL_PROJ_BIAS))
    act, hidden = _like(x, b, q_len, e), _like(x, b, q_len, ff)
    weights = whole([inputs[i] for i in (*TEL_NORM_WEIGHTS, *TEL_FFN)])
    src = Access(x, x.nbytes)
    read = (*attn.read, *weights, src, src, *[act] * 6, hidden, hidden)
    write = (*attn.write, *[act] * 5, hidden, hidden, *whole(outputs))
    return Traffic(read, write)


@FLOPS.register("aten::_transformer_encoder_layer_fwd", macs=True)
def transformer_encoder_layer_flops(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Cost:
    """[b, L, E] = TransformerEncoderLayer fast path(src [b, L, E], ..., linear1 [F, E], ...): the self-attention
    of ``_native_multi_head_attention`` (S = L), the feed-forward 2*b*L*E*F multiply-adds, and as flops
    two layer norms (5 per element), two residual adds (1 per element) and the activation per hidden
    element (relu 1, gelu 5); biases not counted, as the unfused operators count them."""
    x, w1 = shape_of(inputs[TEL_SRC]), tensor(inputs[TEL_FFN_WEIGHT_1])
    embed_dim, heads, gelu = (const(inputs[i]) for i in (TEL_EMBED_DIM, TEL_NUM_HEADS, TEL_USE_GELU))
    if len(x) != 3 or not isinstance(heads, int) or x[2] != embed_dim or w1.shape[1:] != (embed_dim,):
        raise OpcountValueError(
            f"aten::_transformer_encoder_layer_fwd: src {x}, embed_dim {embed_dim!r}, num_heads {heads!r} "
            f"and linear1 weight {w1.shape} do not fit"
        )
    b, q_len, e = x
    ff = w1.shape[0]
    attention = mha_cost(b, q_len, q_len, e, heads, e)
    per_hidden = GELU_EXACT_FLOPS if gelu is True else 1
    flops = attention.flops + 2 * norm_flops(x, affine=True) + 2 * b * q_len * e + per_hidden * b * q_len * ff
    return Cost(macs=attention.macs + 2 * b * q_len * e * ff, flops=flops)


@_register(*SDPA_KERNELS)
def fused_attention(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """The fused kernels ``scaled_dot_product_attention`` dispatches to, as sdpa itself: reads q, k, v
    (and a mask) once, writes the output and its statistics (log-sum-exp) once; the score matrix
    stays on chip."""
    return Traffic(whole(inputs), whole(outputs))
