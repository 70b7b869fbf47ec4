"""The engine plans of the blocks beyond a dense attention and MLP: multi-head latent attention (DeepSeek-V3
and the families built as it), GPT-OSS's attention with sinks and its experts, Qwen3-Next's and Qwen3.5's
gated DeltaNet, Mamba's (and FalconMamba's), Mamba-2's and Jamba's mixers; the Mamba-2 hybrids' mixers,
attention and MLPs (Bamba, Falcon-H1, Granite-4's GraniteMoeHybrid, Nemotron-H, Zamba2's shared block) and
Kimi-Linear's delta attention and MLA. transformers' plans leave these blocks whole (or give the family no
plan); vLLM splits them by heads (or channels; for experts, each expert's intermediate channels).
"""

from __future__ import annotations

from .styles import COL, EXPERTS, GATHER, ROW, WHOLE, Supplement

_MLA_ATTENTION = Supplement(
    "layers.*.self_attn",
    {
        # heads split: the query's and the latent's up-projections by heads, the output row-wise
        "q_proj": COL,  # DeepSeek-V2-Lite: no query latent (q_lora_rank None)
        "q_b_proj": COL,
        "kv_b_proj": COL,
        "o_proj": ROW,
        # the latents are computed whole on every rank (ReplicatedLinear / a fused A projection
        # with disable_tp), so is their norm; the latent cache is one head, whole on every rank
        "q_a_proj": WHOLE,
        "q_a_layernorm": WHOLE,
        "kv_a_proj_with_mqa": WHOLE,
        "kv_a_layernorm": WHOLE,
        # DeepSeek sparse attention's lightning indexer: "no tensor parallel, just replicated"
        "indexer": WHOLE,
    },
    "vllm/model_executor/models/deepseek_v2.py (DeepseekV2MLAAttention, Indexer)",
)

_GPT_OSS = (
    Supplement(
        "layers.*.self_attn",
        {"q_proj": COL, "k_proj": COL, "v_proj": COL, "o_proj": ROW, "sinks": COL},  # a sink per head
        "vllm/model_executor/models/gpt_oss.py (OAIAttention: QKVParallelLinear, RowParallelLinear)",
    ),
    Supplement(
        "layers.*.mlp.experts",
        # each expert's intermediate channels split (FusedMoE), its output all-reduced; the down
        # projection's bias is added once, whole
        {"": EXPERTS, "gate_up_proj": COL, "gate_up_proj_bias": COL, "down_proj": ROW},
        "vllm/model_executor/models/gpt_oss.py (MLPBlock: FusedMoE)",
    ),
)

_GATED_DELTANET = Supplement(
    "layers.*.linear_attn",
    {
        # the key and value heads split: projections column-wise, the convolution's channels, the
        # per-head decay and bias; the gated norm (one head's width) replicated; out_proj row-wise
        "in_proj_qkvz": COL,
        "in_proj_ba": COL,
        "conv1d": COL,
        "A_log": COL,
        "dt_bias": COL,
        "out_proj": ROW,
    },
    "vllm/model_executor/models/qwen3_next.py (Qwen3NextGatedDeltaNet)",
)

_QWEN3_5_DELTANET = Supplement(
    "layers.*.linear_attn",
    {
        # as Qwen3-Next's, its q/k/v, gate z and b/a projections apart (vLLM fuses them back column-wise)
        "in_proj_qkv": COL,
        "in_proj_z": COL,
        "in_proj_b": COL,
        "in_proj_a": COL,
        "conv1d": COL,
        "A_log": COL,
        "dt_bias": COL,
        "out_proj": ROW,
    },
    "vllm/model_executor/models/qwen3_5.py (GatedDeltaNetAttention, vllm/model_executor/layers/mamba/gdn_linear_attn.py)",
)

_MAMBA2_MIXER = Supplement(
    "layers.*.mixer",
    {
        # heads (and their groups) split: in_proj's gate, x, B, C and dt column-wise, the
        # convolution's channels, A, D, dt_bias and the gated norm's weight; out_proj row-wise
        "in_proj": COL,
        "conv1d": COL,
        "A_log": COL,
        "D": COL,
        "dt_bias": COL,
        "norm": COL,
        "out_proj": ROW,
    },
    "vllm/model_executor/layers/mamba/mamba_mixer2.py (MambaMixer2)",
)

