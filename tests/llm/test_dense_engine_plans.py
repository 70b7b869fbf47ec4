"""Tensor parallelism for the dense decoders transformers writes no tp_plan for, split as vLLM splits them
(opcount.llm.deploy.engine_plans.dense): per-device weights, cache, collectives and decode FLOPs worked by
hand from the config.

Every model is bfloat16 (2 bytes an element), decoded one token after 7 cached (8 positions held) for
B = 2 sequences (T = 2 tokens), at tp = 2 unless said. The small models have d = 64, 4 heads of 16,
2 layers, a vocabulary of V = 100; "split" is what a device holds half of, "whole" what every device
holds in full. An all-reduce of S bytes over 2 devices sends 2 (n - 1) / n x S = S bytes: the residual
stream's T x d x 2 bytes; the logits' all-gather sends half of T x V x 2 bytes.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountValueError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.layout import Parallel, Sharding  # noqa: E402
from opcount.llm.models.catalogue import config as published  # noqa: E402
from tests.llm.test_deploy import DEVICE  # noqa: E402

D, V, T, POS, BYTES = 64, 100, 2, 8, 2
AR = T * D * BYTES  # one all-reduce of the residual stream
GATHER = T * V * BYTES / 2
VOCAB = V * D  # one vocabulary table (the embedding, or the lm_head untied)
SMALL = {"hidden_size": D, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": V}


def decode(config: object, tp: int = 2) -> tuple[CausalLM, object, object]:
    llm = CausalLM(config)
    cost = llm.phase("decode", kv_len=POS - 1, batch=T, hardware=DEVICE)
    return llm, cost, llm.deploy(cost, Parallel(tp=tp))


def per_device(split: int, whole: int, tp: int = 2) -> float:
    return (split / tp + whole) * BYTES


def test_gpt2_124m_splits_as_vllm_splits_it() -> None:
    # GPT-2 small: d = 768, 12 layers of 12 heads (64 wide), MLP 3072, vocabulary 50257, 1024 positions.
    # Per layer, split: c_attn (q, k, v packed: 768 x 2304 and its bias, by heads), attn.c_proj's weight
    # (768 x 768), c_fc (768 x 3072 and its bias), mlp.c_proj's weight (3072 x 768); whole: ln_1, ln_2
    # (weight and bias), the two c_proj biases (added once after the all-reduce). The embedding wte (tied
    # to lm_head) split by vocabulary rows; wpe (1024 x 768) and ln_f whole.
    d, v, p = 768, 50257, 1024
    layer_split = (d * 3 * d + 3 * d) + d * d + (d * 4 * d + 4 * d) + 4 * d * d  # 7,083,264
    layer_whole = 2 * 2 * d + 2 * d  # 4,608
    split, whole = v * d + 12 * layer_split, p * d + 12 * layer_whole + 2 * d
    llm, cost, dep = decode(published("gpt2"))
    assert split + whole == 124_439_808  # GPT-2 small's published parameter count
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole) == 125_283_072
    assert decode(published("gpt2"), tp=4)[2].per_device.weights == per_device(split, whole, 4)
    # keys and values of 12 heads x 64, 12 layers, 8 positions, 2 sequences: 6 heads a device
    assert cost.memory.kv_cache == 2 * 12 * d * POS * T * BYTES
    assert dep.per_device.kv_cache == cost.memory.kv_cache / 2
    # two all-reduces a layer (after attention, after the MLP) and the embedding's; the logits gathered
    assert dep.communication_bytes == (2 * 12 + 1) * T * d * BYTES + T * v * BYTES / 2
    # every product is split: the projections, the scores and values of 12 heads over 8 positions, the logits
    macs = 12 * (T * (3 * d * d + d * d + 8 * d * d) + 2 * T * 12 * 64 * POS) + T * v * d
    assert dep.matmul_flops == 2 * macs / 2
    assert Sharding.of(llm.model, llm.config).sources[0].startswith("vllm/model_executor/models/gpt2.py")


def bigcode() -> object:
    return transformers.GPTBigCodeConfig(n_embd=D, n_head=4, n_layer=2, vocab_size=V, n_positions=64)


def test_gpt_bigcode_multi_query_keeps_its_one_kv_head_whole() -> None:
    # per layer: c_attn (d -> d + 2 x 16: the 4 query heads and the one KV head, with its bias), c_proj
    # (d x d), c_fc (d -> 4d, with its bias), c_proj (4d -> d); the c_proj biases and the norms whole
    layer_split = (D * (D + 32) + D + 32) + D * D + (D * 4 * D + 4 * D) + 4 * D * D  # 43,360
    layer_whole = 2 * 2 * D + 2 * D
    split, whole = VOCAB + 2 * layer_split, 64 * D + 2 * layer_whole + 2 * D  # wpe, the layers, ln_f
    _, cost, dep = decode(bigcode())
    assert cost.memory.weights == (split + whole) * BYTES
    # the key and value columns of c_attn (2 x 16 x d and their bias, 2,080 a layer) are copied on both
    # devices, as vLLM's QKVParallelLinear copies the one KV head; the query's 64 columns are split
    kv_columns = 2 * (2 * 16 * D + 2 * 16)
    assert dep.per_device.weights == per_device(split - kv_columns, whole + kv_columns)  # 107,264
    assert dep.per_device.weights == 103_104 + 2 * 2_080 * BYTES / 2  # each layer's 2,080 held whole, not halved
    # keys and values of the one KV head (16 wide), 8 positions, 2 sequences, 2 layers, copied on both
    # devices: the cache is whole on each
    assert dep.per_device.kv_cache == cost.memory.kv_cache == 2 * 16 * POS * T * 2 * BYTES
    assert dep.communication_bytes == 5 * AR + GATHER
    # decode: per layer c_attn (T x d x (d + 32): the query's 64 columns split, the 32 of the KV head whole),
    # c_proj (d x d), the MLP (2 x d x 4d), the scores and values of 4 heads over 8 positions; the logits
    split_macs = 2 * T * (D * D + D * D + 8 * D * D + 2 * 4 * 16 * POS) + T * V * D
    whole_macs = 2 * T * D * 32
    assert dep.matmul_flops == 2 * (split_macs / 2 + whole_macs)


def test_falcon_multi_query_copies_its_kv_head() -> None:
    # Falcon-7B's layout at a small size: 4 query heads and one KV head (16 wide), parallel attention and
    # MLP, no biases. query_key_value is d -> d + 2 x 16: its 64 query columns split, the key's and value's
    # 32 held on both devices (vLLM's QKVParallelLinear with one KV head); dense, dense_h_to_4h and
    # dense_4h_to_h split; one input_layernorm a layer (weight and bias) and ln_f whole
    layer_split = D * D + D * D + 2 * 4 * D * D  # the query's columns, dense, the MLP: 40,960
    layer_whole = D * 32 + 2 * D  # the key's and value's columns, input_layernorm
    split, whole = VOCAB + 2 * layer_split, 2 * layer_whole + 2 * D
    _, cost, dep = decode(transformers.FalconConfig(**SMALL))
    assert cost.memory.weights == (split + whole) * BYTES == 185_600
    assert dep.per_device.weights == per_device(split, whole) == 97_280
    # the cache of the one KV head (16 wide), 8 positions, 2 sequences, 2 layers: whole on each device
    assert dep.per_device.kv_cache == cost.memory.kv_cache == 2 * 16 * POS * T * 2 * BYTES
    assert dep.communication_bytes == (1 + 2) * AR + GATHER


FALCON_NEW = {**SMALL, "new_decoder_architecture": True, "num_kv_heads": 2}


def test_falcon_parallel_attention_and_mlp_share_one_all_reduce() -> None:
    # new decoder architecture: 4 query heads and 2 KV heads (16 wide) in query_key_value (d -> 128), dense
    # (d x d), dense_h_to_4h and dense_4h_to_h (d x 4d each), no biases; ln_attn and ln_mlp whole
    layer_split = D * 128 + D * D + 2 * 4 * D * D  # 45,056
    split, whole = VOCAB + 2 * layer_split, 2 * 2 * 2 * D + 2 * D
    _, cost, dep = decode(transformers.FalconConfig(**FALCON_NEW))
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole)  # 97,792
    # the 2 KV heads of 16 (not transformers' copies of them for the 4 query heads), 2 layers, 8 positions,
    # 2 sequences; one KV head a device
    assert cost.memory.kv_cache == 2 * 2 * 16 * 2 * POS * T * BYTES
    assert dep.per_device.kv_cache == cost.memory.kv_cache / 2
    # vLLM's FalconDecoderLayer adds the attention's and the MLP's partial outputs, then all-reduces once
    assert dep.communication_bytes == (1 + 2) * AR + GATHER


def test_falcon_sequential_layers_reduce_twice_their_biases_whole() -> None:
    # Falcon-RW's layout: 4 heads each with its key and value (query_key_value d -> 3d), ALiBi, biases,
    # attention then MLP; the biases of dense and dense_4h_to_h whole, added after their all-reduces
    config = transformers.FalconConfig(**SMALL, multi_query=False, parallel_attn=False, alibi=True, bias=True)
    layer_split = (D * 3 * D + 3 * D) + D * D + (D * 4 * D + 4 * D) + 4 * D * D  # 49,600
    layer_whole = 2 * D + 2 * 2 * D  # the two row-wise biases, input_layernorm, post_attention_layernorm
    split, whole = VOCAB + 2 * layer_split, 2 * layer_whole + 2 * D
    _, cost, dep = decode(config)
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole)  # 107,392
    assert dep.communication_bytes == (1 + 2 * 2) * AR + GATHER


@pytest.mark.parametrize(
    ("config", "tp", "message"),
    [
        # Falcon-7B: 71 heads
        (transformers.FalconConfig(num_hidden_layers=2), 2, r"--tp 2: does not divide the 71 attention heads"),
        (transformers.FalconConfig(**FALCON_NEW), 4, r"--tp 4: does not divide FalconConfig's num_kv_heads \(2\)"),
        (
            transformers.StableLmConfig(**SMALL, num_key_value_heads=4, intermediate_size=128, qk_layernorm=True),
            2,
            r"--tp 2: StableLmConfig's qk_layernorm: vLLM's StablelmAttention has no per-head",
        ),
        # GPT-Neo: no plan in transformers, and vLLM does not run it
        (
            transformers.GPTNeoConfig(
                hidden_size=D, num_heads=4, num_layers=2, vocab_size=V, attention_types=[[["global"], 2]]
            ),
            2,
            r"--tp 2: GPTNeoForCausalLM has no tensor-parallel plan \(tp_plan\) in transformers and opcount no engine plan "
            r"for its family \('gpt_neo'",
        ),
    ],
)
def test_what_vllm_does_not_split_is_refused_naming_the_field(config: object, tp: int, message: str) -> None:
    llm = CausalLM(config)
    cost = llm.phase("decode", kv_len=3, hardware=DEVICE)
    with pytest.raises(OpcountValueError, match=message):
        llm.deploy(cost, Parallel(tp=tp))


def test_opt_fc1_and_fc2_in_the_layer_its_norms_and_positions_whole() -> None:
    config = transformers.OPTConfig(**SMALL, ffn_dim=4 * D, max_position_embeddings=64, word_embed_proj_dim=D)
    # q, k, v (with biases), out_proj's weight, fc1 (with its bias), fc2's weight; whole: out_proj's and
    # fc2's biases, self_attn_layer_norm and final_layer_norm; embed_positions (64 + 2 rows) and the final norm
    layer_split = 3 * (D * D + D) + D * D + (D * 4 * D + 4 * D) + 4 * D * D  # 49,600
    split, whole = VOCAB + 2 * layer_split, 2 * (2 * D + 2 * 2 * D) + 66 * D + 2 * D
    _, cost, dep = decode(config)
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole)  # 115,840
    assert dep.communication_bytes == (1 + 2 * 2) * AR + GATHER


def test_bloom_fused_qkv_by_heads_its_embedding_norm_whole() -> None:
    config = transformers.BloomConfig(hidden_size=D, n_head=4, n_layer=2, vocab_size=V)
    layer_split = (D * 3 * D + 3 * D) + D * D + (D * 4 * D + 4 * D) + 4 * D * D  # 49,600
    # whole: dense's and dense_4h_to_h's biases, two norms a layer; word_embeddings_layernorm and ln_f
    split, whole = VOCAB + 2 * layer_split, 2 * (2 * D + 2 * 2 * D) + 2 * 2 * D
    _, cost, dep = decode(config)
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole)  # 107,648
    assert dep.communication_bytes == (1 + 2 * 2) * AR + GATHER


def test_mpt_packed_qkv_by_heads() -> None:
    config = transformers.MptConfig(d_model=D, n_heads=4, n_layers=2, vocab_size=V)
    # no biases (no_bias), norms without bias: Wqkv (d -> 3d), out_proj, up_proj and down_proj (d x 4d)
    layer_split = D * 3 * D + D * D + 2 * 4 * D * D  # 49,152
    split, whole = VOCAB + 2 * layer_split, 2 * 2 * D + D
    _, cost, dep = decode(config)
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole)  # 105,344
    assert dep.communication_bytes == (1 + 2 * 2) * AR + GATHER


def test_persimmon_its_per_head_norms_whole() -> None:
    config = transformers.PersimmonConfig(**SMALL, intermediate_size=4 * D, tie_word_embeddings=False)
    layer_split = (D * 3 * D + 3 * D) + D * D + (D * 4 * D + 4 * D) + 4 * D * D  # 49,600
    # whole: the two row-wise biases, q_layernorm and k_layernorm (one head, 16 wide, weight and bias),
    # the two layer norms; the final norm. The untied lm_head split as the embedding is
    layer_whole = 2 * D + 2 * 2 * 16 + 2 * 2 * D
    split, whole = 2 * VOCAB + 2 * layer_split, 2 * layer_whole + 2 * D
    _, cost, dep = decode(config)
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole)  # 114,048
    assert dep.communication_bytes == (1 + 2 * 2) * AR + GATHER


def test_stablelm_grouped_kv_heads_split() -> None:
    config = transformers.StableLmConfig(**SMALL, num_key_value_heads=2, intermediate_size=128)
    layer_split = D * D + 2 * 32 * D + D * D + 3 * D * 128  # q, k and v (2 KV heads of 16), o; gate, up, down
    split, whole = 2 * VOCAB + 2 * layer_split, 2 * 2 * 2 * D + 2 * D
    _, cost, dep = decode(config)
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole)  # 87,808
    assert dep.per_device.kv_cache == cost.memory.kv_cache / 2  # one KV head of 2 a device
    assert dep.communication_bytes == (1 + 2 * 2) * AR + GATHER


def test_falcon_mamba_mixer_split_as_mambas() -> None:
    config = transformers.FalconMambaConfig(hidden_size=D, num_hidden_layers=2, vocab_size=V)
    # 128 channels (expand 2), a state of 16, dt rank 4, a convolution of 4: A_log, D, conv1d (weight and
    # bias), in_proj (d -> 256), x_proj (128 -> 4 + 2 x 16), dt_proj (4 -> 128, with bias), out_proj
    mixer = 128 * 16 + 128 + 128 * 4 + 128 + 2 * 128 * D + 128 * 36 + 4 * 128 + 128 + D * 128  # 32,640
    split, whole = VOCAB + 2 * mixer, 2 * D + D  # the layers' norms and norm_f (RMS: weight only)
    _, cost, dep = decode(config)
    assert cost.memory.weights == (split + whole) * BYTES
    assert dep.per_device.weights == per_device(split, whole)  # 72,064
    # the embedding's all-reduce; per layer x_proj's (T x 36) and out_proj's; the logits gathered
    assert dep.communication_bytes == AR + 2 * (T * 36 * BYTES + AR) + GATHER
