"""Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2) decoded as serving engines decode it:
in the weight-absorbed form.

The cache holds, per token, the normalized KV latent ``c`` (``kv_lora_rank``) and the shared rope
key ``k_r`` (``qk_rope_head_dim``) side by side: one tensor ``[batch, 1, tokens, rank + rope]``.
transformers' forward up-projects the whole cache to per-head keys and values at every step
(``kv_b_proj``, the expanded form). Engines (vLLM's MLA backends, SGLang, FlashMLA, after the
DeepSeek-V2 paper, section 2.1.3) fold ``W_UK`` into the query and ``W_UV`` into the output
instead, so decode attends over the latent itself, one KV head shared by all query heads:

- ``q_c = q_nope @ W_UK`` per head (``heads x nope x rank`` multiply-adds per token);
- attention of ``[q_c, q_r]`` over ``[c, k_r]`` (``rank + rope`` wide) with the latent as values;
- ``o = o_c @ W_UV^T`` per head (``heads x rank x v_head_dim``), then ``o_proj``.

A prefill keeps the model's expanded form, as engines do for prompts (vLLM's MLA backends,
``vllm/v1/attention/backends/mla/common.py``, "Chunked Prefill": the compute-friendly form): after
a cached prefix too, the held latent of the prefix and of the chunk is up-projected by ``kv_b_proj``
and attended to (:func:`expanded`), as vLLM decompresses the cached context's latent for a prompt's
chunk.
"""

from __future__ import annotations

import contextlib
import functools
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..patching import patched

HOOK = "opcount_attention"  # an attention module's own attention, called by model._serving_attention
# kv_b_proj's weight [heads x (nope + v), rank] seen per head as W_UK [heads, nope, rank] and W_UV
# [heads, v, rank]: named buffers of the module while decoding, so the trace reads them as the
# weight they are (priced as ``weight``, as an expert's slice of a fused stack is)
_PARTS = ("weight[uk]", "weight[uv]")
Attend = Callable[[torch.Tensor, torch.Tensor, "float | None"], torch.Tensor]


def is_latent_attention(module: nn.Module) -> bool:
    """A transformers MLA module: it expands a latent with ``kv_b_proj`` through ``expand_kv``."""
    return (
        isinstance(getattr(module, "kv_b_proj", None), nn.Linear)
        and callable(getattr(module, "expand_kv", None))
        and all(isinstance(getattr(module, a, None), int) for a in ("kv_lora_rank", "qk_nope_head_dim", "v_head_dim"))
    )


def absorbed_attention(
    module: Any,
    query: torch.Tensor,
    latent: torch.Tensor,
    value: torch.Tensor,
    scaling: float | None,
    attend: Attend | None = None,
) -> tuple[torch.Tensor, None]:
    """Attention of ``query [b, heads, s, nope + rope]`` over ``latent [b, 1, T, rank + rope]`` in
    the absorbed form; returns ``[b, s, heads, v_head_dim]`` as the attention functions do.
    ``attend(q, latent, scaling)`` attends the absorbed query (every query over every latent by
    default; DSA's sparse form: :mod:`.indexed`)."""
    nope, rank = module.qk_nope_head_dim, module.kv_lora_rank
    q_nope, q_rope = torch.split(query, [nope, query.shape[-1] - nope], dim=-1)
    w_uk, w_uv = (module.kv_b_proj._buffers[name] for name in _PARTS)
    q_latent = torch.einsum("bhsn,hnr->bhsr", q_nope, w_uk)
    q = torch.cat([q_latent, q_rope], dim=-1)
    # the latent is both keys and values (one tensor: a fused kernel reads it once); the rope
    # columns of the output are dropped
    out = (attend or _dense)(q, latent, scaling)
    out = torch.einsum("bhsr,hvr->bhsv", out[..., :rank], w_uv)
    return out.transpose(1, 2).contiguous(), None


def _dense(q: torch.Tensor, latent: torch.Tensor, scaling: float | None) -> torch.Tensor:
    return torch.nn.functional.scaled_dot_product_attention(q, latent, latent, scale=scaling, enable_gqa=True)


@contextlib.contextmanager
def absorbed(model: nn.Module, latents: dict[int, torch.Tensor]) -> Iterator[int]:
    """For the block, every MLA module of ``model`` attends over its layer's cached latent
    (``latents`` by layer index) in the absorbed form; yields how many modules it changed."""
    modules: list[Any] = [
        m for m in model.modules() if is_latent_attention(m) and getattr(m, "layer_idx", None) in latents
    ]
    own_form: list[tuple[object, str, Any]] = []  # each module expands to its latent and attends absorbed
    for m in modules:
        latent = latents[m.layer_idx]
        own_form.append((m, "expand_kv", types.MethodType(lambda self, kv, rope, t=latent: (t, t), m)))
        own_form.append((m, HOOK, functools.partial(absorbed_attention, m)))
    try:
        with patched(own_form):
            for m in modules:
                nope, v_dim = m.qk_nope_head_dim, m.v_head_dim
                w = m.kv_b_proj.weight.view(m.num_heads, nope + v_dim, m.kv_lora_rank)
                for name, part in zip(_PARTS, (w[:, :nope], w[:, nope:]), strict=True):
                    m.kv_b_proj.register_buffer(name, part, persistent=False)
            yield len(modules)
    finally:
        for m in modules:
            for name in _PARTS:
                m.kv_b_proj._buffers.pop(name, None)


@contextlib.contextmanager
def expanded(model: nn.Module, latents: dict[int, torch.Tensor]) -> Iterator[int]:
    """For the block, every MLA module of the layers in ``latents`` expands its layer's cached latent
    (``[b, 1, T, rank + rope]``: the prefix held and the prompt's chunk just written), read in the
    trace as the cache's, rather than views of it made before the trace; yields how many modules it
    changed."""
    modules: list[Any] = [
        m for m in model.modules() if is_latent_attention(m) and getattr(m, "layer_idx", None) in latents
    ]
    held: list[tuple[object, str, Any]] = []
    for m in modules:
        own = m.expand_kv  # the model's own up-projection, bound before it is replaced
        latent, rank = latents[m.layer_idx], m.kv_lora_rank
        held.append((m, "expand_kv", lambda kv, rope, own=own, t=latent, r=rank: own(t[..., :r], t[..., r:])))
    with patched(held):
        yield len(modules)
