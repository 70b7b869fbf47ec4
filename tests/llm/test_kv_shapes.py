"""The KV cache per layer as the model's attention keeps it, not one geometry per config: Falcon's
one KV head (``multi_query``), its ``num_kv_heads`` (new decoder architecture, not the copies transformers
caches), values narrower than keys and per-type KV heads (MiMo-V2-Flash),
heads and head sizes per layer (Gemma 4), layers reusing another layer's KV (Gemma 3n). Every
expected size is worked by hand below from the config's values, which each test asserts first."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from tests.llm.small_configs import small  # noqa: E402
from tests.llm.test_caches import cache_traffic  # noqa: E402

# a decode step after 16 cached tokens holds T = 16 + 1 = 17 positions per full-attention layer
T = 17


def test_falcon_multi_query_caches_one_kv_head() -> None:
    config = transformers.FalconConfig(
        vocab_size=128, hidden_size=256, num_attention_heads=4, num_hidden_layers=2, multi_query=True
    )
    llm = CausalLM(config)
    # head_dim = 256 / 4 = 64; multi_query: 1 KV head (not the 4 query heads) -> 2 x 1 x 64 = 128 per token
    assert [layer.token_elements for layer in llm.caches.layers] == [128, 128]
    # 2 layers x 17 positions x 128 = 4,352 elements (4 heads would be 17,408)
    assert llm.caches.elements(16, 1, 1) == 4_352
    step = llm.phase("decode", kv_len=16)
    assert step.flops.total() > 0


def test_falcon_new_decoder_architecture_caches_its_kv_heads_not_their_copies() -> None:
    # transformers' FalconAttention copies each of the 2 KV heads to its 2 query heads before its cache;
    # engines (vLLM's FalconAttention) cache the 2 heads as they are
    config = transformers.FalconConfig(
        vocab_size=128, hidden_size=64, num_attention_heads=4, num_hidden_layers=2,
        new_decoder_architecture=True, num_kv_heads=2,
    )  # fmt: skip
    llm = CausalLM(config)
    # head_dim = 64 / 4 = 16: 2 x 2 KV heads x 16 = 64 per token (the 4 copies would be 128)
    assert [layer.token_elements for layer in llm.caches.layers] == [64, 64]
    # 2 layers x 17 positions x 64 = 2,176 elements, bfloat16: 4,352 bytes
    assert llm.caches.elements(16, 1, 1) == 2_176
    step = llm.phase("decode", kv_len=16)
    assert step.memory.kv_cache == 4_352
    read, written = cache_traffic(step)
    # each layer's attention reads its 17 keys and 17 values once: 2 heads x 17 x 16 x 2 bytes = 1,088 each
    assert read == {f"kv_cache.{i}.{part}": 1_088 for i in (0, 1) for part in ("keys", "values")}
    # the new token's key and value: 2 layers x 64 x 2 bytes
    assert sum(written.values()) == 256
    # every query head still attends, as before: per layer and head, 17 x (16 + 16) multiply-adds and a
    # softmax of 3 x 17 - 1 flops; 2 layers x 4 heads x 594 = 4,752
    assert step.flops.by_operator()["scaled_dot_product_attention"] == 2 * 4 * (17 * 32 + 3 * 17 - 1)


def test_falcon_40b_caches_8_kv_heads() -> None:
    # Falcon-40B's config.json (tiiuae/falcon-40b): hidden 8192, 128 heads of 64, num_kv_heads 8, 60 layers
    config = transformers.FalconConfig(
        vocab_size=65024, hidden_size=8192, num_attention_heads=128, num_hidden_layers=60,
        new_decoder_architecture=True, num_kv_heads=8, parallel_attn=True, bias=False, alibi=False,
    )  # fmt: skip
    llm = CausalLM(config)
    # 2 x 60 layers x 8 KV heads x 64 x 2 bytes = 122,880 bytes per token (128 heads: 1,966,080, 16 times more)
    assert llm.caches.elements(0, 1, 1) * 2 == 122_880


def test_mimo_v2_flash_values_narrower_than_keys_and_sliding_layers_own_heads() -> None:
    config = small(transformers.MiMoV2FlashConfig)
    assert (config.head_dim, config.v_head_dim, config.num_key_value_heads) == (192, 128, 4)
    assert config.layer_types == ["full_attention", "sliding_attention"] and config.sliding_window == 129
    llm = CausalLM(config)
    # full layer: 4 KV heads x (192 + 128) = 1,280; sliding layer: its own 8 KV heads x 320 = 2,560
    # (the published model: 4 KV heads on full layers, 8 on sliding ones, keys 192 and values 128 wide)
    assert [layer.token_elements for layer in llm.caches.layers] == [1_280, 2_560]
    # at 16 cached + 1: both layers hold 17 positions (17 < window 129): (1,280 + 2,560) x 17 = 65,280
    assert llm.caches.elements(16, 1, 1) == 65_280


def test_gemma4_global_layers_keep_their_own_head_size() -> None:
    config = small(transformers.Gemma4TextConfig)
    assert config.layer_types == ["sliding_attention", "full_attention"]
    assert [(layer.num_key_value_heads, layer.head_dim) for layer in config.per_layer_config] == [(4, 256), (4, 512)]
    llm = CausalLM(config)
    # sliding: 2 x 4 x 256 = 2,048 per token; global: 2 x 4 x 512 = 4,096 (global_head_dim)
    assert [layer.token_elements for layer in llm.caches.layers] == [2_048, 4_096]
    assert llm.caches.elements(16, 1, 1) == (2_048 + 4_096) * T


def test_gemma3n_kv_sharing_layers_hold_nothing() -> None:
    config = small(transformers.Gemma3nTextConfig)
    # the small config keeps the sharing: one producer of each type, then one consumer of each
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2 and config.num_kv_shared_layers == 2
    assert (config.num_key_value_heads, config.head_dim) == (2, 256)
    llm = CausalLM(config)
    # producers: 2 x 2 x 256 = 1,024 per token; the 2 consumers read those and hold none
    assert [layer.token_elements for layer in llm.caches.layers] == [1_024, 1_024, 0, 0]
    assert [layer.layer_type for layer in llm.caches.layers][2:] == ["none", "none"]
    # 17 positions each (under the 512 window): 2 x 1,024 x 17 = 34,816
    assert llm.caches.elements(16, 1, 1) == 34_816
    cost = llm.phase("decode", kv_len=16)
    assert cost.memory.kv_cache == 34_816 * 2  # bf16
    read, written = cache_traffic(cost)
    # each producer's 17 tokens are read twice, by itself and by the layer reusing them:
    # 2 x 17 x 1,024 x 2 bytes = 69,632 per producer; the new token written once per producer
    assert read == {f"kv_cache.{i}.{part}": 2 * 17 * 512 * 2 for i in (0, 1) for part in ("keys", "values")}
    assert sum(written.values()) == 2 * 1_024 * 2
