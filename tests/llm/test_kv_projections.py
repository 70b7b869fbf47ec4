"""Key and value projections copied where tensor parallelism exceeds the KV heads, as vLLM's
QKVParallelLinear copies them (opcount.llm.deploy.kv_projections): weights and work per device worked by
hand from the config.

The small Llama has d = 64, 4 query heads and 2 KV heads of e = 16, an MLP of f = 128, 2 layers, a
vocabulary of V = 100 (embedding and lm_head untied), bfloat16 (2 bytes an element); it is decoded one token
after 7 cached (8 positions held) for B = 2 sequences (T = 2 tokens). At tp 4 each device holds one KV head
of 2: half of k_proj and v_proj (64 x 32 each), a quarter of q_proj, o_proj (64 x 64 each), the MLP (3 x 64 x
128) and the vocabulary tables; the norms (2 a layer and the final one, 64 each) whole.
"""

from __future__ import annotations

import pytest
from torch import nn

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountError  # noqa: E402
from opcount.llm.cache.probe import KVShape  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.decoder import Decoder  # noqa: E402
from opcount.llm.deploy.kv_projections import kv_projection_shares  # noqa: E402
from opcount.llm.deploy.layout import Parallel, Sharding  # noqa: E402
from opcount.llm.deploy.placement import Placement, share_of  # noqa: E402
from tests.llm.test_deploy import DEVICE  # noqa: E402

D, H, G, E, F, N, V = 64, 4, 2, 16, 128, 2, 100
T, POS, BYTES = 2, 8, 2
Q_O_MLP = 2 * D * D + 3 * D * F  # a layer's weights split by tp: 32,768
K_V = 2 * D * G * E  # a layer's key and value projections: 4,096
WHOLE = (2 * N + 1) * D  # the norms
VOCAB = 2 * V * D  # embed_tokens and lm_head


def llama() -> object:
    return transformers.LlamaConfig(
        hidden_size=D, num_attention_heads=H, num_key_value_heads=G, intermediate_size=F, num_hidden_layers=N,
        vocab_size=V,
    )  # fmt: skip


def decode(tp: int) -> tuple[CausalLM, object, object]:
    llm = CausalLM(llama())
    cost = llm.phase("decode", kv_len=POS - 1, batch=T, hardware=DEVICE)
    return llm, cost, llm.deploy(cost, Parallel(tp=tp))


def test_two_kv_heads_at_tp_4_hold_half_the_key_and_value_projections() -> None:
    llm, cost, dep = decode(tp=4)
    assert cost.memory.weights == (N * (Q_O_MLP + K_V) + VOCAB + WHOLE) * BYTES == 173_696
    # per device: a quarter of q, o, the MLP and the vocabulary; half of k and v (one KV head of 2)
    assert dep.per_device.weights == (N * (Q_O_MLP / 4 + K_V / 2) + VOCAB / 4 + WHOLE) * BYTES == 48_000
    # the cache of one KV head of 2 a device
    assert dep.per_device.kv_cache == cost.memory.kv_cache / 2 == 2 * N * E * POS * T * BYTES
    # decode's products per layer: q and o (T x d x d each), k and v (T x d x 32 each), the MLP (3 x T x d x f),
    # the scores and values of 4 query heads over 8 positions (2 x T x 4 x 16 x 8); the logits (T x V x d).
    # A device runs a quarter of them, but half of k and v: the GEMMs of its one KV head
    split = N * (2 * T * D * D + 3 * T * D * F + 2 * T * H * E * POS) + T * V * D  # 180,224 MACs
    key_value = N * 2 * T * D * G * E  # 16,384 MACs
    assert dep.matmul_flops == 2 * (split / 4 + key_value / 2) == 90_368
    # the k/v GEMM's share on its own, and the query's
    placement = Placement(llm, Parallel(tp=4))
    attention = ("model", "model.layers.0", "model.layers.0.self_attn")
    for projection, share in (("k_proj", 1 / 2), ("v_proj", 1 / 2), ("q_proj", 1 / 4), ("o_proj", 1 / 4)):
        scope = (*attention, f"model.layers.0.self_attn.{projection}")
        assert share_of(placement, scope, T) == (share, share, share)


