"""DeepSeek sparse attention (DSA: DeepSeek-V3.2, GLM-5, HY-V4, ...), transformers' ``indexed_attention``
layers, as serving engines hold and run it.

Such a layer is multi-head latent attention (:mod:`.latent`) preceded by a "lightning indexer": a
few small heads score every cached token against the new one and the attention then reads only the
``index_topk`` best. What one sequence holds per token, per layer:

- the MLA latent and rope key, ``kv_lora_rank + qk_rope_head_dim`` elements at the KV dtype, as a
  ``latent_attention`` layer;
- the indexer's key, ``index_head_dim`` elements stored as engines store them whatever the KV dtype:
  float8 with one float32 scale per 128 elements (vLLM's DeepSeek-V3.2 indexer cache,
  ``head_dim + head_dim // 128 * 4`` bytes a token; LightLLM's ``Deepseek3_2MemoryManager`` alike):
  132 bytes for DeepSeek-V3.2's 128. A layer reusing another layer's selection (HY-V4's ``shared``
  indexer layers) holds no indexer key.

A step runs the model's own indexer (its query, key and weights projections, its scores of every
held token, the top-k) and then attends in the absorbed form, as FlashMLA's sparse kernels do for
prompts and decode alike (vLLM's ``FlashMLASparseBackend``): query ``i`` (at position ``p``) over
``min(p + 1, index_topk)`` latents. The queries that see at most ``index_topk`` tokens attend over
all of them as a dense latent layer does (causally in a prompt, counted as opcount counts causal
attention); the others attend over ``index_topk`` latents each, read per query as the kernel
gathers them. Which tokens the indexer picks is data; their count is not, and the first
``index_topk`` positions of the cache stand for them.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
from collections.abc import Iterator, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...errors import OpcountError
from ..patching import patched
from .latent import HOOK, absorbed_attention, is_latent_attention
from .serving import sink_terms

INDEXED = "indexed_attention"  # transformers' cache layer type
INDEXER_KEYS = "indexer_keys"  # the indexer keys' part of the cache breakdown
INDEX_BUFFER = "index_keys"  # the cache tensor holding them (``kv_cache.L.index_keys``)
SCALE_BLOCK, SCALE_BYTES = 128, 4  # one float32 scale per 128 float8 elements (vLLM, LightLLM)


def index_key_bytes(elements: int) -> int:
    """Bytes of one token's indexer key of ``elements`` (``index_head_dim``): float8 and a float32
    scale per block of 128."""
    return elements + SCALE_BYTES * math.ceil(elements / SCALE_BLOCK)


def element_bytes(elements: int) -> float:
    """Bytes per element of an indexer key ``elements`` wide, scales shared out (132 / 128 for 128)."""
    return index_key_bytes(elements) / elements


def is_indexer(module: Any) -> bool:
    """A DSA lightning indexer as transformers writes it: a query projection from the query latent
    (``wq_b``), a one-head key projection (``wk``), per-head weights (``weights_proj``), and its
    head count, width and top-k."""
    return (
        isinstance(module, nn.Module)
        and all(isinstance(getattr(module, a, None), nn.Linear) for a in ("wq_b", "wk", "weights_proj"))
        and all(isinstance(getattr(module, a, None), int) for a in ("n_heads", "head_dim", "index_topk"))
    )


def indexed_layers(model: nn.Module, config: Any) -> dict[int, tuple[int, int]]:
    """Each DSA attention module's layer: ``(index_topk, index_head_dim)``, the width 0 for a layer
    that reuses an earlier layer's selection (no indexer of its own, ``indexer = None``)."""
    found: dict[int, tuple[int, int]] = {}
    m: Any  # a module read by its attributes' names
    for m in model.modules():
        if not (is_latent_attention(m) and hasattr(m, "indexer") and isinstance(getattr(m, "layer_idx", None), int)):
            continue
        indexer = m.indexer
        if indexer is None:
            topk = getattr(config, "index_topk", None)
            if isinstance(topk, int):
                found[m.layer_idx] = (topk, 0)
        elif is_indexer(indexer):
            found[m.layer_idx] = (int(indexer.index_topk), int(indexer.head_dim))
    return found


