"""Published LLM architectures, by name: the hyperparameters of their released ``config.json``.

Nothing is downloaded: each entry is the handful of numbers that decide the cost (sources in
docs/llm.md). ``llm:NAME`` on the command line and :func:`config` in Python build a transformers
config from them; the model itself is then built on the meta device.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

from ..errors import OpcountValueError


@dataclass(frozen=True)
class Architecture:
    """A released model: its transformers config class and the values that differ from its defaults."""

    config_class: str
    values: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the config file the values come from


_LLAMA3 = {"vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5}

ARCHITECTURES: dict[str, Architecture] = {
    "llama-2-7b": Architecture(
        "LlamaConfig",
        {
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
        },
        "meta-llama/Llama-2-7b-hf config.json",
    ),
    "llama-3-8b": Architecture(
        "LlamaConfig",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            **_LLAMA3,
        },
        "meta-llama/Meta-Llama-3-8B config.json",
    ),
    "llama-3-70b": Architecture(
        "LlamaConfig",
        {
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            **_LLAMA3,
        },
        "meta-llama/Meta-Llama-3-70B config.json",
    ),
    "mistral-7b": Architecture(
        "MistralConfig",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32768,
            "max_position_embeddings": 32768,
            "rope_theta": 1e6,
            "sliding_window": None,
        },
        "mistralai/Mistral-7B-v0.3 config.json",
    ),
    "mixtral-8x7b": Architecture(
        "MixtralConfig",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
            "max_position_embeddings": 32768,
            "rope_theta": 1e6,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "sliding_window": None,
        },
        "mistralai/Mixtral-8x7B-v0.1 config.json",
    ),
    "qwen2.5-7b": Architecture(
        "Qwen2Config",
        {
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "max_position_embeddings": 131072,
            "rope_theta": 1e6,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
            "use_sliding_window": False,
        },
        "Qwen/Qwen2.5-7B config.json",
    ),
    "qwen1.5-moe-a2.7b": Architecture(
        "Qwen2MoeConfig",
        {
            "hidden_size": 2048,
            "intermediate_size": 5632,
            "moe_intermediate_size": 1408,
            "shared_expert_intermediate_size": 5632,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "num_key_value_heads": 16,
            "num_experts": 60,
            "num_experts_per_tok": 4,
            "vocab_size": 151936,
            "max_position_embeddings": 8192,
            "rope_theta": 1e6,
            "rms_norm_eps": 1e-6,
            "decoder_sparse_step": 1,
            "tie_word_embeddings": False,
            "use_sliding_window": False,
        },
        "Qwen/Qwen1.5-MoE-A2.7B config.json",
    ),
    "gpt2": Architecture(
        "GPT2Config",
        {"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257, "n_positions": 1024},
        "openai-community/gpt2 config.json",
    ),
}


def config(name: str, **overrides: Any) -> Any:
    """The transformers config of the published architecture ``name`` (see :data:`ARCHITECTURES`),
    with ``overrides`` applied (e.g. ``num_hidden_layers=2``)."""
    arch = ARCHITECTURES.get(name.lower())
    if arch is None:
        close = difflib.get_close_matches(name.lower(), ARCHITECTURES, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise OpcountValueError(f"unknown architecture {name!r}: choose one of {', '.join(ARCHITECTURES)}{hint}")
    import transformers

    return getattr(transformers, arch.config_class)(**{**arch.values, **overrides})