_MAMBA_MIXER = {
    # channels split: in_proj (x and gate), the convolution, dt_proj, A and D column-wise; x_proj
    # (dt, B, C from the split channels) row-wise, its small output all-reduced; out_proj row-wise
    "in_proj": COL,
    "conv1d": COL,
    "x_proj": ROW,
    "dt_proj": COL,
    "A_log": COL,
    "D": COL,
    "out_proj": ROW,
}
_MAMBA_SOURCE = "vllm/model_executor/layers/mamba/mamba_mixer.py (MambaMixer)"
_VOCAB = (
    # the vocabulary split as every vLLM decoder splits it (VocabParallelEmbedding, ParallelLMHead)
    Supplement("embeddings", {"": "embedding_rowwise"}, "vllm/model_executor/models/mamba2.py, mamba.py"),
    Supplement("lm_head", {"": "colwise_gather_output"}, "vllm/model_executor/models/mamba2.py, mamba.py"),
)
_JAMBA = (
    # Jamba's plan splits its experts alone
    Supplement(
        "layers.*.mamba",
        {**_MAMBA_MIXER, "dt_layernorm": WHOLE, "b_layernorm": WHOLE, "c_layernorm": WHOLE},  # on x_proj's whole output
        f"vllm/model_executor/models/jamba.py (JambaMambaDecoderLayer), {_MAMBA_SOURCE}",
    ),
    Supplement(
        "layers.*.self_attn",
        {"q_proj": COL, "k_proj": COL, "v_proj": COL, "o_proj": ROW},
        "vllm/model_executor/models/jamba.py (JambaAttentionDecoderLayer: QKVParallelLinear, RowParallelLinear)",
    ),
    Supplement(
        "layers.*.feed_forward",
        {"gate_proj": COL, "up_proj": COL, "down_proj": ROW},
        "vllm/model_executor/models/jamba.py (JambaMLP)",
    ),
)

# Mamba-2 hybrids: each mixer is vLLM's MambaMixer2 (split as Mamba-2's), beside attention split by heads
# (QKVParallelLinear, then RowParallelLinear) and an MLP split by channels (MergedColumnParallelLinear, then
# RowParallelLinear); transformers' plans name the vocabulary and the experts alone
_ATTENTION = {"q_proj": COL, "k_proj": COL, "v_proj": COL, "o_proj": ROW}
_GATED_MLP = {"gate_proj": COL, "up_proj": COL, "down_proj": ROW}


def _embedding(source: str) -> Supplement:
    """The embedding split by vocabulary rows, where transformers' plan leaves it whole."""
    return Supplement("embed_tokens", {"": "embedding_rowwise"}, f"{source} (VocabParallelEmbedding)")


def _mamba2_hybrid(model: str, mixer: str, attention: str, mlp: str) -> tuple[Supplement, ...]:
    """Bamba's and Falcon-H1's layers: ``mamba``, ``self_attn`` and ``feed_forward`` (Falcon-H1 runs the
    first two side by side in every layer), as ``vllm/model_executor/models/<model>.py`` builds them."""
    source = f"vllm/model_executor/models/{model}.py"
    return (
        Supplement("layers.*.mamba", _MAMBA2_MIXER.styles, f"{source} ({mixer}: MambaMixer2)"),
        Supplement("layers.*.self_attn", _ATTENTION, f"{source} ({attention})"),
        Supplement("layers.*.feed_forward", _GATED_MLP, f"{source} ({mlp})"),
    )