def indexer_scopes(model: nn.Module) -> tuple[str, ...]:
    """The module paths of ``model``'s DSA indexers: their scores and the scores' weighted sum run
    as one kernel (DeepGEMM's ``fp8_mqa_logits``, which vLLM calls), the per-head scores kept on chip."""
    return tuple(name for name, m in model.named_modules() if is_indexer(m))


def unrecognised(model: nn.Module, layer: int) -> str:
    """What layer ``layer``'s attention is, for an error: the module path and class of its indexer
    (or of the attention module, where it has none opcount recognises)."""
    for name, m in model.named_modules():
        if getattr(m, "layer_idx", None) == layer and hasattr(m, "indexer"):
            part, found = (f"{name}.indexer", m.indexer) if m.indexer is not None else (name, m)
            return f"{part} ({type(found).__name__})"
    return "no attention module with an indexer"


def hold_index_keys(held: Any, batch: int, kv_len: int, seq_len: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    """Give the transformers cache layer ``held`` an indexer key cache of ``kv_len + seq_len``
    positions: the step writes its new keys in place and the indexer reads every key held (a
    prompt: the keys it just made). Returns the tensor to name."""
    keys = torch.empty((batch, kv_len + seq_len, width), dtype=dtype, device="meta")

    def update_indexer(new: torch.Tensor) -> torch.Tensor:
        if new.shape[0] != batch or new.shape[-1] != width or new.shape[1] != seq_len:
            raise OpcountError(
                f"the indexer caches {tuple(new.shape)} per step where its config gives ({batch}, {seq_len}, {width}) "
                "(batch, tokens, width): opcount does not know this shape"
            )
        keys.index_copy_(1, torch.arange(kv_len, kv_len + seq_len, device=new.device), new)
        # the scoring kernel reads the float8 keys and scores in float32 (the model's own .float() then
        # has nothing to do): the conversion is its prologue, the keys read at their stored size
        return new if kv_len == 0 else keys.float()

    held.update_indexer = update_indexer
    held.indexer_keys = keys
    return keys


def hold_sparse_reads(held: Any, latent: torch.Tensor, topk: int, kv_len: int, seq_len: int) -> dict[str, torch.Tensor]:
    """The latents the step's sparse attention reads, made before the trace as named views of the
    held ``latent`` ``[b, 1, kv_len + seq_len, w]`` (so they are priced as the cache is): the
    positions the dense queries see (``latent[dense]``: the first ``kv_len + m``) and each other
    query's ``topk`` (``latent[chosen]``: ``[b, s - m, 1, topk, w]``, the first ``topk`` positions
    standing for the chosen ones, one gather per query). Returns the tensors to name."""
    m = dense_queries(topk, kv_len, seq_len)
    named: dict[str, torch.Tensor] = {}
    if 0 < m and kv_len + m < latent.shape[2]:
        named["latent[dense]"] = latent[:, :, : kv_len + m]
    if m < seq_len:
        named["latent[chosen]"] = latent[:, :, :topk].unsqueeze(1).expand(-1, seq_len - m, -1, -1, -1)
    held.sparse_reads = (named.get("latent[dense]", latent if m else None), named.get("latent[chosen]"))
    return named


def dense_queries(topk: int, kv_len: int, seq_len: int) -> int:
    """How many of ``seq_len`` queries after ``kv_len`` cached tokens see at most ``topk`` tokens."""
    return max(0, min(topk - kv_len, seq_len))


def sparse_attention(
    module: Any,
    reads: tuple[torch.Tensor | None, torch.Tensor | None],
    query: torch.Tensor,
    latent: torch.Tensor,
    value: torch.Tensor,
    scaling: float | None,
) -> tuple[torch.Tensor, None]:
    """The absorbed attention of ``query [b, heads, s, nope + rope]``, each query over
    ``min(position + 1, topk)`` latents (``reads``: :func:`hold_sparse_reads`); returns
    ``[b, s, heads, v_head_dim]``."""
    sinks = getattr(module, "sinks", None)  # HY-V4's learned sink logit per head, passed as ``s_aux``
    attend = functools.partial(_capped, reads, sinks if isinstance(sinks, torch.Tensor) else None)
    return absorbed_attention(module, query, latent, value, scaling, attend)


def _capped(
    reads: tuple[torch.Tensor | None, torch.Tensor | None],
    sinks: torch.Tensor | None,
    q: torch.Tensor,
    latent: torch.Tensor,
    scaling: float | None,
) -> torch.Tensor:
    """``q [b, h, s, w]``: the first ``m`` queries (those seeing at most ``topk`` tokens) over the
    ``dense`` latents they see, the others over their ``chosen`` ``topk`` each; a sink logit per head
    adds its softmax term as the serving attention prices it."""
    dense, chosen = reads
    s = q.shape[2]
    m = s if chosen is None else s - chosen.shape[1]
    outs = []
    if dense is not None:  # as a dense latent layer: causal in a prompt, over every held token in a decode step
        prompt = dense.shape[2] == m
        outs.append(
            F.scaled_dot_product_attention(
                q[:, :, :m], dense, dense, scale=scaling, is_causal=prompt and m > 1, enable_gqa=True
            )
        )
    if chosen is not None:  # one query a row: [b, s - m, h, 1, w] over its own topk latents [b, s - m, 1, topk, w]
        rows = q[:, :, m:].transpose(1, 2).unsqueeze(-2)
        out = F.scaled_dot_product_attention(rows, chosen, chosen, scale=scaling, enable_gqa=True)
        outs.append(out.squeeze(-2).transpose(1, 2))
    out = torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]
    if sinks is not None:
        sink_terms(sinks, out)
    return out


