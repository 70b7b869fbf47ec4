"""The speed of light's bytes of one decode step, for every cache and state family the LLM path runs,
against the closed form worked by hand from each tiny config:

    bound bytes = weights read + cache read once + cache written once + inputs and outputs

- weights read: every parameter once, 2 bytes each (bf16), the embedding table's looked-up rows only
  (B of V) unless the output layer is tied to it and reads it all; the buffers a step reads (rotary
  frequencies, Falcon-H1's mup vector, MiniMax's slopes, a router's correction bias) once; a weight
  transformers keeps in float32 (``_keep_in_fp32_modules_strict``) at 4 bytes;
- cache read: each state whole, each attention layer's held positions (L + 1 after the new token is
  written; a sliding window's W), ``k`` bytes an element (the KV dtype) for the keys and values, 2
  (the model's bfloat16) for a state, 4 for a state part kept in float32 (by the model, or by the
  config's ``mamba_ssm_cache_dtype``);
- cache written: each state whole, one token per attention layer;
- inputs and outputs: the token ids (int64) and the last token's logits (bf16, or float32 where the
  model upcasts them).

The parameter count P is transformers' module structure (``model.parameters()``); the cache sizes
are worked from the config. B = 2 sequences, L = 5 cached tokens, V = 100, D = 32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="layer types need transformers 5")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.precision.dtypes import Precision  # noqa: E402

B, L, V, D = 2, 5, 100, 32
ATTENTION = {"vocab_size": V, "hidden_size": D, "intermediate_size": 64, "num_attention_heads": 4}
GQA = {**ATTENTION, "num_key_value_heads": 2, "head_dim": 8}  # a token: keys and values, 2 x 2 x 8 = 32
MAMBA2 = {"mamba_n_heads": 4, "mamba_d_head": 16, "mamba_n_groups": 1, "mamba_d_state": 8, "mamba_d_conv": 4}
# Mamba-2 at these sizes (mamba_ssm's allocate_inference_cache): inner 64 = 4 heads x 16; a conv over
# x, B and C, 64 + 2 x 1 x 8 = 80 channels x 4 taps = 320, and an SSM state 4 x 16 x 8 = 512: 832
MAMBA2_STATE = 80 * 4 + 4 * 16 * 8
# Mamba (v1) at inner 64, d_state 8, conv 4: 64 x 4 + 64 x 8 = 768
MAMBA_STATE = 64 * 4 + 64 * 8
TOKEN = 2 * 2 * 8
ROTARY = 4 * 2  # inv_freq of a head_dim-8 rotary embedding: 4 frequencies, 2 bytes each


@dataclass(frozen=True)
class Step:
    """A family's decode step: its config, what each layer holds (``states``: elements per sequence
    of each state layer; ``tokens``: elements per position of each attention layer, with the
    positions it reads), the logits' bytes per element, and the buffers and float32 weights'
    extra bytes read."""

    config: Callable[[], Any]
    states: tuple[int, ...] = ()
    tokens: tuple[tuple[int, int], ...] = ()
    logits: int = 2
    extra: int = 0
    wide: tuple[int, ...] = ()  # elements per sequence of each float32 state part (4 bytes, whatever k)

    def bound_bytes(self, parameters: int, tied: bool, kv: int) -> int:
        weights = 2 * (parameters if tied else parameters - (V - B) * D) + self.extra
        read = sum(B * s * 2 for s in self.states) + sum(B * n * t * kv for t, n in self.tokens)
        written = sum(B * s * 2 for s in self.states) + sum(B * t * kv for t, _ in self.tokens)
        read, written = read + 4 * B * sum(self.wide), written + 4 * B * sum(self.wide)
        return weights + read + written + B * 8 + B * V * self.logits


FULL = L + 1  # a full-attention layer reads the L cached tokens and the new one

STEPS = {
    # Mamba: two layers of 768; logits upcast to float32 (lm_head(...).float())
    "mamba": Step(
        lambda: transformers.MambaConfig(vocab_size=V, hidden_size=D, state_size=8, num_hidden_layers=2, expand=2),
        states=(MAMBA_STATE,) * 2,
        logits=4,
    ),
    # Mamba-2: two layers of 832 (n_groups 1, 4 heads of 16); float32 logits
    "mamba2": Step(
        lambda: transformers.Mamba2Config(
            vocab_size=V,
            hidden_size=D,
            state_size=8,
            num_hidden_layers=2,
            expand=2,
            num_heads=4,
            head_dim=16,
            n_groups=1,
        ),
        states=(MAMBA2_STATE,) * 2,
        logits=4,
    ),
    # Jamba: a Mamba layer (768) then an attention layer (no rotary), two experts both routed
    "jamba": Step(
        lambda: transformers.JambaConfig(
            **{k: v for k, v in GQA.items() if k != "head_dim"},
            num_hidden_layers=2,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=2,
            expert_layer_offset=1,
            num_experts=2,
            num_experts_per_tok=2,
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_dt_rank=4,
        ),
        states=(MAMBA_STATE,),
        tokens=((TOKEN, FULL),),
    ),
    # Bamba: Mamba-2 then attention; rotary over half the head (partial_rotary_factor 0.5): 2 frequencies
    "bamba": Step(
        lambda: transformers.BambaConfig(
            **{k: v for k, v in GQA.items() if k != "head_dim"}, num_hidden_layers=2, attn_layer_indices=[1], **MAMBA2
        ),
        states=(MAMBA2_STATE,),
        tokens=((TOKEN, FULL),),
        extra=2 * 2,
    ),
    # Falcon-H1: attention beside Mamba-2 in both layers; each mixer's mup vector multiplies in_proj's
    # output, 2 x 64 + 2 x 8 + 4 = 148 values a layer
    "falcon_h1": Step(
        lambda: transformers.FalconH1Config(
            **GQA,
            num_hidden_layers=2,
            mamba_d_ssm=64,
            **MAMBA2,
        ),
        states=(MAMBA2_STATE,) * 2,
        tokens=((TOKEN, FULL),) * 2,
        extra=ROTARY + 2 * 148 * 2,
    ),
    # Granite-4 (GraniteMoeHybrid): Mamba-2 then attention (no positions: "nope"), two experts both routed
    "granitemoehybrid": Step(
        lambda: transformers.GraniteMoeHybridConfig(
            **{k: v for k, v in GQA.items() if k != "head_dim"},
            num_hidden_layers=2,
            layer_types=["mamba", "attention"],
            num_local_experts=2,
            num_experts_per_tok=2,
            **MAMBA2,
            mamba_expand=2,
        ),
        states=(MAMBA2_STATE,),
        tokens=((TOKEN, FULL),),
    ),
    # Nemotron-H: Mamba-2 (its SSM state, 4 x 16 x 8 = 512, in float32: the config's
    # mamba_ssm_cache_dtype), attention, then a mixture of two experts (both routed) whose router weight
    # (2 x 32) and correction bias (2) transformers keeps in float32 (_keep_in_fp32_modules_strict):
    # 64 x 2 more bytes and 2 x 4 bytes; float32 logits
    "nemotron_h": Step(
        lambda: transformers.NemotronHConfig(
            **GQA,
            layers_block_type=["mamba", "attention", "moe"],
            mamba_num_heads=4,
            mamba_head_dim=16,
            n_groups=1,
            ssm_state_size=8,
            conv_kernel=4,
            n_routed_experts=2,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            moe_shared_expert_intermediate_size=16,
        ),
        states=(80 * 4,),
        wide=(4 * 16 * 8,),
        tokens=((TOKEN, FULL),),
        logits=4,
        extra=64 * 2 + 2 * 4,
    ),
    # Zamba2: Mamba-2 in both layers (headdim 16: 4 heads), the hybrid layer's shared attention over
    # 2 x D = 64 wide, 4 KV heads of 16: a token 2 x 4 x 16 = 128; tied embeddings
    "zamba2": Step(
        lambda: transformers.Zamba2Config(
            **ATTENTION,
            num_key_value_heads=4,
            num_hidden_layers=2,
            layers_block_type=["mamba", "hybrid"],
            mamba_d_state=8,
            mamba_d_conv=4,
            mamba_expand=2,
            mamba_headdim=16,
            mamba_ngroups=1,
            n_mamba_heads=4,
        ),
        states=(MAMBA2_STATE,) * 2,
        tokens=((2 * 4 * 16, FULL),),
    ),
    # Qwen3-Next: gated DeltaNet, a conv over q, k, v (2 x 2 x 8 + 4 x 8 = 64 channels) x 4 taps and a
    # state per value head 8 x 8 (4 x 64): 512; attention with rotary over a quarter of the head (1 frequency)
    "qwen3_next": Step(
        lambda: transformers.Qwen3NextConfig(
            **GQA,
            num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"],
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=8,
            linear_value_head_dim=8,
            linear_conv_kernel_dim=4,
            num_experts=0,
        ),
        states=(64 * 4 + 4 * 8 * 8,),
        tokens=((TOKEN, FULL),),
        extra=1 * 2,
    ),
    # Kimi-Linear: KDA, three convs (q, k, v: 4 heads x 8 = 32 channels x 4 taps each, 384) and a state
    # per head 8 x 8 (256) the model keeps in float32; latent attention (no rotary) of rank 16 + rope key
    # 8 = 24 a token; its
    # dt_bias (4 x 8), router weight (2 x 32) and correction bias (2) in float32 (strict): 32 x 2 + 64 x 2
    # more bytes and 2 x 4 bytes
    "kimi_linear": Step(
        lambda: transformers.KimiLinearConfig(
            **ATTENTION,
            num_key_value_heads=4,
            num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"],
            pad_token_id=0,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
            linear_head_dim=8,
            linear_num_heads=4,
            num_experts=2,
            num_experts_per_token=2,
            moe_intermediate_size=16,
            mlp_layer_types=["dense", "sparse"],
        ),
        states=(3 * 32 * 4,),
        wide=(4 * 8 * 8,),
        tokens=((16 + 8, FULL),),
        extra=32 * 2 + 64 * 2 + 2 * 4,
    ),
    # MiniMax: lightning attention, one decayed k^T v matrix per head (4 x 8 x 8 = 256), its 4 slopes
    # a buffer read; then full attention; two experts both routed
    "minimax": Step(
        lambda: transformers.MiniMaxConfig(
            **GQA,
            num_hidden_layers=2,
            layer_types=["linear_attention", "full_attention"],
            num_local_experts=2,
            num_experts_per_tok=2,
        ),
        states=(4 * 8 * 8,),
        tokens=((TOKEN, FULL),),
        extra=ROTARY + 4 * 2,
    ),
    # LFM2: a short convolution keeping conv_L_cache = 3 columns of D (96), then attention; tied embeddings
    "lfm2": Step(
        lambda: transformers.Lfm2Config(
            **{k: v for k, v in GQA.items() if k != "head_dim"},
            num_hidden_layers=2,
            layer_types=["conv", "full_attention"],
            conv_L_cache=3,
        ),
        states=(D * 3,),
        tokens=((TOKEN, FULL),),
        extra=ROTARY,
    ),
    # xLSTM: per block an mLSTM matrix memory of 4 heads x 4 (D x qk_dim_factor 0.5 / 4) x 8, its
    # normalizer 4 x 4 and stabilizer 4: 148; float32 logits (soft-capped); the cache's position counter
    # (one int64) read and written in place, and returned: 8 bytes
    "xlstm": Step(
        lambda: transformers.xLSTMConfig(vocab_size=V, hidden_size=D, num_heads=4, num_blocks=2),
        states=(4 * 4 * 8 + 4 * 4 + 4,) * 2,
        logits=4,
        extra=8,
    ),
    # Zamba: Mamba in all three layers, each scanning its 2 heads one by one through views of the
    # state (recurrent_state[:, head]): conv 64 x 4 and SSM 2 x 32 x 8, 768; the two hybrid layers'
    # shared attention, 2 KV heads of 2 x D / 4 = 16: a token 2 x 2 x 16 = 64; tied embeddings
    "zamba": Step(
        lambda: transformers.ZambaConfig(
            **{k: v for k, v in GQA.items() if k != "head_dim"},
            num_hidden_layers=3,
            layers_block_type=["linear_attention", "hybrid", "hybrid"],
            mamba_d_state=8,
            n_mamba_heads=2,
        ),
        states=(MAMBA_STATE,) * 3,
        tokens=((2 * 2 * 16, FULL),) * 2,
    ),
    # RecurrentGemma: two recurrent blocks, each a conv state of conv1d_width - 1 = 3 columns of
    # lru_width 32 (96, model dtype) and the RG-LRU state, 32 in float32, read through a view
    # (recurrent_states[:, None]); then local attention over a window of 8 (>= L + 1), its rotary over
    # half the head (2 frequencies); the embedding's normalizer, one bf16 buffer; tied embeddings
    "recurrentgemma": Step(
        lambda: transformers.RecurrentGemmaConfig(
            **{k: v for k, v in GQA.items() if k != "head_dim"},
            lru_width=D,
            num_hidden_layers=3,
            attention_window_size=8,
            conv1d_width=4,
        ),
        states=(3 * D,) * 2,
        wide=(D,) * 2,
        tokens=((TOKEN, FULL),),
        extra=2 * 2 + 2,
    ),
    "llama": Step(
        lambda: transformers.LlamaConfig(**GQA, num_hidden_layers=2), tokens=((TOKEN, FULL),) * 2, extra=ROTARY
    ),
    # Mistral with a window of 4 < L + 1: each layer reads the 4 tokens of its window
    "mistral": Step(
        lambda: transformers.MistralConfig(**GQA, num_hidden_layers=2, sliding_window=4),
        tokens=((TOKEN, 4),) * 2,
        extra=ROTARY,
    ),
    # DeepSeek-V3, dense layers only: the latent, rank 16 + rope key 8 = 24 a token
    "deepseek_v3": Step(
        lambda: transformers.DeepseekV3Config(
            **ATTENTION,
            num_key_value_heads=4,
            num_hidden_layers=2,
            first_k_dense_replace=2,
            q_lora_rank=16,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=8,
        ),
        tokens=((16 + 8, FULL),) * 2,
        extra=ROTARY,
    ),
}


def _bound_bytes(step: Step, kv: str | None = None, state: str | None = None) -> tuple[float, int]:
    config = step.config()
    llm = CausalLM(config, Precision(kv=kv, state=state))
    schedule = llm.phase("decode", kv_len=L, batch=B, hardware="h100-sxm").schedule
    assert schedule is not None
    parameters = sum(p.numel() for p in llm.model.parameters())  # transformers' modules, tied ones once
    expected = step.bound_bytes(parameters, bool(config.get_text_config().tie_word_embeddings), 1 if kv else 2)
    return schedule.compulsory_bytes, expected


@pytest.mark.parametrize("family", sorted(STEPS))
def test_decode_step_reads_weights_and_cache_once_and_writes_the_cache_once(family: str) -> None:
    measured, expected = _bound_bytes(STEPS[family])
    assert measured == expected


@pytest.mark.parametrize("family", ["mamba2", "jamba", "zamba", "recurrentgemma", "llama", "deepseek_v3"])
def test_the_kv_cache_in_fp8_halves_its_reads_and_writes_whatever_views_reach_it(family: str) -> None:
    # a state stays in the model's dtype: vLLM's mamba_cache_dtype, not kv_cache_dtype, holds it
    measured, expected = _bound_bytes(STEPS[family], kv="float8_e4m3fn")
    assert measured == expected


# Each family's recurrent (SSM) state elements per sequence over its layers, what the state dtype holds:
# Mamba-2 two layers of 4 heads x 16 x 8; Jamba one Mamba layer of inner 64 x 8; Zamba three layers of
# 2 heads x 32 x 8, each scanned head by head through views of the state
RECURRENT = {"mamba2": 2 * 4 * 16 * 8, "jamba": 64 * 8, "zamba": 3 * 2 * 32 * 8}


@pytest.mark.parametrize("family", sorted(RECURRENT))
def test_a_state_in_float32_doubles_its_recurrent_parts_whatever_views_reach_them(family: str) -> None:
    measured, in_bf16 = _bound_bytes(STEPS[family], state="float32")
    # read once and written once, 2 bytes more an element; the conv states stay in the model's bfloat16
    assert measured == in_bf16 + 2 * B * RECURRENT[family] * 2