_GRANITE_HYBRID_SOURCE = "vllm/model_executor/models/granitemoehybrid.py"
_GRANITE_HYBRID = (
    Supplement("layers.*.mamba", _MAMBA2_MIXER.styles, f"{_GRANITE_HYBRID_SOURCE} (GraniteMoeHybridMambaDecoderLayer)"),
    Supplement("layers.*.self_attn", _ATTENTION, f"{_GRANITE_HYBRID_SOURCE} (GraniteMoeHybridAttention)"),
    # gate and up fused in input_linear (MergedColumnParallelLinear)
    Supplement(
        "layers.*.shared_mlp",
        {"input_linear": COL, "output_linear": ROW},
        "vllm/model_executor/models/granitemoeshared.py (GraniteMoeSharedMLP)",
    ),
    _embedding(_GRANITE_HYBRID_SOURCE),
)

_NEMOTRON_H_SOURCE = "vllm/model_executor/models/nemotron_h.py"
_NEMOTRON_H = (
    # every layer's block is its ``mixer``: a Mamba-2 mixer, attention, an MLP (up, then down) or the experts
    Supplement(
        "layers.*.mixer",
        {**_MAMBA2_MIXER.styles, **_ATTENTION, "up_proj": COL, "down_proj": ROW},
        f"{_NEMOTRON_H_SOURCE} (NemotronHMambaDecoderLayer: MambaMixer2, NemotronHAttention, NemotronHMLP)",
    ),
    # the shared expert, an MLP beside the experts the plan splits (the router, GateLinear, whole)
    Supplement(
        "layers.*.mixer.shared_experts", {"up_proj": COL, "down_proj": ROW}, f"{_NEMOTRON_H_SOURCE} (NemotronHMoE)"
    ),
    Supplement("lm_head", {"": "colwise_gather_output"}, f"{_NEMOTRON_H_SOURCE} (ParallelLMHead)"),
)

_KIMI_SOURCE = "vllm/model_executor/models/kimi_linear.py"
_KIMI_LINEAR = (
    Supplement(
        "layers.*.self_attn",
        {
            # Kimi delta attention's heads split: q, k, v, their convolution, the forget gate's up-projection,
            # bias and decay, beta, the output gate's up-projection; the two gates' down-projections (to one
            # head's width, ReplicatedLinear) run whole; the gated norm's weight (one head wide) is whole
            # on every rank, its work on the rank's heads; o_proj row-wise
            "q_proj": COL,
            "k_proj": COL,
            "v_proj": COL,
            "conv1d": COL,
            "forget_gate.f_a_proj": WHOLE,
            "forget_gate.f_b_proj": COL,
            "forget_gate.dt_bias": COL,
            "forget_gate.A_log": COL,
            "b_proj": COL,
            "g_a_proj": WHOLE,
            "g_b_proj": COL,
            "o_proj": ROW,
            # its full-attention layers' MLA (no query latent): as DeepSeek's
            "kv_a_proj_with_mqa": WHOLE,
            "kv_a_layernorm": WHOLE,
            "kv_b_proj": COL,
        },
        f"vllm/model_executor/layers/kda.py (KimiDeltaAttention), {_KIMI_SOURCE} (KimiMLAAttention)",
    ),
    _embedding(_KIMI_SOURCE),
)

_ZAMBA2_SOURCE = "vllm/model_executor/models/zamba2.py"
_ZAMBA2 = (
    # the Mamba-2 mixers, alone or in a hybrid layer beside the shared transformer block
    Supplement("layers.*.mamba", _MAMBA2_MIXER.styles, f"{_ZAMBA2_SOURCE} (Zamba2MambaDecoderLayer: MambaMixer2)"),
    Supplement("layers.*.mamba_decoder.mamba", _MAMBA2_MIXER.styles, f"{_ZAMBA2_SOURCE} (Zamba2HybridLayer)"),
    # the shared block's attention and MLP by heads and channels; each low-rank adapter's down-projection
    # (Zamba2LoRA's A: column-parallel, its output gathered) then its up-projection (B) column-wise.
    # The hybrid layer's ``linear`` (ReplicatedLinear) is outside both, whole
    Supplement(
        "layers.*.shared_transformer.self_attn",
        {**_ATTENTION, **{f"linear_{p}_adapter_list.*.{i}": s for p in "qkv" for i, s in ((0, GATHER), (1, COL))}},
        f"{_ZAMBA2_SOURCE} (Zamba2Attention, Zamba2LoRA)",
    ),
    Supplement(
        "layers.*.shared_transformer.feed_forward",
        {
            "gate_up_proj": COL,
            "down_proj": ROW,
            "gate_up_proj_adapter_list.*.0": GATHER,
            "gate_up_proj_adapter_list.*.1": COL,
        },
        f"{_ZAMBA2_SOURCE} (Zamba2MLP, Zamba2LoRA)",
    ),
    _embedding(_ZAMBA2_SOURCE),
    Supplement("lm_head", {"": GATHER}, f"{_ZAMBA2_SOURCE} (ParallelLMHead)"),
)

