"""The transformers names opcount relies on beyond building a model from its config, reached
through this module alone.

Checked on transformers 4.57 and 5.24. The cache classes and their layers' attributes, the
attention and mask registries, the config's attention-implementation slot and the keyword a
forward takes its cache by changed between these releases; each difference is settled here, once,
so the rest of opcount reads one spelling. transformers is imported when a function is called,
never at ``import opcount``.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import threading
from types import ModuleType
from typing import Any

from torch import nn

from .errors import OpcountError

CHECKED_ON = ("4.57.6", "5.24.0")

# The names, by where the installed transformers keeps them; ``from opcount.transformers_internals
# import StaticCache`` resolves one when it runs (module ``__getattr__``), importing transformers then.
_NAMES = {
    "AttentionInterface": "transformers.AttentionInterface",
    "AttentionMaskInterface": "transformers.masking_utils.AttentionMaskInterface",
    "AutoConfig": "transformers.AutoConfig",
    "AutoModelForCausalLM": "transformers.AutoModelForCausalLM",
    "Cache": "transformers.cache_utils.Cache",
    "CacheLayerMixin": "transformers.cache_utils.CacheLayerMixin",
    "DummyLayer": "transformers.cache_utils.DummyLayer",
    "DynamicCache": "transformers.DynamicCache",
    "LinearAttentionAndStaticFullAttentionLayer": "transformers.cache_utils.LinearAttentionAndStaticFullAttentionLayer",
    "LinearAttentionCacheLayerMixin": "transformers.cache_utils.LinearAttentionCacheLayerMixin",
    "LinearAttentionLayer": "transformers.cache_utils.LinearAttentionLayer",
    "StaticLayer": "transformers.cache_utils.StaticLayer",
    "CONFIG_MAPPING": "transformers.models.auto.configuration_auto.CONFIG_MAPPING",
    "MODEL_FOR_CAUSAL_LM_MAPPING": "transformers.MODEL_FOR_CAUSAL_LM_MAPPING",
    "MODEL_FOR_MASKED_LM_MAPPING": "transformers.MODEL_FOR_MASKED_LM_MAPPING",
    "PretrainedConfig": "transformers.PretrainedConfig",
    "PreTrainedModel": "transformers.PreTrainedModel",
    "ROPE_INIT_FUNCTIONS": "transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS",
    "StaticCache": "transformers.StaticCache",
    "StaticSlidingWindowLayer": "transformers.cache_utils.StaticSlidingWindowLayer",
    "hf_logging": "transformers.utils.logging",
    # Falcon's rotary embedding, which opcount.llm.attention.kv_copies applies to its KV heads uncopied
    "falcon_rotary": "transformers.models.falcon.modeling_falcon.apply_rotary_pos_emb",
}


_IMPORTING = threading.RLock()


def transformers_module() -> ModuleType:
    """transformers, imported under a lock. Its first import in several threads at once hands the
    threads that did not start it a module still being filled: a name it exports raises
    AttributeError there (``transformers.LlamaConfig``, transformers 5.24)."""
    with _IMPORTING:
        import transformers  # ImportError without it: the callers say which extra adds it
    return transformers


def __getattr__(name: str) -> Any:
    path = _NAMES.get(name)
    if path is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    transformers = transformers_module()
    try:
        return _resolve(path)
    except (ImportError, AttributeError):
        raise OpcountError(
            f"transformers {transformers.__version__} has no {path}, which opcount uses (checked on transformers "
            f"{' and '.join(CHECKED_ON)}); install one of those versions"
        ) from None


def _resolve(path: str) -> Any:
    try:
        return importlib.import_module(path)  # a module (transformers.utils.logging)
    except ImportError:
        module, _, attribute = path.rpartition(".")
        return getattr(importlib.import_module(module), attribute)


def attention_implementation(config: Any) -> Any:
    """The attention implementation the config names for its model (the private slot transformers
    reads at each forward; None where it picks its default)."""
    return config.__dict__.get("_attn_implementation_internal")


def set_attention_implementation(config: Any, name: Any) -> None:
    """Make the config's model run the attention registered as ``name`` (read at each forward)."""
    config._attn_implementation_internal = name


def cache_keyword(model: nn.Module) -> str:
    """The keyword the model's forward takes its KV cache by: ``cache`` from transformers 5.2x
    (which warns at the old name), ``past_key_values`` before, ``state`` for RWKV, which has neither."""
    parameters = inspect.signature(model.forward).parameters
    if "cache" in parameters:
        return "cache"
    return "state" if "state" in parameters and "past_key_values" not in parameters else "past_key_values"


def takes_cache_position(model: nn.Module) -> bool:
    """Whether the forward names ``cache_position`` (transformers 4.x; 5.x's static cache layers
    count their own positions)."""
    return "cache_position" in inspect.signature(model.forward).parameters


def runs_attention_interface(model: nn.Module) -> bool:
    """Whether the model's attention goes through transformers' registry of attention functions
    (``ALL_ATTENTION_FUNCTIONS``, what ``AttentionInterface.register`` adds to): its modeling module
    looks the function up there. Some (MPT, Bloom, Falcon, GPT-Neo) compute attention in their own
    code, with a mask they need as a tensor."""
    modules = {type(m).__module__ for m in model.modules()}
    return any("ALL_ATTENTION_FUNCTIONS" in vars(sys.modules[name]) for name in modules if name in sys.modules)


def layer_config(config: Any, index: int) -> Any:
    """Layer ``index``'s own config where a 5.x config differs by layer (``is_heterogeneous``, its
    ``per_layer_config``: reading such a field off the model's config raises), else the config."""
    return config.per_layer_config[index] if getattr(config, "is_heterogeneous", False) else config


def cache_layer_types(config: Any) -> list[tuple[str, dict[str, Any]]]:
    """Each layer's cache type as transformers reads it from a decoder config, with the arguments
    its cache layer takes (``sliding_window``: a window or a chunk). 5.x reads them per layer
    (``get_layer_types_and_kwargs``: linear-attention, conv, hybrid and dummy layers too); 4.x's
    static cache knew full, sliding and chunked attention only, read as it read them."""
    from transformers import cache_utils

    read = getattr(cache_utils, "get_layer_types_and_kwargs", None)  # None on 4.x
    if read is not None:
        types, kwargs = read(config)
        return list(zip(types, kwargs, strict=False))  # the caller checks the counts
    layers = int(config.num_hidden_layers)
    types = getattr(config, "layer_types", None)
    if types is None:
        fallback = "sliding_attention" if getattr(config, "sliding_window", None) is not None else None
        fallback = fallback or ("chunked_attention" if getattr(config, "attention_chunk_size", None) else None)
        types = [fallback or "full_attention"] * layers
    window = {"sliding_attention": "sliding_window", "chunked_attention": "attention_chunk_size"}
    return [(t, {"sliding_window": getattr(config, window[t])} if t in window else {}) for t in types]
