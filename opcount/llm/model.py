"""An LLM ready to be traced for one inference phase: built on the meta device, a KV cache of
named tensors, and mixture-of-experts blocks routed by expectation.

- **The cache** is a transformers ``StaticCache`` of ``kv_len + seq_len`` positions whose key
  and value tensors are registered on the model as buffers named ``kv_cache.L.keys`` /
  ``kv_cache.L.values`` while the phase is traced, so the records know which reads and writes
  are the cache's (priced in the KV dtype). A static cache writes the new tokens in place
  (``index_copy_``) and attention reads the whole cache, as serving engines do; a dynamic cache
  would copy the whole cache at every step (``torch.cat``), which no engine does.
- **Mixture of experts**: routing real weights is data-dependent (``nonzero``, ``where``), which
  meta tensors cannot follow, and random weights route at random. Expected routing is
  deterministic instead: every token goes to ``top_k`` experts and the load is spread as evenly
  as integers allow (expert ``e`` of ``E`` gets ``T*k // E`` tokens, one more while ``e <
  T*k % E``), so the experts' FLOPs are ``tokens x top_k x`` one expert's per-token FLOPs.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import OpcountError, OpcountValueError
from ..messages import first_line
from ..tracers.meta import CLAIMED_ON_META
from ..transformers_internals import attention_implementation, set_attention_implementation, set_cached_length
from .limits import SizeError, check_config, module_budget

KV_PREFIX = "kv_cache"


@dataclass(frozen=True)
class KVGeometry:
    """What one token of KV cache holds: ``layers x kv_heads x head_dim`` keys and as many values."""

    layers: int
    kv_heads: int
    head_dim: int

    def elements(self, tokens: int, batch: int) -> int:
        """Elements of keys and values for ``tokens`` positions of ``batch`` sequences."""
        return 2 * self.layers * self.kv_heads * self.head_dim * tokens * batch


def text_config(config: Any) -> Any:
    """The decoder's config (a multimodal config holds it inside)."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if callable(get) else config


def kv_geometry(config: Any) -> KVGeometry:
    """The KV cache's shape per token, from the config's attention hyperparameters."""
    c = text_config(config)
    heads = getattr(c, "num_attention_heads", None)
    layers = getattr(c, "num_hidden_layers", None)
    hidden = getattr(c, "hidden_size", None)
    if not (isinstance(heads, int) and isinstance(layers, int) and isinstance(hidden, int)):
        raise OpcountValueError(f"{type(c).__name__} does not say its attention heads, layers and hidden size")
    kv_heads = getattr(c, "num_key_value_heads", None) or heads
    head_dim = getattr(c, "head_dim", None) or hidden // heads
    return KVGeometry(layers, int(kv_heads), int(head_dim))


def learned_positions(model: nn.Module, config: Any) -> tuple[str, int] | None:
    """The learned position embedding (GPT-2's ``wpe``), as its module name and rows: an embedding
    table of exactly ``max_position_embeddings`` rows besides the token embedding. Rotary and ALiBi
    models have none: they run past their configured length (with the quality that gives)."""
    rows = getattr(config, "max_position_embeddings", None)
    get_tokens = getattr(model, "get_input_embeddings", None)
    tokens = get_tokens() if callable(get_tokens) else None
    for name, module in model.named_modules():
        if isinstance(module, nn.Embedding) and module is not tokens and module.num_embeddings == rows:
            return name, rows
    return None


def is_causal_lm(config: Any) -> bool:
    """Whether transformers builds a decoder-only causal LM for ``config``: BERT's config also maps
    to a causal-LM head (BertLMHeadModel) but is a masked LM, and an encoder-decoder is not one."""
    from ..transformers_internals import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    kind = type(config)
    return (
        not getattr(config, "is_encoder_decoder", False)
        and kind in MODEL_FOR_CAUSAL_LM_MAPPING
        and kind not in MODEL_FOR_MASKED_LM_MAPPING
    )


