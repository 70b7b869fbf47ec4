"""Tensor parallelism for the Mamba-2 hybrids and Kimi-Linear, split as vLLM splits them
(opcount.llm.deploy.engine_plans): per-device weights, cache and decode FLOPs worked by hand from the config.

Every model is bfloat16 (2 bytes an element), d = 64, a vocabulary of V = 100 (embedding and lm_head
apart), decoded one token after 7 cached (8 positions held) for B = 2 sequences (T = 2 tokens), at
tp = 2. FLOPs are the step's matrix-product FLOPs on one device (2 per multiply-add). Every Mamba-2 mixer
has 8 heads of 16 (128 channels, expand 2), a state of 8, 2 groups and a convolution of 4; every
attention 4 heads of 16 and 2 KV heads; expected routing spreads the T x top_k = 4 token-expert pairs
over 4 experts: one token each.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountValueError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.layout import Parallel, Sharding  # noqa: E402
from tests.llm.test_deploy import DEVICE  # noqa: E402

D, V, T, POS, BYTES = 64, 100, 2, 8, 2
VOCAB = 2 * V * D
LM_HEAD_MACS = T * V * D
AR = T * D * BYTES  # an all-reduce of the T x d residual over 2 devices sends 2 (n - 1) / n x S = S bytes
GATHER = T * V * BYTES / 2  # lm_head's logits gathered: half of them sent

# the Mamba-2 mixer: in_proj gives the gate and x (128 each), B and C (2 groups x 8 each) and dt (8 heads)
INNER, GROUPS, HEADS = 128, 2 * 2 * 8, 8
CONV = INNER + GROUPS  # 160 channels convolved: x, B, C
IN_PROJ = (2 * INNER + GROUPS + HEADS) * D  # 296 x 64
# in_proj, the convolution's weight (4 taps) and bias, A_log, D and dt_bias, out_proj; the gated norm apart
MIXER = IN_PROJ + CONV * 4 + CONV + 3 * HEADS + D * INNER
GATED_NORM = INNER
# a decode step's multiply-adds: in_proj, the convolution (2 outputs a sequence, as transformers' reference
# path computes it), y = state @ C per head (16 x 8), out_proj
MIXER_MACS = T * IN_PROJ + T * CONV * 4 * 2 + T * HEADS * 16 * 8 + T * INNER * D
# per sequence: the conv state (160 channels x 4) and the SSM state (8 heads x 16 x 8), split by heads
MIXER_STATE = (CONV * 4 + HEADS * 16 * 8) * T * BYTES

ATTENTION = D * D + 2 * 32 * D + D * D  # q, k and v (2 KV heads of 16), o
ATTENTION_MACS = T * ATTENTION + 2 * T * 4 * 16 * POS  # projections, scores and values over 8 positions
KV = 2 * 2 * 16 * POS * T * BYTES  # keys and values of 2 KV heads: one a device at tp = 2

MAMBA2_HYBRID = {"mamba_n_heads": 8, "mamba_d_head": 16, "mamba_d_state": 8, "mamba_n_groups": 2}
ATTENTION_HEADS = {"num_attention_heads": 4, "num_key_value_heads": 2}


def decode(config: object, tp: int = 2) -> tuple[CausalLM, object, object]:
    llm = CausalLM(config)
    cost = llm.phase("decode", kv_len=POS - 1, batch=T, hardware=DEVICE)
    return llm, cost, llm.deploy(cost, Parallel(tp=tp))


def bamba() -> object:
    # layer 0 a Mamba-2 mixer, layer 1 attention; each with a gated MLP (d -> 128)
    return transformers.BambaConfig(
        hidden_size=D, intermediate_size=128, num_hidden_layers=2, attn_layer_indices=[1], vocab_size=V,
        **MAMBA2_HYBRID, **ATTENTION_HEADS,
    )  # fmt: skip


def test_bamba_mixer_attention_and_mlp_split() -> None:
    llm, cost, d = decode(bamba())
    assert len(Sharding.of(llm.model, llm.config).sources) == 3
    mlp = 3 * D * 128
    split = MIXER + GATED_NORM + ATTENTION + 2 * mlp + VOCAB
    whole = 2 * 2 * D + D  # each layer's two norms, the final norm
    assert d.per_device.weights == (split / 2 + whole) * BYTES  # 102,968
    assert cost.memory.kv_cache_by_type["state"] == MIXER_STATE
    assert d.per_device.kv_cache == MIXER_STATE / 2 + KV / 2
    macs = MIXER_MACS + ATTENTION_MACS + 2 * T * mlp + LM_HEAD_MACS
    assert decode(bamba(), 1)[2].matmul_flops == 2 * macs
    assert d.matmul_flops == 2 * macs / 2  # 196,608
    # the embedding's, out_proj's, o_proj's and the two MLPs' all-reduces; lm_head's gather
    assert d.communication_bytes == 5 * AR + GATHER


def test_bamba_refuses_a_tp_its_groups_do_not_divide() -> None:
    # vLLM copies a group on the ranks of its heads when --tp does not divide them: not modelled
    config = bamba()
    config.mamba_n_groups = 1
    llm = CausalLM(config)
    cost = llm.phase("decode", kv_len=POS - 1, batch=T, hardware=DEVICE)
    with pytest.raises(OpcountValueError, match=r"--tp 2: does not divide BambaConfig's mamba_n_groups \(1\)"):
        llm.deploy(cost, Parallel(tp=2))


def test_falcon_h1_attention_and_mixer_side_by_side_both_split() -> None:
    # two layers, each attention and a Mamba-2 mixer (no gated norm: mamba_rms_norm is False) side by
    # side, then a gated MLP (d -> 128)
    config = transformers.FalconH1Config(
        hidden_size=D, intermediate_size=128, num_hidden_layers=2, head_dim=16, mamba_d_ssm=INNER, vocab_size=V,
        **MAMBA2_HYBRID, **ATTENTION_HEADS,
    )  # fmt: skip
    llm, cost, d = decode(config)
    assert len(Sharding.of(llm.model, llm.config).sources) == 3
    mlp = 3 * D * 128
    assert d.per_device.weights == ((2 * (MIXER + ATTENTION + mlp) + VOCAB) / 2 + 2 * 2 * D + D) * BYTES  # 143,088
    # each layer holds both: the mixer's states and the attention's keys and values, halved
    assert cost.memory.kv_cache == 2 * (MIXER_STATE + KV)
    assert d.per_device.kv_cache == 2 * (MIXER_STATE + KV) / 2
    macs = 2 * (MIXER_MACS + ATTENTION_MACS + T * mlp) + LM_HEAD_MACS
    assert d.matmul_flops == 2 * macs / 2  # 282,112
    # the embedding's; per layer o_proj's, out_proj's and the MLP's; lm_head's gather
    assert d.communication_bytes == (1 + 2 * 3) * AR + GATHER


def test_granite_4_hybrid_mixer_attention_and_shared_mlp_split() -> None:
    # GraniteMoeHybrid (Granite-4.0-H): layer 0 a Mamba-2 mixer, layer 1 attention; each with 4 experts
    # (32 channels, gate and up fused) and a shared MLP (d -> 2 x 64 fused, 64 -> d)
    config = transformers.GraniteMoeHybridConfig(
        hidden_size=D, intermediate_size=32, shared_intermediate_size=64, num_hidden_layers=2,
        layer_types=["mamba", "attention"], num_local_experts=4, num_experts_per_tok=2, vocab_size=V,
        **MAMBA2_HYBRID, **ATTENTION_HEADS,
    )  # fmt: skip
    llm, _, d = decode(config)
    assert len(Sharding.of(llm.model, llm.config).sources) == 4
    experts, shared = 4 * (2 * 32 * D + D * 32), 2 * 64 * D + D * 64
    split = MIXER + GATED_NORM + ATTENTION + 2 * (experts + shared) + VOCAB
    whole = 2 * (4 * D + 2 * D) + D  # per layer the router (4 x d) and two norms; the final norm
    assert d.per_device.weights == (split / 2 + whole) * BYTES  # 128,568
    assert d.per_device.kv_cache == MIXER_STATE / 2 + KV / 2
    experts_macs = 4 * (2 * 32 * D + 32 * D)  # 4 tokens through one expert each
    macs_split = MIXER_MACS + ATTENTION_MACS + 2 * (experts_macs + T * shared) + LM_HEAD_MACS
    macs_whole = 2 * T * 4 * D  # the routers
    assert d.matmul_flops == 2 * (macs_whole + macs_split / 2)  # 198,656
    # the embedding's; per layer the mixer's or o_proj's, the experts' and the shared MLP's; lm_head's gather
    assert d.communication_bytes == 7 * AR + GATHER


def nemotron_h() -> object:
    # layers: a Mamba-2 mixer, experts (4 of 32 channels, up then down, relu2) with a shared expert of 32,
    # attention, an MLP (d -> 128, up then down); lm_head apart from the embedding
    return transformers.NemotronHConfig(
        hidden_size=D, intermediate_size=128, moe_intermediate_size=32, moe_shared_expert_intermediate_size=32,
        layers_block_type=["mamba", "moe", "attention", "mlp"], head_dim=16, n_routed_experts=4,
        num_experts_per_tok=2, mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=8, n_groups=2, expand=2,
        vocab_size=V, **ATTENTION_HEADS,
    )  # fmt: skip


def test_nemotron_h_every_mixer_kind_split() -> None:
    llm, _, d = decode(nemotron_h())
    assert len(Sharding.of(llm.model, llm.config).sources) == 3
    experts, shared, mlp = 4 * 2 * 32 * D, 2 * 32 * D, 2 * 128 * D
    split = MIXER + GATED_NORM + experts + shared + ATTENTION + mlp + VOCAB
    norms = 4 * D + D  # each layer's norm, the final norm
    router_bytes = 4 * D * 4  # the router (4 x d), which transformers keeps in float32
    assert d.per_device.weights == (split / 2 + norms) * BYTES + router_bytes  # 91,704
    # the SSM state in float32, as the config's mamba_ssm_cache_dtype says; the conv state in bf16
    state = (CONV * 4 * BYTES + HEADS * 16 * 8 * 4) * T
    assert d.per_device.kv_cache == state / 2 + KV / 2
    macs_split = MIXER_MACS + 4 * 2 * 32 * D + T * shared + ATTENTION_MACS + T * mlp + LM_HEAD_MACS
    macs_whole = T * 4 * D
    assert d.matmul_flops == 2 * (macs_whole + macs_split / 2)  # 156,672
    # the embedding's; out_proj's, the experts', the shared expert's, o_proj's, the MLP's; lm_head's gather
    assert d.communication_bytes == 6 * AR + GATHER


def test_nemotron_h_refuses_a_tp_its_groups_do_not_divide() -> None:
    llm = CausalLM(nemotron_h())
    cost = llm.phase("decode", kv_len=POS - 1, batch=T, hardware=DEVICE)
    with pytest.raises(OpcountValueError, match=r"--tp 4: does not divide NemotronHConfig's n_groups \(2\)"):
        llm.deploy(cost, Parallel(tp=4))


def kimi_linear(**fields: object) -> object:
    # layer 0 Kimi delta attention (4 heads of 16) and a dense MLP (d -> 128); layer 1 MLA (4 heads: nope
    # 16, rope 8, v 16, a latent of 32, no query latent) and 4 experts of 32 with a shared expert of 32
    values = {
        "hidden_size": D, "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 2,
        "layer_types": ["linear_attention", "full_attention"], "mlp_layer_types": ["dense", "sparse"],
        "num_attention_heads": 4, "num_key_value_heads": 4, "linear_num_heads": 4, "linear_head_dim": 16,
        "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "kv_lora_rank": 32, "num_experts": 4,
        "num_experts_per_token": 2, "num_shared_experts": 1, "vocab_size": V, "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2,
    }  # fmt: skip
    return transformers.KimiLinearConfig(**{**values, **fields})


def test_kimi_linear_delta_attention_split_by_heads_mla_latent_whole() -> None:
    llm, cost, d = decode(kimi_linear())
    assert Sharding.of(llm.model, llm.config).sources[0] == (
        "vllm/model_executor/layers/kda.py (KimiDeltaAttention), "
        "vllm/model_executor/models/kimi_linear.py (KimiMLAAttention)"
    )
    width = 4 * 16  # q, k and v each
    # split: q, k, v; the convolution (3 x 64 channels, 4 taps, no bias); the forget gate's f_b (16 -> 64)
    # and A_log (a decay per head); beta's b_proj (d -> 4 heads); the output gate's g_b (16 -> 64); o_proj
    kda_split = 3 * width * D + 3 * width * 4 + 16 * width + 4 + 4 * D + 16 * width + D * width
    kda_whole = 2 * 16 * D + 16  # f_a and g_a (d -> one head of 16), the gated norm (one head wide)
    dt_bias_bytes = width * 4  # the forget gate's bias, kept in float32: split
    # MLA split: q_proj (4 heads x 24), kv_b_proj (32 -> 4 x (16 + 16)), o_proj; whole: the latent's
    # projection (d -> 32 + 8) and its norm
    mla_split, mla_whole = 4 * 24 * D + 4 * 32 * 32 + D * 4 * 16, 40 * D + 32
    mlp, experts, shared = 3 * D * 128, 4 * (2 * 32 * D + D * 32), 3 * 32 * D
    split = kda_split + mla_split + mlp + experts + shared + VOCAB
    whole = kda_whole + mla_whole + 2 * 2 * D + D  # and the layers' norms, the final norm
    router_bytes = 4 * D * 4  # transformers keeps the router (4 x d) in float32
    assert d.per_device.weights == (split / 2 + whole) * BYTES + dt_bias_bytes / 2 + router_bytes  # 112,996
    # the delta attention's conv state (192 channels x 4, bf16) and recurrent state (4 heads x 16 x 16, in
    # float32 as the model and vLLM keep it), split by heads; the latent (32 + 8) of 8 positions whole on each rank
    state = (3 * width * 4 * BYTES + 4 * 16 * 16 * 4) * T
    latent = 40 * POS * T * BYTES
    assert cost.memory.kv_cache_by_type["state"] == state
    assert d.per_device.kv_cache == state / 2 + latent
    # multiply-adds: the delta attention's projections and its convolution (2 outputs a sequence), its
    # recurrence elementwise; MLA absorbed (W_UK into the query, W_UV into the output), over 8 positions
    kda_macs_split = T * (3 * width * D + 16 * width + 4 * D + 16 * width + width * D) + T * 3 * width * 4 * 2
    kda_macs_whole = T * 2 * 16 * D
    mla_macs_split = T * (4 * 24 * D + 4 * 16 * 32 + 2 * 4 * 40 * POS + 4 * 32 * 16 + 4 * 16 * D)
    mla_macs_whole = T * 40 * D
    ffn_macs = T * mlp + 4 * (2 * 32 * D + 32 * D) + T * shared  # dense MLP, 4 tokens through one expert each
    macs_split = kda_macs_split + mla_macs_split + ffn_macs + LM_HEAD_MACS
    macs_whole = kda_macs_whole + mla_macs_whole + T * 4 * D  # and the router
    assert d.matmul_flops == 2 * (macs_whole + macs_split / 2)  # 192,512
    assert decode(kimi_linear(), 1)[2].matmul_flops == 2 * (macs_whole + macs_split)
    # the embedding's; each layer's o_proj and its MLP, or its experts and shared expert; lm_head's gather
    assert d.communication_bytes == 6 * AR + GATHER


def test_kimi_linear_refuses_a_tp_its_delta_heads_do_not_divide() -> None:
    config = kimi_linear(linear_num_heads=2, linear_head_dim=32)
    llm = CausalLM(config)
    cost = llm.phase("decode", kv_len=POS - 1, batch=T, hardware=DEVICE)
    with pytest.raises(OpcountValueError, match=r"--tp 4: does not divide KimiLinearConfig's linear_num_heads \(2\)"):
        llm.deploy(cost, Parallel(tp=4))


def test_zamba2_mixers_and_shared_block_split_adapters_gathered() -> None:
    # layer 0 a Mamba-2 mixer; layer 1 a hybrid: the shared block (attention over the embedding and the
    # hidden state concatenated, 128 wide: 4 heads of 32, 4 KV heads; a gated MLP d -> 2 x 128 with a
    # low-rank adapter of 16 beside its gate_up), its output through ``linear`` (d -> d) into a mixer
    config = transformers.Zamba2Config(
        hidden_size=D, intermediate_size=128, num_hidden_layers=2, layers_block_type=["mamba", "hybrid"],
        num_attention_heads=4, num_key_value_heads=4, n_mamba_heads=8, mamba_d_state=8, mamba_ngroups=2,
        adapter_rank=16, vocab_size=V,
    )  # fmt: skip
    assert config.tie_word_embeddings and config.attention_hidden_size == 2 * D
    llm, cost, d = decode(config)
    assert len(Sharding.of(llm.model, llm.config).sources) == 6
    attention = 3 * 128 * 128 + D * 128  # q, k, v (128 -> 128), o (128 -> d)
    mlp, adapter = 2 * 128 * D + D * 128, 16 * D + 256 * 16  # gate_up and down; the adapter's A and B
    split = 2 * (MIXER + GATED_NORM) + attention + mlp + adapter + V * D  # the embedding, tied to lm_head
    # the mixers' layer norms, ``linear``, the shared block's norms (128 and d wide), the final norm
    whole = 2 * D + D * D + 128 + D + D
    assert d.per_device.weights == (split / 2 + whole) * BYTES  # 158,576
    kv = 2 * 4 * 32 * POS * T * BYTES  # 4 KV heads of 32: 2 a device
    assert cost.memory.kv_cache == 2 * MIXER_STATE + kv
    assert d.per_device.kv_cache == (2 * MIXER_STATE + kv) / 2
    attention_macs = T * attention + 2 * T * 4 * 32 * POS
    macs_split = 2 * MIXER_MACS + attention_macs + T * (mlp + adapter) + LM_HEAD_MACS
    macs_whole = T * D * D  # linear
    assert d.matmul_flops == 2 * (macs_whole + macs_split / 2)  # 325,120
    # all-reduces: the embedding's, 2 out_proj, o_proj, down_proj; the adapter's A output (T x 16) gathered
    # (half of it sent), and lm_head's
    assert d.communication_bytes == 5 * AR + T * 16 * BYTES / 2 + GATHER
