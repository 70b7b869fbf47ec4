"""Tensor parallelism where transformers' plan leaves a block whole: the blocks split as vLLM splits
them (opcount.llm.deploy.engine_plans), per-device weights, cache and decode FLOPs worked by hand.

Every model is bfloat16 (2 bytes an element), decoded one token after L = 7 cached (8 positions held)
for B = 2 sequences (T = 2 tokens), at tp = 2. FLOPs are the step's matrix-product FLOPs on one device
(2 per multiply-add); "whole" is what every rank holds or runs in full, "split" what it holds half of.
Expected routing spreads the T x top_k = 4 token-expert pairs over 4 experts: one token each.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountValueError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.layout import Parallel, Sharding  # noqa: E402
from tests.llm.test_deploy import DEVICE  # noqa: E402

D, V, T, POS, BYTES = 256, 1000, 2, 8, 2
VOCAB = 2 * V * D  # embedding and lm_head, split by vocabulary rows and columns
EXPERTS_MACS = 4 * (D * 256 + 128 * D)  # 4 tokens through one expert each: gate_up (d -> 2 x 128), down (128 -> d)

MLA = {
    "hidden_size": D, "intermediate_size": 512, "moe_intermediate_size": 128, "num_hidden_layers": 2,
    "first_k_dense_replace": 1, "num_attention_heads": 8, "num_key_value_heads": 8, "n_routed_experts": 4,
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "q_lora_rank": 64, "kv_lora_rank": 32,
    "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32, "vocab_size": V,
}  # fmt: skip
# per MLA layer (h = 8 heads, nope 32, rope 16, v 32, q latent 64, kv latent 32)
MLA_WHOLE = 64 * D + 64 + 48 * D + 32  # q_a_proj, its norm, kv_a_proj_with_mqa (latent 32 + rope 16), its norm
MLA_SPLIT = 8 * 48 * 64 + 8 * 64 * 32 + D * 8 * 32  # q_b_proj, kv_b_proj (nope + v per head), o_proj
# the dense layer's MLP (3 x d x 512), the MoE layer's experts (4 x (2 x 128 + 128) x d) and shared expert
MLA_MLP_SPLIT = 3 * D * 512 + 4 * 3 * 128 * D + 3 * 128 * D
MLA_REPLICATED = 2 * 2 * D + D  # the layers' two norms, the final norm
# the router (4 x d), which transformers keeps in float32 (_keep_in_fp32_modules_strict): 4 bytes
ROUTER_BYTES = 4 * D * 4
# a decode step's multiply-adds per MLA layer, absorbed form (W_UK into the query, W_UV into the output)
MLA_MACS_WHOLE = T * (64 * D + 48 * D)  # the two latents' projections
MLA_MACS_SPLIT = T * (
    64 * 8 * 48  # q_b_proj
    + 8 * 32 * 32  # q_nope @ W_UK per head
    + 2 * 8 * 48 * POS  # scores and values over the latent (32 + 16 wide), 8 positions
    + 8 * 32 * 32  # @ W_UV per head
    + 8 * 32 * D  # o_proj
)
MLA_FFN_MACS = T * 3 * D * 512 + EXPERTS_MACS + T * 3 * 128 * D  # dense MLP, experts, shared expert (split)
ROUTER_MACS = T * 4 * D  # whole


def decode(config: object, tp: int) -> tuple[CausalLM, object, object]:
    llm = CausalLM(config)
    cost = llm.phase("decode", kv_len=POS - 1, batch=T, hardware=DEVICE)
    return llm, cost, llm.deploy(cost, Parallel(tp=tp))


def test_deepseek_v3_latent_attention_split_by_heads_its_latent_cache_whole() -> None:
    llm, cost, d = decode(transformers.DeepseekV3Config(**MLA), 2)
    assert Sharding.of(llm.model, llm.config).sources == (
        "vllm/model_executor/models/deepseek_v2.py (DeepseekV2MLAAttention, Indexer)",
    )
    split = 2 * MLA_SPLIT + MLA_MLP_SPLIT + VOCAB
    whole = 2 * MLA_WHOLE + MLA_REPLICATED
    assert d.per_device.weights == (split / 2 + whole) * BYTES + ROUTER_BYTES  # 1,731,456
    # the latent (32 + 16) of 8 positions, 2 layers, 2 sequences: one head, whole on each rank
    assert d.per_device.kv_cache == cost.memory.kv_cache == 48 * POS * 2 * T * BYTES
    macs_whole = 2 * MLA_MACS_WHOLE + ROUTER_MACS
    macs_split = 2 * MLA_MACS_SPLIT + MLA_FFN_MACS + T * V * D  # and lm_head
    assert d.matmul_flops == 2 * (macs_whole + macs_split / 2)  # 2,572,288
    assert decode(transformers.DeepseekV3Config(**MLA), 1)[2].matmul_flops == 2 * (macs_whole + macs_split)
    # all-reduces (2 (n - 1) / n x S = S at n = 2) of T x d x 2 bytes: the embedding, 2 o_proj, the dense
    # MLP, the experts and the shared expert; lm_head's T x V x 2 gathered: half of it sent
    assert d.communication_bytes == 6 * T * D * BYTES + T * V * BYTES / 2


def test_deepseek_v32_indexer_replicated_with_its_keys() -> None:
    # transformers' own plan splits DSA's attention (its kv_a_proj_with_mqa "mla_kv_a_proj": whole);
    # the engine plan adds what vLLM runs whole: the query latent and the lightning indexer
    llm, _, d = decode(transformers.DeepseekV32Config(**MLA), 2)
    assert llm.model.config.index_n_heads == 64 and llm.model.config.index_head_dim == 128
    # per layer: wq_b (64 heads x 128 from the query latent), wk (d -> 128), its LayerNorm, weights_proj (d -> 64)
    indexer = 64 * 128 * 64 + 128 * D + 2 * 128 + 64 * D
    split = 2 * MLA_SPLIT + MLA_MLP_SPLIT + VOCAB
    assert d.per_device.weights == (split / 2 + 2 * MLA_WHOLE + MLA_REPLICATED + 2 * indexer) * BYTES + ROUTER_BYTES
    # the latent and the indexer keys (128 float8 + a float32 scale per 128: 132 bytes), whole on each rank
    assert d.per_device.kv_cache == (48 * BYTES + 132) * POS * 2 * T
    # the indexer's multiply-adds run whole: its projections and its scores over 8 positions
    indexer_macs = T * (64 * 64 * 128 + D * 128 + 64 * 128 * POS + D * 64 + 64 * POS)
    macs_whole = 2 * (MLA_MACS_WHOLE + indexer_macs) + ROUTER_MACS
    macs_split = 2 * MLA_MACS_SPLIT + MLA_FFN_MACS + T * V * D
    assert d.matmul_flops == 2 * (macs_whole + macs_split / 2)  # 7,688,192


def test_deepseek_v32_tp_1_knows_the_mla_kv_a_proj_style() -> None:
    _, cost, d = decode(transformers.DeepseekV32Config(**MLA), 1)
    assert d.per_device.weights == cost.memory.weights


GPT_OSS = {
    "hidden_size": D, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 8,
    "num_key_value_heads": 2, "head_dim": 32, "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": V,
    "layer_types": ["sliding_attention", "full_attention"],
}  # fmt: skip


def test_gpt_oss_attention_heads_and_each_experts_channels_split() -> None:
    llm, _, d = decode(transformers.GptOssConfig(**GPT_OSS), 2)
    assert len(Sharding.of(llm.model, llm.config).sources) == 2
    # per layer, split: q, k, v (weights and biases), o's weight, a sink per head; each expert's gate_up
    # (d -> 2 x 128, with its bias) and down (128 -> d)
    attention = (D * D + D) + 2 * (64 * D + 64) + D * D + 8
    experts = 4 * (D * 256 + 256) + 4 * 128 * D
    # whole: o_proj's bias (added once after the all-reduce), the router (4 x d + 4), the experts' down
    # biases (4 x d), the two norms; the final norm
    whole = 2 * (D + 4 * D + 4 + 4 * D + 2 * D) + D
    assert d.per_device.weights == ((2 * (attention + experts) + VOCAB) / 2 + whole) * BYTES  # 1,640,736
    # 2 KV heads (32 wide) over 2 ranks: one each, sliding (window 128 > 8) and full layers alike
    assert d.per_device.kv_cache == 2 * 2 * 1 * 32 * POS * T * BYTES
    attention_macs = T * (D * D + 2 * 64 * D + D * D) + 2 * T * 8 * 32 * POS  # projections, scores and values
    macs_split = 2 * (attention_macs + EXPERTS_MACS) + T * V * D
    assert d.matmul_flops == 2 * (2 * ROUTER_MACS + macs_split / 2)  # 1,978,368


QWEN3_NEXT = {
    "hidden_size": D, "intermediate_size": 512, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32, "num_experts": 4,
    "num_experts_per_tok": 2, "linear_num_key_heads": 4, "linear_num_value_heads": 8, "linear_key_head_dim": 32,
    "linear_value_head_dim": 32, "vocab_size": V,
}  # fmt: skip


def test_qwen3_next_gated_deltanet_split_by_heads_its_state_too() -> None:
    # layers 0-2 gated DeltaNet (4 key heads, 8 value heads, 32 wide), layer 3 full attention (its
    # q_proj doubled by the output gate); a MoE block in every layer
    llm, cost, d = decode(transformers.Qwen3NextConfig(**QWEN3_NEXT), 2)
    assert Sharding.of(llm.model, llm.config).sources == (
        "vllm/model_executor/models/qwen3_next.py (Qwen3NextGatedDeltaNet)",
    )
    keys, values = 4 * 32, 8 * 32
    conv = 2 * keys + values  # the convolution's channels: q, k and v
    deltanet = (2 * keys + 2 * values) * D + 2 * 8 * D + conv * 4 + 2 * 8 + D * values  # qkvz, ba, conv, A/dt, out
    attention = 2 * D * D + 2 * 64 * D + D * D  # q (with its gate), k, v, o
    moe = 4 * 3 * 128 * D + 3 * 128 * D  # experts and shared expert
    # whole: the gated norm (one value head wide), q_norm and k_norm, the router and the shared
    # expert's gate (d -> 1) in each layer, the layers' norms and the final norm
    whole = 3 * 32 + 2 * 32 + 4 * (4 * D + D) + 4 * 2 * D + D
    assert d.per_device.weights == ((3 * deltanet + attention + 4 * moe + VOCAB) / 2 + whole) * BYTES
    # per sequence and DeltaNet layer: the conv state (conv x 4) and the recurrent state (8 x 32 x 32),
    # both split by heads; the full layer's one KV head of 2
    state = 3 * (conv * 4 + 8 * 32 * 32) * T * BYTES
    assert cost.memory.kv_cache_by_type["state"] == state
    assert d.per_device.kv_cache == state / 2 + 2 * 1 * 32 * POS * T * BYTES
    # multiply-adds: the DeltaNet's projections and its convolution over the 4 held positions and the
    # new one (2 outputs a sequence, as transformers' reference path computes it); its recurrence is
    # elementwise; the attention layer's projections, scores and values; the experts
    deltanet_macs = T * ((2 * keys + 2 * values) * D + 16 * D + D * values) + T * conv * 4 * 2
    attention_macs = T * (2 * D * D + 2 * 64 * D + D * D) + 2 * T * 8 * 32 * POS
    macs_split = 3 * deltanet_macs + attention_macs + 4 * (EXPERTS_MACS + T * 3 * 128 * D) + T * V * D
    macs_whole = 4 * (ROUTER_MACS + T * D)
    assert d.matmul_flops == 2 * (macs_whole + macs_split / 2)  # 4,980,736


MAMBA2 = {
    "hidden_size": D, "num_hidden_layers": 2, "num_heads": 16, "head_dim": 32, "state_size": 16, "n_groups": 2,
    "expand": 2, "vocab_size": V,
}  # fmt: skip


def test_mamba2_mixer_split_by_heads_its_state_too() -> None:
    _, cost, d = decode(transformers.Mamba2Config(**MAMBA2), 2)
    inner, groups = 16 * 32, 2 * 2 * 16  # heads x head_dim; B and C, n_groups x state each
    conv = inner + groups
    # in_proj (gate, x, B, C, dt), conv weight and bias, A_log, D, dt_bias, the gated norm, out_proj: all split
    mixer = (2 * inner + groups + 16) * D + conv * 4 + conv + 3 * 16 + inner + D * inner
    assert d.per_device.weights == ((2 * mixer + VOCAB) / 2 + 2 * D + D) * BYTES  # layer norms, final norm whole
    # per sequence and layer: conv state (conv x 4) and SSM state (16 heads x 32 x 16), halved
    state = 2 * (conv * 4 + 16 * 32 * 16) * T * BYTES
    assert cost.memory.kv_cache == state and d.per_device.kv_cache == state / 2
    # in_proj, the convolution (2 outputs a sequence), y = state @ C per head (32 x 16), out_proj, lm_head
    macs = 2 * (T * (2 * inner + groups + 16) * D + T * conv * 4 * 2 + T * 16 * 32 * 16 + T * inner * D) + T * V * D
    assert d.matmul_flops == 2 * macs / 2  # 2,217,984
    # the vocabulary-parallel embedding's and 2 out_proj all-reduces, lm_head's gather
    assert d.communication_bytes == 3 * T * D * BYTES + T * V * BYTES / 2


def test_mamba2_refuses_a_tp_its_groups_do_not_divide() -> None:
    llm, cost, _ = decode(transformers.Mamba2Config(**MAMBA2), 1)
    with pytest.raises(OpcountValueError, match=r"--tp 4: does not divide Mamba2Config's n_groups \(2\)"):
        llm.deploy(cost, Parallel(tp=4))
