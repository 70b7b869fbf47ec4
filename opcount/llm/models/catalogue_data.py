"""The catalogue's data: each published architecture's transformers config class and the values of
its released ``config.json`` that decide the cost (layers, widths, heads, experts, windows, layer
types, vocabulary, tied embeddings), written out rather than left to the class defaults.

Read through :mod:`opcount.llm.models.catalogue`, which resolves names and aliases and builds the config.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Architecture:
    """A released model: its transformers config class and the values that differ from its defaults."""

    config_class: str
    values: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # the config file the values come from


_LLAMA3 = {"vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5}

_DEEPSEEK_V3: dict[str, Any] = {
    "vocab_size": 129280,
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "moe_intermediate_size": 2048,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "n_shared_experts": 1,
    "n_routed_experts": 256,
    "num_experts_per_tok": 8,
    "first_k_dense_replace": 3,
    "n_group": 8,
    "topk_group": 4,
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}

_QWEN3_MOE: dict[str, Any] = {
    "num_key_value_heads": 4,
    "head_dim": 128,
    "num_experts": 128,
    "num_experts_per_tok": 8,
    "decoder_sparse_step": 1,
    "mlp_only_layers": [],
    "norm_topk_prob": True,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "use_sliding_window": False,
}

_LLAMA4: dict[str, Any] = {
    "hidden_size": 5120,
    "intermediate_size": 8192,  # each expert's and the shared expert's
    "intermediate_size_mlp": 16384,  # the dense layers'
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "num_experts_per_tok": 1,
    "attention_chunk_size": 8192,
    "vocab_size": 202048,
    "rope_theta": 500000.0,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
}


def _gpt_oss(layers: int, experts: int) -> dict[str, Any]:
    """gpt-oss-120b and -20b differ only in depth and expert count."""
    return {
        "num_hidden_layers": layers,
        "num_local_experts": experts,
        "num_experts_per_tok": 4,
        "hidden_size": 2880,
        "intermediate_size": 2880,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * (layers // 2),
        "attention_bias": True,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096},
        "rope_theta": 150000.0,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": False,
    }


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
    # ---- 2025-2026 releases: mixtures of experts, latent attention, hybrid and state-space layers ----
    "deepseek-v3": Architecture("DeepseekV3Config", _DEEPSEEK_V3, "deepseek-ai/DeepSeek-V3 config.json"),
    "kimi-k2": Architecture(
        "DeepseekV3Config",
        {
            **_DEEPSEEK_V3,
            "vocab_size": 163840,
            "num_attention_heads": 64,
            "num_key_value_heads": 64,
            "n_routed_experts": 384,
            "first_k_dense_replace": 1,
            "n_group": 1,
            "topk_group": 1,
            "routed_scaling_factor": 2.827,
            "max_position_embeddings": 131072,
            "rope_theta": 50000.0,
            "rms_norm_eps": 1e-5,
        },
        "moonshotai/Kimi-K2-Instruct config.json",
    ),
    "gpt-oss-120b": Architecture("GptOssConfig", _gpt_oss(36, 128), "openai/gpt-oss-120b config.json"),
    "gpt-oss-20b": Architecture("GptOssConfig", _gpt_oss(24, 32), "openai/gpt-oss-20b config.json"),
    "qwen3-235b-a22b": Architecture(
        "Qwen3MoeConfig",
        {
            **_QWEN3_MOE,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "moe_intermediate_size": 1536,
            "num_hidden_layers": 94,
            "num_attention_heads": 64,
        },
        "Qwen/Qwen3-235B-A22B config.json",
    ),
    "qwen3-30b-a3b": Architecture(
        "Qwen3MoeConfig",
        {
            **_QWEN3_MOE,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "moe_intermediate_size": 768,
            "num_hidden_layers": 48,
            "num_attention_heads": 32,
        },
        "Qwen/Qwen3-30B-A3B config.json",
    ),
    "qwen3-next-80b-a3b": Architecture(
        "Qwen3NextConfig",
        {
            "hidden_size": 2048,
            "intermediate_size": 5120,
            "moe_intermediate_size": 512,
            "shared_expert_intermediate_size": 512,
            "num_experts": 512,
            "num_experts_per_tok": 10,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": True,
            "num_hidden_layers": 48,
            "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 12,
            "num_attention_heads": 16,
            "num_key_value_heads": 2,
            "head_dim": 256,
            "linear_conv_kernel_dim": 4,
            "linear_key_head_dim": 128,
            "linear_value_head_dim": 128,
            "linear_num_key_heads": 16,
            "linear_num_value_heads": 32,
            "partial_rotary_factor": 0.25,
            "rope_theta": 10000000.0,
            "vocab_size": 151936,
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
        },
        "Qwen/Qwen3-Next-80B-A3B-Instruct config.json",
    ),
    "llama-4-scout": Architecture(
        "Llama4TextConfig",
        {**_LLAMA4, "num_local_experts": 16, "interleave_moe_layer_step": 1, "use_qk_norm": True},
        "meta-llama/Llama-4-Scout-17B-16E-Instruct config.json (text_config)",
    ),
    "llama-4-maverick": Architecture(
        "Llama4TextConfig",
        {**_LLAMA4, "num_local_experts": 128, "interleave_moe_layer_step": 2, "use_qk_norm": False},
        "meta-llama/Llama-4-Maverick-17B-128E-Instruct config.json (text_config)",
    ),
    "gemma-3-27b": Architecture(
        "Gemma3TextConfig",
        {
            "hidden_size": 5376,
            "intermediate_size": 21504,
            "num_hidden_layers": 62,
            "num_attention_heads": 32,
            "num_key_value_heads": 16,
            "head_dim": 128,
            "query_pre_attn_scalar": 168,
            "sliding_window": 1024,
            # every sixth layer attends globally (sliding_window_pattern 6)
            "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 10 + ["sliding_attention"] * 2,
            "vocab_size": 262208,
            "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
        },
        "google/gemma-3-27b-it config.json (text_config)",
    ),
    "glm-4.5": Architecture(
        "Glm4MoeConfig",
        {
            "hidden_size": 5120,
            "intermediate_size": 12288,
            "moe_intermediate_size": 1536,
            "num_hidden_layers": 92,
            "num_attention_heads": 96,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "n_routed_experts": 160,
            "n_shared_experts": 1,
            "num_experts_per_tok": 8,
            "first_k_dense_replace": 3,
            "n_group": 1,
            "topk_group": 1,
            "routed_scaling_factor": 2.5,
            "norm_topk_prob": True,
            "use_qk_norm": True,
            "attention_bias": True,
            "partial_rotary_factor": 0.5,
            "rope_theta": 1000000.0,
            "vocab_size": 151552,
            "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
        },
        "zai-org/GLM-4.5 config.json",
    ),
    "mistral-small-3": Architecture(
        "MistralConfig",
        {
            "hidden_size": 5120,
            "intermediate_size": 32768,
            "num_hidden_layers": 40,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "head_dim": 128,
            "vocab_size": 131072,
            "max_position_embeddings": 32768,
            "rope_theta": 100000000.0,
            "rms_norm_eps": 1e-5,
            "sliding_window": None,
            "tie_word_embeddings": False,
        },
        "mistralai/Mistral-Small-24B-Base-2501 config.json",
    ),
    "mamba-2.8b": Architecture(
        "MambaConfig",
        {
            "hidden_size": 2560,
            "num_hidden_layers": 64,
            "state_size": 16,
            "expand": 2,
            "conv_kernel": 4,
            "time_step_rank": 160,
            "use_bias": False,
            "use_conv_bias": True,
            "vocab_size": 50280,
            "tie_word_embeddings": True,
        },
        "state-spaces/mamba-2.8b-hf config.json",
    ),
    "jamba-mini": Architecture(
        "JambaConfig",
        {
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_experts": 16,
            "num_experts_per_tok": 2,
            "expert_layer_period": 2,
            "expert_layer_offset": 1,
            "attn_layer_period": 8,
            "attn_layer_offset": 4,
            "mamba_d_state": 16,
            "mamba_d_conv": 4,
            "mamba_expand": 2,
            "mamba_dt_rank": 256,
            "mamba_conv_bias": True,
            "mamba_proj_bias": False,
            "vocab_size": 65536,
            "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
            "use_mamba_kernels": False,
        },
        "ai21labs/AI21-Jamba-Mini-1.6 config.json",
    ),
}

# Names that are the same released config under another model's name.
ALIASES: dict[str, tuple[str, str]] = {
    "deepseek-r1": ("deepseek-v3", "deepseek-ai/DeepSeek-R1 config.json"),
}