def build_on_meta(config: Any, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """A causal LM for ``config`` with its weights on the meta device (nothing allocated)."""
    from ..transformers_internals import MODEL_FOR_CAUSAL_LM_MAPPING, AutoModelForCausalLM

    name = type(config).__name__
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise OpcountValueError(f"transformers has no causal LM for {name}")
    check_config(config)
    try:
        with torch.device("meta"), module_budget(name):
            # transformers leaves from_config unannotated
            model: nn.Module = AutoModelForCausalLM.from_config(config, dtype=dtype)
    except SizeError:
        raise
    except Exception as e:  # raised by the constructors on the config's values, whatever its type
        raise OpcountValueError(f"{name}: invalid config: {first_line(e, type(e).__name__)}") from e
    return model.to(dtype).eval()


@contextlib.contextmanager
def static_cache(
    model: nn.Module, config: Any, batch: int, kv_len: int, seq_len: int, dtype: torch.dtype
) -> Iterator[Any]:
    """A ``StaticCache`` holding ``kv_len`` tokens with room for ``seq_len`` more, its tensors
    registered as the model's buffers for the block (removed afterwards)."""
    from ..transformers_internals import StaticCache, StaticSlidingWindowLayer

    geometry = kv_geometry(config)
    total = kv_len + seq_len
    cache = StaticCache(config=config, max_cache_len=total)
    if len(cache.layers) != geometry.layers:
        raise OpcountError(f"{type(config).__name__}: {len(cache.layers)} cache layers for {geometry.layers} layers")
    holder = nn.Module()
    layers: list[Any] = list(cache.layers)  # StaticLayer: its attributes are set here, before its lazy start
    for index, layer in enumerate(layers):
        if isinstance(layer, StaticSlidingWindowLayer) and layer.max_cache_len < total:
            raise OpcountError(
                f"{type(config).__name__} attends to a sliding window of {layer.max_cache_len} tokens, fewer than "
                f"the {total} of this phase: opcount does not model a rolling cache"
            )
        shape = (batch, geometry.kv_heads, layer.max_cache_len, geometry.head_dim)
        keys, values = (torch.empty(shape, dtype=dtype, device="meta") for _ in range(2))
        slot = nn.Module()
        slot.register_buffer("keys", keys, persistent=False)
        slot.register_buffer("values", values, persistent=False)
        holder.add_module(str(index), slot)
        layer.max_batch_size, layer.num_heads, layer.head_dim = batch, geometry.kv_heads, geometry.head_dim
        # the device the traced forward sees the model on: the positions the layer makes match its keys
        layer.dtype, layer.device = dtype, CLAIMED_ON_META
        layer.keys, layer.values = keys, values
        layer.is_initialized = True
        set_cached_length(layer, kv_len)
    if KV_PREFIX in model._modules:
        raise OpcountError(f"the model already has a submodule named {KV_PREFIX!r}")
    model._modules[KV_PREFIX] = holder  # named buffers, not a module the forward calls
    try:
        yield cache
    finally:
        del model._modules[KV_PREFIX]


# ------------------------------------------------------------------------------------------------
# Mixture of experts
# ------------------------------------------------------------------------------------------------
def is_moe_block(module: nn.Module) -> bool:
    """A router (``gate``) over a list of ``experts`` choosing ``top_k`` per token: the block of
    Mixtral, Qwen-MoE and their kin in transformers."""
    gate, experts, top_k = (getattr(module, a, None) for a in ("gate", "experts", "top_k"))
    return (
        isinstance(gate, nn.Linear)
        and isinstance(experts, nn.ModuleList)
        and isinstance(top_k, int)
        and gate.out_features == len(experts)
    )


def expert_loads(tokens: int, top_k: int, experts: int) -> list[int]:
    """Tokens per expert under expected routing: ``tokens * top_k`` spread as evenly as integers allow."""
    share, extra = divmod(tokens * top_k, experts)
    return [share + (1 if e < extra else 0) for e in range(experts)]


def _expected_forward(block: Any, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The block's forward with expected routing: the router, softmax and top-k run as in the
    model; expert ``e`` then runs on its share of the tokens, weighted and summed back."""
    batch, seq, width = hidden.shape
    flat = hidden.view(-1, width)
    logits = block.gate(flat)
    weights = torch.softmax(logits, dim=1, dtype=torch.float)
    weights, _ = torch.topk(weights, block.top_k, dim=-1)
    if getattr(block, "norm_topk_prob", True):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights.to(hidden.dtype)
    out = torch.zeros_like(flat)
    experts: nn.ModuleList = block.experts
    for expert, load in zip(experts, expert_loads(flat.shape[0], block.top_k, len(experts)), strict=True):
        if load == 0:
            continue
        rows = torch.arange(load, device=flat.device)
        y = expert(flat[:load]) * weights[:load, :1]
        out.index_add_(0, rows, y)
    shared = getattr(block, "shared_expert", None)
    if isinstance(shared, nn.Module):
        y = shared(flat)
        gate = getattr(block, "shared_expert_gate", None)
        if isinstance(gate, nn.Module):
            y = torch.sigmoid(gate(flat)) * y
        out = out + y
    return out.view(batch, seq, width), logits


@contextlib.contextmanager
def expected_routing(model: nn.Module) -> Iterator[list[str]]:
    """Every mixture-of-experts block of ``model`` routes by expectation for the block; yields
    their module names."""
    blocks = [(name, m) for name, m in model.named_modules() if is_moe_block(m)]
    for _, block in blocks:
        block.forward = types.MethodType(_expected_forward, block)
    try:
        yield [name for name, _ in blocks]
    finally:
        for _, block in blocks:
            block.__dict__.pop("forward", None)


# ------------------------------------------------------------------------------------------------
# Attention as serving kernels run it
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
    new, total = query.shape[2], key.shape[2]
    out = torch.nn.functional.scaled_dot_product_attention(
        query,
        key,
        value,
        scale=scaling,
        is_causal=new > 1 and new == total,
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def _no_mask(*args: Any, **kwargs: Any) -> None:
    return None


@contextlib.contextmanager
def serving_attention(model: nn.Module) -> Iterator[None]:
    """The model's attention runs :func:`_serving_attention` for the block (where it goes through
    transformers' attention registry: else its own code and masks run)."""
    from ..transformers_internals import AttentionInterface, AttentionMaskInterface, runs_attention_interface

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
