"""Attention as serving kernels run it: the cache's KV heads read as they are (never copied per query head,
:mod:`.kv_copies`), no mask tensor, a layer's own form where it has one (latent, windows), GPT-OSS's sinks."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ...transformers_internals import attention_implementation, set_attention_implementation
from .kv_copies import kv_heads_as_cached

# ------------------------------------------------------------------------------------------------
ATTENTION = "opcount_serving_sdpa"


def _serving_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """``scaled_dot_product_attention`` reading the cache's KV heads as they are (grouped-query
    attention natively, as FlashAttention and paged-attention kernels do), with no mask tensor:
    the cache holds exactly the tokens attended to, and a prompt attends causally. transformers'
    own sdpa path would first copy each KV head once per query head it serves (``repeat_kv``)
    whenever a mask is given, which a static cache always gives."""
    own = module.__dict__.get("opcount_attention")  # a layer's own form: .latent, .windows
    if own is not None:
        return own(query, key, value, scaling)  # type: ignore[no-any-return]
    new, total = query.shape[2], key.shape[2]
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        scale=scaling,
        is_causal=new > 1 and new == total,
        enable_gqa=key.shape[1] != query.shape[1],
    )
    sinks = kwargs.get("s_aux")
    if isinstance(sinks, torch.Tensor):
        sink_terms(sinks, out)
    return out.transpose(1, 2).contiguous(), None


def sink_terms(sinks: torch.Tensor, out: torch.Tensor) -> None:
    """GPT-OSS's learned sink logit per head adds one term to each softmax row's denominator,
    ``exp(sink - row max)``, and no value: a kernel (FlashAttention with sinks) does it on its
    running max and sum, 3 flops a row (subtract, exp, add), traced here on a row-sized stand-in."""
    batch, heads, rows = out.shape[:3]
    running = out.new_empty((batch, heads, rows))  # the kernel's per-row max and sum
    torch.exp(sinks.to(out.dtype).view(1, heads, 1) - running).add_(running)


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None


@contextlib.contextmanager
def serving_attention(model: nn.Module) -> Iterator[None]:
    """The model's attention runs :func:`_serving_attention` for the block (where it goes through
    transformers' attention registry: else its own code and masks run), and an attention that copies
    its KV heads before its cache runs on them as they are (:mod:`.kv_copies`: Falcon's new decoder
    architecture)."""
    with kv_heads_as_cached(model):
        with _registered(model):
            yield


@contextlib.contextmanager
def _registered(model: nn.Module) -> Iterator[None]:
    """:func:`_serving_attention` registered and named in every config of ``model`` for the block."""
    from ...transformers_internals import AttentionInterface, AttentionMaskInterface, runs_attention_interface

    if not runs_attention_interface(model):
        yield
        return
    AttentionInterface.register(ATTENTION, _serving_attention)
    AttentionMaskInterface.register(ATTENTION, _no_mask)
    configs: dict[int, Any] = {id(c): c for c in (getattr(m, "config", None) for m in model.modules()) if c is not None}
    saved = [(c, attention_implementation(c)) for c in configs.values()]
    for config in configs.values():
        set_attention_implementation(config, ATTENTION)
    try:
        yield
    finally:
        for config, value in saved:
            set_attention_implementation(config, value)
