"""Attention: the two batched products of softmax(q k^T) v and the softmax, and the MultiheadAttention fast path.

Convention: the full query x key product and attention x value product are counted as
multiply-adds, ``b*h*L*S*E + b*h*L*S*Ev``, whatever the mask, as published model tables (e.g.
ViT-B/16's 17.56 GMACs) do; the softmax over each query's ``S`` scores as the standalone softmax
handle counts it (:func:`~opcount.handles.softmax.softmax_flops`: ``3*S - 1`` flops per query row).
Each handle returns a :class:`~opcount.handles.counts.Cost` with both parts: ``preset="macs"`` keeps the
products, ``flops_per_mac=2`` doubles them and not the softmax. The scaling and the masking are
not counted. Models that spell attention out (matmul, softmax, ...) get the same numbers from the
matmul and softmax handles.

To count only the unmasked (lower-triangular) half of causal attention, install the handle made
by :func:`sdpa_handle`::

    FlopCountAnalysis(model, inputs).set_op_handle(
        "aten::scaled_dot_product_attention",
        spec_handle(sdpa_handle(causal_unmasked_only=True), macs=True),
    )

It changes only calls with ``is_causal=True``; an explicit ``attn_mask`` is data, which the
shapes do not tell, so those keep the full count.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Const, Spec, const, tensor
from ._shapes import first_tensor_out, numel, shape_of
from .counts import Cost
from .registry import FLOPS, SpecFn

# scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, *, scale, enable_gqa)
SDPA_QUERY, SDPA_KEY, SDPA_VALUE, SDPA_IS_CAUSAL = 0, 1, 2, 5


def causal_pairs(q_len: int, kv_len: int) -> int:
    """(query, key) pairs kept by torch's ``is_causal`` mask: ``ones(L, S).tril()``, aligned top-left."""
    # row i keeps keys 0..i, i.e. min(i + 1, S) of them
    full_rows = max(q_len - kv_len, 0)  # rows i >= S keep all S keys
    partial = min(q_len, kv_len)
    return partial * (partial + 1) // 2 + full_rows * kv_len


def attention_macs(
    q: Sequence[int], k: Sequence[int], v: Sequence[int], out: Sequence[int], causal_unmasked_only: bool = False
) -> int:
    """``batch * pairs * (E + Ev)``: q.k^T (E per pair) and attn.v (Ev per pair); batch from the output.

    ``q [*b, L, E]``, ``k [*b', S, E]``, ``v [*b', S, Ev]``, ``out [*b, L, Ev]``; grouped-query
    attention broadcasts the key/value heads, so the batch is read from the output.
    """
    if len(q) < 2 or len(k) < 2 or len(v) < 2:
        raise ValueError(f"attention: q, k, v need rank >= 2, got {tuple(q)}, {tuple(k)}, {tuple(v)}")
    *_, q_len, e = q
    *_, kv_len, e_k = k
    *_, kv_len_v, e_v = v
    if e != e_k or kv_len != kv_len_v:
        raise ValueError(f"attention: shapes do not fit: q {tuple(q)}, k {tuple(k)}, v {tuple(v)}")
    batch = numel(out[:-2])
    pairs = causal_pairs(q_len, kv_len) if causal_unmasked_only else q_len * kv_len
    return batch * pairs * (e + e_v)


def attention_softmax_flops(batch: int, q_len: int, pairs: int) -> int:
    """The softmax over ``pairs`` (query, key) scores in ``q_len`` rows, ``batch`` times: a row of
    ``c`` scores costs ``2c + (c - 1)`` (exp and divide per score, a sum of c values), the
    standalone softmax handle's count, so ``batch * (3 * pairs - q_len)`` (no row is empty)."""
    return batch * (3 * pairs - q_len) if pairs else 0


def attention_cost(
    q: Sequence[int], k: Sequence[int], v: Sequence[int], out: Sequence[int], causal_unmasked_only: bool = False
) -> Cost:
    """The products (:func:`attention_macs`) as multiply-adds and the softmax (:func:`attention_softmax_flops`)
    as flops; the causal option applies to both."""
    macs = attention_macs(q, k, v, out, causal_unmasked_only)
    q_len, kv_len = q[-2], k[-2]
    pairs = causal_pairs(q_len, kv_len) if causal_unmasked_only else q_len * kv_len
    return Cost(macs=macs, flops=attention_softmax_flops(numel(out[:-2]), q_len, pairs))


