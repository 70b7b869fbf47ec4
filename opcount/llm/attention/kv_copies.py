"""Attention that copies its KV heads before the cache, run on the heads as engines cache them.

transformers' Falcon in its new decoder architecture (Falcon-40B, Falcon-180B, Falcon2-11B) cuts
``query_key_value``'s output into the query heads and one key and one value per group of
``num_attention_heads / num_kv_heads`` query heads, then copies each key and value to every query head
of its group (``FalconAttention._split_heads``: ``broadcast_to`` and ``flatten``) before its cache: the
cache would hold ``num_attention_heads`` heads (Falcon-40B: 128) where vLLM's ``FalconAttention`` caches
``num_kv_heads`` (8), and attention would read every copy. For a block, such a module runs
:func:`_forward` instead: the same projections, rotary embedding, cache update and output projection
on the ``num_kv_heads`` heads as they are, and one ``scaled_dot_product_attention`` that reads each KV
head once for the query heads of its group (``enable_gqa``, as FlashAttention and paged-attention
kernels read grouped-query attention). The mask the model builds (causal, ALiBi folded in) is passed
as transformers passes it, as for Falcon's other layouts.

Falcon's other layouts cache what they compute: ``multi_query`` one KV head, else one per query head.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import OpcountError
from ..patching import patched


def copies_kv_heads(module: nn.Module) -> bool:
    """Whether ``module`` is an attention copying each KV head to its query heads before its cache:
    Falcon's in the new decoder architecture (one fused ``query_key_value``, groups of query heads
    with one key and one value each, cut by ``_split_heads``)."""
    return (
        getattr(module, "new_decoder_architecture", False) is True
        and callable(getattr(module, "_split_heads", None))
        and isinstance(getattr(module, "query_key_value", None), nn.Linear)
        and all(isinstance(getattr(module, a, None), int) for a in ("num_heads", "num_kv_heads", "head_dim"))
    )


def _forward(
    self: Any,  # the attention module
    hidden_states: torch.Tensor,
    alibi: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None = None,
    layer_past: Any = None,
    use_cache: bool = False,
    output_attentions: bool = False,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Falcon's attention (new decoder architecture) with its ``num_kv_heads`` KV heads cached and read
    as they are. ``query_key_value``'s output is, per token, ``num_kv_heads`` groups of
    ``heads / groups`` query heads, one key and one value: ``[b, s, g, heads / g + 2, e]``."""
    from ...transformers_internals import falcon_rotary

    heads, groups, width = int(self.num_heads), int(self.num_kv_heads), int(self.head_dim)
    batch, length, _ = hidden_states.shape
    fused = self.query_key_value(hidden_states).view(batch, length, groups, heads // groups + 2, width)
    query = fused[:, :, :, :-2].reshape(batch, length, heads, width).transpose(1, 2)  # [b, heads, s, e]
    key, value = (fused[:, :, :, part].transpose(1, 2) for part in (-2, -1))  # [b, g, s, e] each
    if alibi is None:  # rotary positions (ALiBi's biases are in the mask)
        if position_embeddings is None:
            raise OpcountError(f"{type(self).__name__}: rotary attention called without its position embeddings")
        query, key = falcon_rotary(query, key, *position_embeddings)
    if layer_past is not None:
        position = kwargs.get("cache_position")  # transformers 4.x's static cache layers index by it
        extra = () if position is None else ({"cache_position": position},)
        key, value = layer_past.update(key, value, self.layer_idx, *extra)
    causal = bool(getattr(self, "is_causal", True)) and attention_mask is None and length > 1
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, is_causal=causal, enable_gqa=groups != heads
    )
    return self.dense(out.transpose(1, 2).reshape(batch, length, heads * width)), None


@contextlib.contextmanager
def kv_heads_as_cached(model: nn.Module) -> Iterator[int]:
    """For the block, every attention module of ``model`` that copies its KV heads before its cache
    (:func:`copies_kv_heads`) runs :func:`_forward`; yields how many."""
    found = [m for m in model.modules() if copies_kv_heads(m)]
    with patched((m, "forward", types.MethodType(_forward, m)) for m in found):
        yield len(found)
