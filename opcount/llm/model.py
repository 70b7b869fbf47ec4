"""An LLM ready to be traced for one inference phase: built on the meta device, its attention
run as serving kernels run it (mixture-of-experts blocks: :mod:`.moe`; the cache per layer type:
:mod:`.cache`).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import OpcountValueError
from ..messages import first_line
from ..transformers_internals import attention_implementation, set_attention_implementation
from .composite import text_decoder_instead
from .limits import SizeError, check_config, module_budget
from .zero_experts import drop_unused

KV_PREFIX = "kv_cache"
# the cache's tensors by name: a read or write through any view of one is the cache's (priced in
# its dtype, counted by the bound), :class:`~opcount.memory.MemoryTrafficAnalysis`'s ``named_views``
CACHE_NAMES = (KV_PREFIX + ".",)
# the end of a cache tensor's name that the model keeps in float32 whatever the KV dtype (a recurrent state part)
FLOAT32_STATE = "_float32"


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
            # a copy: from_config writes its dtype into the config it is given, the caller's
            model: nn.Module = AutoModelForCausalLM.from_config(copy.deepcopy(config), dtype=dtype)
    except SizeError:
        raise
    except Exception as e:  # raised by the constructors on the config's values, whatever its type
        text = text_decoder_instead(config, e)  # a wrapper that needs an optional package
        if text is not None:
            return build_on_meta(text, dtype)
        raise OpcountValueError(f"{name}: invalid config: {first_line(e, type(e).__name__)}") from e
    drop_unused(model)  # transformers' LongCat-Flash stacks weights for its identity experts too
    return model.to(dtype).eval()


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