# config.model_type -> the blocks vLLM splits that transformers' plan leaves whole
SUPPLEMENTS: dict[str, tuple[Supplement, ...]] = {
    "deepseek_v2": (_MLA_ATTENTION,),
    "deepseek_v3": (_MLA_ATTENTION,),  # Kimi-K2 and DeepSeek-R1 are built as DeepSeek-V3
    "deepseek_v32": (_MLA_ATTENTION,),
    "glm4_moe_lite": (_MLA_ATTENTION,),
    "glm_moe_dsa": (_MLA_ATTENTION,),
    # two MLA blocks a layer (self_attn.0 and .1)
    "longcat_flash": (Supplement("layers.*.self_attn.*", _MLA_ATTENTION.styles, _MLA_ATTENTION.source),),
    "gpt_oss": _GPT_OSS,
    "qwen3_next": (_GATED_DELTANET,),
    "qwen3_5_text": (_QWEN3_5_DELTANET,),
    "qwen3_5_moe_text": (_QWEN3_5_DELTANET,),
    "mamba2": (_MAMBA2_MIXER, *_VOCAB),  # transformers gives Mamba and Mamba-2 no plan
    "mamba": (Supplement("layers.*.mixer", _MAMBA_MIXER, _MAMBA_SOURCE), *_VOCAB),
    # vLLM runs FalconMamba as Mamba (vllm/model_executor/models/registry.py), its weightless RMS norms of
    # dt, B and C on x_proj's whole output (MambaMixer's use_rms_norm, rms_norm_has_weight=False)
    "falcon_mamba": (Supplement("layers.*.mixer", _MAMBA_MIXER, _MAMBA_SOURCE), *_VOCAB),
    "jamba": _JAMBA,
    "bamba": _mamba2_hybrid("bamba", "BambaMixerDecoderLayer", "BambaAttentionDecoderLayer", "BambaMLP"),
    "falcon_h1": _mamba2_hybrid("falcon_h1", "FalconH1SSMDecoderLayer", "FalconH1AttentionDecoderLayer", "FalconH1MLP"),
    "granitemoehybrid": _GRANITE_HYBRID,
    "nemotron_h": _NEMOTRON_H,
    "kimi_linear": _KIMI_LINEAR,
    "zamba2": _ZAMBA2,
}

# per family, the head counts --tp must divide beyond the attention's (vLLM asserts each)
HEAD_FIELDS: dict[str, tuple[str, ...]] = {
    "qwen3_next": ("linear_num_key_heads", "linear_num_value_heads"),
    "qwen3_5_text": ("linear_num_key_heads", "linear_num_value_heads"),
    "qwen3_5_moe_text": ("linear_num_key_heads", "linear_num_value_heads"),
    "mamba2": ("num_heads", "n_groups"),
    "mamba": ("intermediate_size",),
    "falcon_mamba": ("intermediate_size",),
    # vLLM copies a Mamba-2 mixer's groups when --tp does not divide them: opcount does not model that
    "bamba": ("mamba_n_heads", "mamba_n_groups"),
    "falcon_h1": ("mamba_n_heads", "mamba_n_groups"),
    "granitemoehybrid": ("mamba_n_heads", "mamba_n_groups"),
    "nemotron_h": ("mamba_num_heads", "n_groups"),
    "kimi_linear": ("linear_num_heads",),
    "zamba2": ("n_mamba_heads", "mamba_ngroups"),
}
