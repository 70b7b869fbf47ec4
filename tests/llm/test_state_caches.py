"""State caches beyond the common ones, against closed forms worked by hand on tiny configs:
MiniMax's lightning attention (a decayed ``k^T v`` matrix per head) and a Bamba whose layers are all
Mamba-2 (a cache without an attention layer to tell the positions seen).

Notation as in test_caches.py: h heads, e head dim, B batch, L cached tokens, bf16 (2 bytes).
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="layer types need transformers 5")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from tests.llm.test_caches import BF16, B, L, V, attention_flops, cache_traffic  # noqa: E402

D, H, G, E = 64, 4, 2, 16


def test_minimax_lightning_layer_keeps_one_matrix_per_head() -> None:
    config = transformers.MiniMaxConfig(
        vocab_size=V,
        hidden_size=D,
        intermediate_size=128,
        num_attention_heads=H,
        num_key_value_heads=G,
        head_dim=E,
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
        num_local_experts=2,
        num_experts_per_tok=1,
    )
    llm = CausalLM(config)
    # the lightning layer: sum_t decay^(T-t) k_t^T v_t, h x e x e = 4 * 16 * 16 = 1024 elements per
    # sequence (vLLM's linear_attention_state_shape), no conv state; the full layer 2 * g * e per token
    state, token = H * E * E * BF16, 2 * G * E * BF16  # 2048 bytes; 128 bytes per token
    short, long = (llm.phase("decode", kv_len=n, batch=B) for n in (L, 10 * L))
    for cost, n in ((short, L), (long, 10 * L)):
        assert cost.memory.kv_cache_by_type == {"state": B * state, "full_attention": B * (n + 1) * token}
        read, written = cache_traffic(cost)
        assert read["kv_cache.0.state0"] == written["kv_cache.0.state0"] == B * state  # once each
    # a step per head: k^T v (e x e products of one multiply-add) and q @ state (e x e by e: e * e
    # multiply-adds): 2 * B * h * e * e = 2 * 2 * 4 * 256 = 4096, whatever the context
    for cost in (short, long):
        assert cost.flops.by_operator()["matmul"] == 2 * B * H * E * E
    assert short.flops.by_operator()["scaled_dot_product_attention"] == attention_flops(B, H, L + 1)
    read, written = cache_traffic(llm.phase("prefill", seq_len=16, batch=B))
    assert (read["kv_cache.0.state0"], written["kv_cache.0.state0"]) == (0, B * state)  # a prompt starts from none


def test_bamba_of_mamba_layers_only() -> None:
    config = transformers.BambaConfig(
        vocab_size=V,
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=H,
        num_key_value_heads=G,
        num_hidden_layers=2,
        mamba_n_heads=4,
        mamba_d_head=16,
        mamba_n_groups=1,
        mamba_d_state=8,
        mamba_expand=2,
    )
    llm = CausalLM(config)
    assert [layer.layer_type for layer in llm.caches.layers] == ["state", "state"]
    # Mamba-2 (mamba_ssm's allocate_inference_cache): a conv state over x, B and C, 2 * 32 + 2 * 1 * 8
    # = 80 channels x 4 taps, and an SSM state of heads x head_dim x d_state = 4 * 16 * 8 = 512
    state = (80 * 4 + 4 * 16 * 8) * BF16  # 1664 bytes per layer and sequence
    short, long = (llm.phase("decode", kv_len=n, batch=B) for n in (L, 10 * L))
    for cost in (short, long):
        assert cost.memory.kv_cache_by_type == {"state": 2 * B * state}
        read, written = cache_traffic(cost)
        assert sum(read.values()) == sum(written.values()) == 2 * B * state
    assert short.flops.total() == long.flops.total()  # nothing grows with the context
    llm.phase("prefill", seq_len=16)  # a prompt runs too (no cached position to read back)


def test_xlstm_keeps_matrix_memory_normalizer_and_stabilizer() -> None:
    config = transformers.xLSTMConfig(vocab_size=V, hidden_size=128, num_heads=H, num_hidden_layers=2)
    llm = CausalLM(config)
    # per mLSTM layer and head: C of qk x v, n of qk, m of 1, with qk = 128 * 0.5 / 4 = 16 and
    # v = 128 * 1.0 / 4 = 32 (qk_dim_factor, v_dim_factor): 4 * (16 * 32 + 16 + 1) = 2116 elements
    state = H * (16 * 32 + 16 + 1) * BF16  # 4232 bytes per layer and sequence
    short, long = (llm.phase("decode", kv_len=n, batch=B) for n in (L, 10 * L))
    for cost in (short, long):
        assert cost.memory.kv_cache_by_type == {"state": 2 * B * state}
        read, written = cache_traffic(cost)
        assert read["kv_cache.0.state0"] == written["kv_cache.0.state0"] == B * H * 16 * 32 * BF16  # C, once
        assert sum(read.values()) == sum(written.values()) == 2 * B * state
    assert short.flops.total() == long.flops.total()  # nothing grows with the context