def sdpa_handle(causal_unmasked_only: bool = False) -> SpecFn:
    """A handle for ``aten::scaled_dot_product_attention``; with ``causal_unmasked_only=True`` an
    ``is_causal=True`` call counts only the query/key pairs its causal mask keeps."""

    # [*b, L, Ev] = sdpa(q [*b, L, E], k [*b, S, E], v [*b, S, Ev], mask, dropout, is_causal, ...)
    def scaled_dot_product_attention(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Cost:
        is_causal = False
        if causal_unmasked_only and len(inputs) > SDPA_IS_CAUSAL:
            flag = inputs[SDPA_IS_CAUSAL]
            is_causal = isinstance(flag, Const) and flag.value is True
        q, k, v = (shape_of(inputs[i]) for i in (SDPA_QUERY, SDPA_KEY, SDPA_VALUE))
        return attention_cost(q, k, v, first_tensor_out(outputs).shape, causal_unmasked_only=is_causal)

    scaled_dot_product_attention.__doc__ = (
        "[*b, L, Ev] = sdpa([*b, L, E], [*b, S, E], [*b, S, Ev]): b*L*S*E + b*L*S*Ev multiply-adds "
        "(q.k^T and attn.v; b includes heads), whatever the mask, plus b*(3*L*S - L) flops of softmax "
        "(exp, sum and divide over each query's S scores)"
        + ("; is_causal=True counts L*(L+1)/2 pairs when L == S." if causal_unmasked_only else ".")
    )
    return scaled_dot_product_attention


FLOPS.register("aten::scaled_dot_product_attention", macs=True)(sdpa_handle())

# The fused kernels sdpa dispatches to (seen by dispatch-level tracers); q, k, v come first and
# is_causal sits at a per-kernel position. Counted in full, like sdpa.
_FUSED_KERNELS = (
    "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_attention_math",
)


@FLOPS.register(*_FUSED_KERNELS, macs=True)
def fused_attention(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Cost:
    """[b, h, L, Ev] = kernel(q [b, h, L, E], k [b, h, S, E], v [b, h, S, Ev], ...): b*h*L*S*(E + Ev) multiply-adds and b*h*(3*L*S - L) flops of softmax, as sdpa."""
    q, k, v = (shape_of(inputs[i]) for i in (SDPA_QUERY, SDPA_KEY, SDPA_VALUE))
    out = first_tensor_out(outputs).shape
    return attention_cost(q, k, v, out)


# _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias,
#                              proj_weight, proj_bias, mask, need_weights, average_attn_weights, mask_type)
MHA_QUERY, MHA_KEY, MHA_EMBED_DIM, MHA_NUM_HEADS, MHA_QKV_WEIGHT, MHA_PROJ_WEIGHT = 0, 1, 3, 4, 5, 7


@FLOPS.register("aten::_native_multi_head_attention", macs=True)
def native_multi_head_attention(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Cost:
    """[b, L, E] = MHA fast path(q [b, L, E], k/v [b, S, E]): in-projection b*L*E*E + 2*b*S*E*E, attention 2*b*L*S*E (h heads of E/h), out-projection b*L*E*E multiply-adds, and b*h*(3*L*S - L) flops of softmax; biases not counted.

    nn.MultiheadAttention takes this path under no_grad in eval mode (batch_first); it is the
    same arithmetic as the linear, sdpa, linear it replaces, so both grad modes count alike.
    """
    q, k = shape_of(inputs[MHA_QUERY]), shape_of(inputs[MHA_KEY])
    embed_dim, heads = const(inputs[MHA_EMBED_DIM]), const(inputs[MHA_NUM_HEADS])
    w_qkv, w_proj = tensor(inputs[MHA_QKV_WEIGHT]), tensor(inputs[MHA_PROJ_WEIGHT])
    if not isinstance(embed_dim, int) or w_qkv.shape != (3 * embed_dim, embed_dim):
        raise ValueError(
            f"aten::_native_multi_head_attention: embed_dim {embed_dim!r} does not fit qkv weight {w_qkv.shape}"
        )
    if not isinstance(heads, int) or heads < 1:
        raise ValueError(f"aten::_native_multi_head_attention: num_head {heads!r} is not a positive constant")
    if len(q) == 2:  # unbatched [L, E]
        q, k = (1, *q), (1, *k)
    if len(q) != 3 or len(k) != 3 or q[2] != embed_dim or k[2] != embed_dim:
        raise ValueError(f"aten::_native_multi_head_attention: query {q} / key {k} do not fit E={embed_dim}")
    (b, q_len, e), (_, kv_len, _) = q, k
    return mha_cost(b, q_len, kv_len, e, heads, w_proj.shape[0])


def mha_cost(batch: int, q_len: int, kv_len: int, embed_dim: int, heads: int, out_dim: int) -> Cost:
    """MultiheadAttention's arithmetic, shape-only: in-projection ``b*L*E*E + 2*b*S*E*E``, attention
    ``2*b*L*S*E``, out-projection ``b*L*E*out_dim`` multiply-adds, and ``b*h*(3*L*S - L)`` flops of softmax."""
    b, e = batch, embed_dim
    in_proj = b * q_len * e * e + 2 * b * kv_len * e * e
    attention = 2 * b * q_len * kv_len * e  # h heads x (L*S*(E/h)) for q.k^T and again for attn.v
    out_proj = b * q_len * e * out_dim
    softmax = attention_softmax_flops(b * heads, q_len, q_len * kv_len)
    return Cost(macs=in_proj + attention + out_proj, flops=softmax)
