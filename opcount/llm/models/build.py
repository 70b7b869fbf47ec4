"""A causal LM built from its config on the meta device (nothing of the weights' size allocated), and what
its config says of it: the decoder's config, the KV geometry, learned positions.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...errors import OpcountValueError
from ...messages import first_line
from ...tracers.process import default_dtype_kept
from .composite import text_decoder_instead
from .fields import check_no_hub_code
from .limits import SizeError, check_config, module_budget


@dataclass(frozen=True)
class KVGeometry:
    """What one token of KV cache holds: ``layers x kv_heads x head_dim`` keys and as many values."""

    layers: int
    kv_heads: int
    head_dim: int

    def elements(self, tokens: int, batch: int) -> int:
        """Elements of keys and values for ``tokens`` positions of ``batch`` sequences."""
        return 2 * self.layers * self.kv_heads * self.head_dim * tokens * batch


def kv_geometry(c: Any) -> KVGeometry:
    """The KV cache's shape per token, from the decoder's config's (:func:`.composite.text_config`)
    attention hyperparameters."""
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
    from ...transformers_internals import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_MASKED_LM_MAPPING

    kind = type(config)
    return (
        not getattr(config, "is_encoder_decoder", False)
        and kind in MODEL_FOR_CAUSAL_LM_MAPPING
        and kind not in MODEL_FOR_MASKED_LM_MAPPING
    )


def build_on_meta(config: Any, dtype: torch.dtype = torch.bfloat16) -> nn.Module:
    """A causal LM for ``config`` with its weights on the meta device (nothing allocated)."""
    from ...transformers_internals import MODEL_FOR_CAUSAL_LM_MAPPING, AutoModelForCausalLM

    name = type(config).__name__
    if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        raise OpcountValueError(f"transformers has no causal LM for {name}")
    check_config(config)
    check_no_hub_code(config)  # transformers would download the kernel while building
    try:
        # from_config(dtype=...) sets torch's default dtype, one per process, while it builds and
        # puts back what it saw: two builds in two threads would leave the other's dtype behind
        with default_dtype_kept(), torch.device("meta"), module_budget(name):
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
    return model.to(dtype).eval()
