"""CPM-Ant's learned prompt tokens: ``P`` positions run and cached in front of every sequence,
worked by hand on a tiny config.

Width D = 64, 4 heads of 16, FFN width 128 (gated: two ``[128, D]`` inputs, one ``[D, 128]``
output), 2 layers, vocabulary 256, P = 8 prompt tokens. Per position and layer the linear layers
run q, k, v and the output (4·64·64 = 16,384) and the FFN (3·64·128 = 24,576): 40,960 MACs. A
position of cache holds keys and values of 4 heads of 16 per layer: 2·64 = 128 elements, 256 bytes
in bf16.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("CPM-Ant's cache is transformers 5's", allow_module_level=True)

from opcount.llm.attention.prompt_tokens import cache_lengths, prompt_length  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402

P, LAYER_MACS, POSITION_BYTES = 8, 4 * 64 * 64 + 3 * 64 * 128, 2 * 2 * 64 * 2  # 40,960 MACs; 2 layers: 512 B


def cpmant() -> CausalLM:
    config = transformers.CpmAntConfig(
        hidden_size=64,
        num_attention_heads=4,
        dim_head=16,
        dim_ff=128,
        num_hidden_layers=2,
        vocab_size=256,
        prompt_length=P,
        prompt_types=2,
    )
    return CausalLM(config)


def test_cache_lengths_with_a_prefix() -> None:
    assert cache_lengths(8, 0, 5) == (0, 13)  # the prompt runs with its 8 prompt tokens
    assert cache_lengths(8, 10, 1) == (18, 1)  # a step after 10 tokens attends over 18 cached
    assert cache_lengths(0, 10, 1) == (10, 1)


def test_prefill_runs_and_caches_the_prompt_tokens() -> None:
    llm = cpmant()
    assert prompt_length(llm.model) == P
    cost = llm.phase("prefill", seq_len=5)
    # 8 + 5 = 13 positions through each layer's linear layers: 13 x 40,960 = 532,480
    assert cost.flops.by_operator("cpmant.encoder.layers.0")["linear"] == 13 * LAYER_MACS
    # scores and values over 13 x 13 pairs, 4 heads of 16: 2 x 4 x 169 x 16 = 21,632
    assert cost.flops.by_operator("cpmant.encoder.layers.0")["matmul"] == 2 * 4 * 13 * 13 * 16
    assert cost.flops.by_operator("lm_head")["linear"] == 64 * 256  # the last token's logits only
    assert cost.memory.kv_cache == 13 * POSITION_BYTES  # 6,656 bytes
    assert cost.flops.unsupported_ops() == {}


def test_decode_attends_over_the_prompt_tokens_too() -> None:
    llm = cpmant()
    cost = llm.phase("decode", kv_len=10)
    assert cost.flops.by_operator("cpmant.encoder.layers.0")["linear"] == LAYER_MACS  # the new token only
    # one query over 8 + 10 + 1 = 19 keys: 2 x 4 x 19 x 16 = 2,432
    assert cost.flops.by_operator("cpmant.encoder.layers.0")["matmul"] == 2 * 4 * 19 * 16
    assert cost.memory.kv_cache == 19 * POSITION_BYTES  # 9,728 bytes
    assert llm.kv_bytes(tokens=11, batch=2) == 2 * 19 * POSITION_BYTES