def test_tp_within_the_kv_heads_is_unchanged() -> None:
    # tp 2: one KV head of 2 a device, half of every split weight, k and v included
    llm, _, dep = decode(tp=2)
    assert Placement(llm, Parallel(tp=2)).kv_projections == {}
    assert dep.per_device.weights == (N * (Q_O_MLP + K_V) / 2 + VOCAB / 2 + WHOLE) * BYTES == 87_168
    split = N * (2 * T * D * D + 2 * T * D * G * E + 3 * T * D * F + 2 * T * H * E * POS) + T * V * D
    assert dep.matmul_flops == 2 * split / 2


def test_starcoder_15b_devices_hold_the_kv_head_whole() -> None:
    # bigcode/starcoder config.json: n_embd 6144, 48 heads of 128, one KV head (multi_query), 40 layers,
    # n_inner 24576, vocabulary 49152, 8192 positions. Per layer c_attn is 6144 -> 6144 + 2 x 128 with its
    # bias: the query's 6144 columns split, the key's and value's 256 (1,573,120 elements) whole on every
    # device; c_proj, c_fc (with bias) and the MLP's c_proj split, c_proj's biases and the norms whole
    config = transformers.GPTBigCodeConfig(
        n_embd=6144, n_head=48, n_layer=40, n_inner=24576, vocab_size=49152, n_positions=8192, multi_query=True
    )
    d, f = 6144, 24576
    kv = d * 256 + 256
    layer_split = (d * d + d) + d * d + (d * f + f) + f * d
    layer_whole = kv + 2 * d + 2 * 2 * d  # the key and value columns, two row-wise biases, ln_1 and ln_2
    split, whole = 49152 * d + 40 * layer_split, 8192 * d + 40 * layer_whole + 2 * d  # wte; wpe, ln_f
    assert split + whole == 15_517_456_384  # StarCoder's 15.5B parameters
    llm = Decoder(config)
    for tp, more in ((2, 0.00404), (8, 0.02774)):
        held = Placement(llm, Parallel(tp=tp)).weights_per_stage()[0]
        assert held == (split / tp + whole) * BYTES
        # what a device holds beyond the key and value columns split with the query's
        assert held / ((split + 40 * kv) / tp + whole - 40 * kv) / BYTES - 1 == pytest.approx(more, abs=1e-5)


def test_a_fused_projection_splits_its_query_columns_and_copies_its_key_and_value_columns() -> None:
    # Wqkv: d = 64 -> 4 query heads and 2 KV heads of 16 (64 + 32 + 32 columns); at tp 4 a device holds 16 of
    # the query's columns and one KV head's 16 key and 16 value columns: 48 of 128
    block = nn.ModuleList([nn.Module()])
    block[0].Wqkv = nn.Linear(D, 128)
    sharding = Sharding({"0.Wqkv": "colwise"}, frozenset({"0"}), frozenset())
    shares = kv_projection_shares(block, sharding, [KVShape(2, 16, 16)], 4, lambda: ["0"])
    assert shares == {"0.Wqkv": 48 / 128}


def test_a_key_projection_of_another_width_is_named() -> None:
    block = nn.ModuleList([nn.Module()])
    block[0].k_proj = nn.Linear(D, 48)  # 3 heads of 16, where the layer caches 2
    sharding = Sharding({"0.k_proj": "colwise"}, frozenset({"0"}), frozenset())
    with pytest.raises(OpcountError, match=r"0\.k_proj: a key projection 48 wide where its layer caches 2 KV heads"):
        kv_projection_shares(block, sharding, [KVShape(2, 16, 16)], 4, lambda: ["0"])