@contextlib.contextmanager
def sparse(model: nn.Module, held: Mapping[int, Any], kv_len: int, seq_len: int, dtype: torch.dtype) -> Iterator[None]:
    """For the block, the DSA attention modules of the layers in ``held`` (layer: its cache layer,
    :func:`hold_sparse_reads`; already in the absorbed form, :func:`.latent.absorbed`) attend
    sparsely, and their indexer gets a zero
    additive mask (``[batch, 1, seq_len, kv_len + seq_len]``, made before the trace) where the
    serving attention gives none: the indexer adds it to its scores, as the model does with its own."""
    modules: list[Any] = [
        m for m in model.modules() if is_latent_attention(m) and hasattr(m, "indexer") and m.layer_idx in held
    ]
    missing = sorted(set(held) - {m.layer_idx for m in modules})
    if missing:
        raise OpcountError(
            f"{type(model).__name__}: layers {missing} cache indexer keys but opcount recognises no DSA attention "
            "module (latent attention with an indexer) there"
        )
    batch = next((h.max_batch_size for h in held.values()), 1)
    mask = torch.zeros((batch, 1, seq_len, kv_len + seq_len), dtype=dtype, device="meta")
    changes: list[tuple[object, str, Any]] = []
    for m in modules:
        changes.append((m, HOOK, functools.partial(sparse_attention, m, held[m.layer_idx].sparse_reads)))
        changes.append((m, "forward", functools.partial(_with_mask, m.forward, inspect.signature(m.forward), mask)))
    with patched(changes):
        yield


def _with_mask(forward: Any, signature: inspect.Signature, mask: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
    bound = signature.bind(*args, **kwargs)
    if bound.arguments.get("attention_mask") is None:
        bound.arguments["attention_mask"] = mask
    return forward(*bound.args, **bound.kwargs)
