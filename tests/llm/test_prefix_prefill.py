"""A prefill over a cached prefix (chunked prefill, prefix caching): ``n`` prompt tokens per sequence
after ``k`` cached ones, against closed forms worked by hand on tiny configs.

Notation as in tests/llm/test_caches.py: h query heads, g KV heads, e head dim, d hidden, V vocab,
B sequences, W a sliding window, C an attention chunk; bf16, 2 bytes an element. Multiply-adds
(the ``macs`` preset). Attention's table (``flops``) counts every (query, key) pair of a call
whatever the mask; the kernels (the bound and the estimate) count a causal block's kept pairs, the
new tokens last: new token ``i`` (0-based) sees the ``k`` cached and itself and the ``i`` before it,
``k + i + 1`` keys, so ``sum_i (k + i + 1) = n k + n (n + 1) / 2`` pairs a head.
"""

from __future__ import annotations

from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="layer types need transformers 5")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.kernels.estimate import ATTENTION_KINDS, attention_work  # noqa: E402
from opcount.llm.phases import PhaseCost  # noqa: E402
from tests.llm.test_caches import ATTENTION, BF16, D, E, F, G, H, V, cache_traffic, deepseek_v3  # noqa: E402

B, HW = 2, "h100-sxm"
TOKEN = 2 * G * E * BF16  # one position's keys and values in one layer: 128 bytes


def prefill(llm: CausalLM, n: int, k: int) -> PhaseCost:
    return llm.phase("prefill", seq_len=n, kv_len=k, batch=B, preset="macs", hardware=HW)


def kept_pairs_macs(cost: PhaseCost) -> float:
    """The attention multiply-adds the kernels compute: a causal block's kept pairs only."""
    calls = [c for c in cost.flops.trace().calls if c.kind in ATTENTION_KINDS]
    return sum(attention_work(c, causal=True)[0] for c in calls)


def sdpa(cost: PhaseCost) -> int:
    return int(cost.flops.by_operator()["scaled_dot_product_attention"])


# ------------------------------------------------------------------------------------------------
# Full attention: Llama
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama() -> CausalLM:
    return CausalLM(transformers.LlamaConfig(**ATTENTION, num_hidden_layers=2))


def test_attention_over_the_prefix_and_the_chunk(llama: CausalLM) -> None:
    n, k = 6, 10
    cost = prefill(llama, n, k)
    # the table: each of the 6 queries of h heads over the 16 keys held, 2e a pair, in 2 layers
    assert sdpa(cost) == 2 * B * H * n * (k + n) * 2 * E  # 2 * 2 * 4 * 96 * 32 = 49152
    # everything else runs the 6 new tokens (the logits the last one's) as a 6-token prompt does
    alone = prefill(llama, n, 0)
    assert cost.flops.total() - alone.flops.total() == 2 * B * H * n * k * 2 * E  # the 60 pairs a head more
    # the kernels: sum over i of (10 + i + 1) = 6 * 10 + 21 = 81 kept pairs a head
    assert sum(k + i + 1 for i in range(n)) == 81
    assert kept_pairs_macs(cost) == 2 * B * H * 81 * 2 * E  # 41472
    # the cache holds the 16 positions; attention reads them all and the chunk writes its 6
    assert cost.memory.kv_cache_by_type == {"full_attention": 2 * B * (k + n) * TOKEN}  # 8192
    read, written = cache_traffic(cost)
    assert sum(read.values()) == 2 * B * (k + n) * TOKEN
    assert sum(written.values()) == 2 * B * n * TOKEN  # 3072


def test_a_chunk_after_k_is_the_prompt_of_k_plus_n_less_the_prompt_of_k(llama: CausalLM) -> None:
    # Every projection, norm and rotary runs per token, so the chunk's are the difference of the two
    # prompts'; the logits are the last token's in each of the three (one row per sequence in the
    # chunk, none in the difference). The kernels' causal pairs obey the identity exactly:
    # (k + n)(k + n + 1)/2 - k(k + 1)/2 = n k + n(n + 1)/2. The table counts each prompt's square
    # whole, (k + n)^2 - k^2 = 2 n k + n^2 pairs a head against the chunk's n (k + n): n k more.
    n, k = 6, 10
    chunk, longer, shorter = prefill(llama, n, k), prefill(llama, k + n, 0), prefill(llama, k, 0)
    logits = B * D * V  # one row of lm_head per sequence: 12800 multiply-adds
    assert chunk.schedule and longer.schedule and shorter.schedule
    bound = longer.schedule.matmul_flops - shorter.schedule.matmul_flops
    assert chunk.schedule.matmul_flops == bound + 2 * logits  # 2 flops a multiply-add in the bound
    table = longer.flops.total() - shorter.flops.total()
    assert chunk.flops.total() == table - 2 * B * H * n * k * 2 * E + logits


def test_the_python_request_and_its_limits(llama: CausalLM) -> None:
    from opcount.errors import OpcountValueError
    from opcount.llm.generation import generate
    from opcount.llm.phases import PhaseRequest

    request = PhaseRequest(phase="prefill", seq_len=4, kv_len=12, batch=B)
    assert llama.cost(request).memory.kv_cache == 2 * B * 16 * TOKEN
    with pytest.raises(OpcountValueError, match="kv_len must be an integer >= 0, got -1"):
        llama.phase("prefill", seq_len=4, kv_len=-1)
    with pytest.raises(OpcountValueError, match="a generation starts from an empty cache"):
        generate(llama, request, 3)


def test_the_sweep_fits_a_chunk_over_many_prefixes(llama: CausalLM) -> None:
    from tests.llm.test_sweep import check_phase

    check_phase(llama, "prefill", [(b, t, k) for b in (1, 3) for t in (2, 5, 9) for k in (1, 7, 40)])


# ------------------------------------------------------------------------------------------------
# Sliding window (Mistral, W = 8) and chunked attention (Llama-4, C = 8)
# ------------------------------------------------------------------------------------------------
W = 8


@pytest.fixture(scope="module")
def mistral() -> CausalLM:
    return CausalLM(transformers.MistralConfig(**ATTENTION, num_hidden_layers=2, sliding_window=W))


def test_a_sliding_layer_holds_the_window_before_the_chunk(mistral: CausalLM) -> None:
    n = 4
    for k in (20, 100):  # nothing grows with the prefix past the window
        cost = prefill(mistral, n, k)
        # the first new token sees the W - 1 = 7 positions before it: 7 + 4 = 11 held, read once
        assert cost.memory.kv_cache == 2 * B * 11 * TOKEN  # 5632
        read, written = cache_traffic(cost)
        assert (sum(read.values()), sum(written.values())) == (2 * B * 11 * TOKEN, 2 * B * n * TOKEN)
        # one block: 4 queries over the 11 keys, the window a mask inside them
        assert sdpa(cost) == 2 * B * H * n * 11 * 2 * E  # 22528
        # the kernel counts the block causally from its last key: 4 * 11 - 6 = 38 pairs a head (the
        # window keeps 4 * 8 = 32 of them)
        assert kept_pairs_macs(cost) == 2 * B * H * 38 * 2 * E
    # a prefix shorter than the window: every query sees all it holds, 3 + 4 = 7 positions
    assert sdpa(prefill(mistral, n, 3)) == 2 * B * H * n * 7 * 2 * E


def test_a_chunk_longer_than_the_window_attends_by_blocks(mistral: CausalLM) -> None:
    n = 20
    # alone, a prompt of 20: a causal block of 8 (8 x 8), a block of 8 over its 16 keys (the block
    # before and itself), the last 4 over 12 (8 before and themselves): 64 + 128 + 48 = 240 pairs a head
    assert sdpa(prefill(mistral, n, 0)) == 2 * B * H * 240 * 2 * E
    for k in (30, 300):
        cost = prefill(mistral, n, k)
        # after a prefix the first block also sees the 7 held: 8 x 15, then as alone: 120 + 128 + 48
        assert sdpa(cost) == 2 * B * H * 296 * 2 * E  # 151552
        assert cost.memory.kv_cache == 2 * B * (7 + n) * TOKEN  # 13824
        assert sum(cache_traffic(cost)[1].values()) == 2 * B * n * TOKEN


@pytest.mark.parametrize("cached", [1, 5, 7, 13, 30])
@pytest.mark.parametrize("length", [2, 8, 9, 20])
def test_blocks_after_held_positions_equal_the_masked_attention(cached: int, length: int) -> None:
    # on real tensors: the chunk's queries are the last `length` of the positions held, and each sees
    # its window (sliding: itself and the W - 1 before) or its chunk up to itself, as the full mask says
    import torch

    from opcount.llm.attention.windows import chunked_attention, held_before, sliding_attention

    g = torch.Generator().manual_seed(0)
    for layer_type, run in (("sliding_attention", sliding_attention), ("chunked_attention", chunked_attention)):
        held = held_before(layer_type, W, cached)
        assert held == (cached % W if layer_type == "chunked_attention" else min(cached, W - 1))
        q = torch.randn(2, 4, length, 16, generator=g)
        k, v = (torch.randn(2, 2, held + length, 16, generator=g) for _ in range(2))
        # positions from the start of the chunk held (a multiple of W) or of the window held
        i, j = torch.arange(length)[:, None] + held, torch.arange(held + length)[None, :]
        seen = (j > i - W) if layer_type == "sliding_attention" else (j // W == i // W)
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=(j <= i) & seen, enable_gqa=True)
        torch.testing.assert_close(run(W, q, k, v, None), expected)


def test_a_chunked_layer_attends_within_its_chunks() -> None:
    c = 8
    config = transformers.Llama4TextConfig(
        **ATTENTION, intermediate_size_mlp=F, num_hidden_layers=4, attention_chunk_size=c, moe_layers=[]
    )
    llm = CausalLM(config)  # layers 0-2 chunked, layer 3 global (no_rope_layer_interval 4)
    n, k = 10, 13
    cost = prefill(llm, n, k)
    # the new tokens are positions 13..22: 13..15 end the chunk [8, 16), whose 5 held positions they
    # see; 16..22 start the next. Held: 5 + 10 = 15 in a chunked layer, all 23 in the global one
    assert cost.memory.kv_cache_by_type == {"chunked_attention": 3 * B * 15 * TOKEN, "full_attention": B * 23 * TOKEN}
    # the table: 3 queries over 8 keys, then 7 causally over themselves (7 x 7): 73 pairs a head;
    # the global layer 10 x 23
    assert sdpa(cost) == B * H * (3 * 73 + n * 23) * 2 * E  # 114944
    # the kernels, exactly: 6 + 7 + 8 = 21, then 1 + ... + 7 = 28; the global layer 10 * 13 + 55
    assert kept_pairs_macs(cost) == B * H * (3 * (21 + 28) + n * k + 55) * 2 * E  # 84992


# ------------------------------------------------------------------------------------------------
# A recurrent hybrid: Qwen3-Next (gated DeltaNet, then attention)
# ------------------------------------------------------------------------------------------------
def qwen3_next() -> Any:
    return transformers.Qwen3NextConfig(
        **ATTENTION, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8, linear_conv_kernel_dim=4,
        num_experts=0,
    )  # fmt: skip


def test_a_recurrent_layer_scans_the_chunk_from_the_state_held() -> None:
    llm = CausalLM(qwen3_next())
    n = 6
    # gated DeltaNet: a conv over q, k, v (2 * 2 * 8 + 4 * 8 = 64 channels) x 4 taps and a state per
    # value head of k_dim x v_dim (4 * 8 * 8 = 256), whatever the context: 1024 bytes a sequence
    state = (64 * 4 + 4 * 8 * 8) * BF16
    costs = {k: prefill(llm, n, k) for k in (0, 10, 1000)}
    for k, cost in costs.items():
        assert cost.memory.kv_cache_by_type == {"state": B * state, "full_attention": B * (k + n) * TOKEN}
        read, written = cache_traffic(cost)
        # the chunk reads the state the prefix left (an empty cache has none to read) and writes it
        held = read["kv_cache.0.conv0"] + read["kv_cache.0.state0"]
        assert held == (B * state if k else 0)
        assert written["kv_cache.0.conv0"] + written["kv_cache.0.state0"] == B * state
    # the scan does not grow with the prefix: only the attention layer's pairs do, 990 keys a query more
    layer = [costs[k].flops.by_module()["model.layers.0"] for k in (10, 1000)]
    assert layer[0] == layer[1]
    grown = costs[1000].flops.total() - costs[10].flops.total()
    assert grown == B * H * n * (1000 - 10) * 2 * E


# ------------------------------------------------------------------------------------------------
# Multi-head latent attention: DeepSeek-V3, and DeepSeek sparse attention's indexer
# ------------------------------------------------------------------------------------------------
def test_latent_attention_expands_the_cached_context() -> None:
    from tests.llm.test_caches import NOPE, RANK, ROPE, VH

    llm = CausalLM(deepseek_v3())  # 2 dense layers, h heads
    n, k = 5, 12
    cost = prefill(llm, n, k)
    ops = cost.flops.by_operator()
    # as vLLM runs a chunk over a cached context: kv_b_proj up-projects the latent of the 12 cached
    # and the 5 new tokens to per-head keys and values (rank x h (nope + v) a token), not absorbed
    assert cost.flops.by_module()["model.layers.0.self_attn.kv_b_proj"] == B * (k + n) * RANK * H * (NOPE + VH)
    assert "einsum" not in ops
    # the 5 queries over the 17 expanded keys: (nope + rope) + v a pair
    assert ops["scaled_dot_product_attention"] == 2 * B * H * n * (k + n) * (NOPE + ROPE + VH)  # 54400
    latent = RANK + ROPE  # 40 elements a token and layer
    assert cost.memory.kv_cache_by_type == {"latent_attention": 2 * B * (k + n) * latent * BF16}  # 5440
    read, written = cache_traffic(cost)
    # the cached latent read as the cache's; its rope key once per head, as the model copies it into
    # each head's keys (the bound counts the tensor once)
    assert sum(read.values()) == 2 * B * (k + n) * (RANK + H * ROPE) * BF16  # 8704
    assert sum(written.values()) == 2 * B * n * latent * BF16  # 1600
    # a decode step of the same 5 tokens absorbs instead
    assert "einsum" in llm.phase("decode", seq_len=n, kv_len=k, batch=B, preset="macs").flops.by_operator()


def test_the_sparse_attention_indexer_scores_the_context() -> None:
    from tests.llm.test_indexed_attention import ABSORB, LAYER_LINEAR, LAYERS, PAIR, SCORE, K, tiny

    llm = CausalLM(tiny())
    n, k = 4, 10
    cost = prefill(llm, n, k)
    ops = cost.flops.by_operator()
    assert ops["linear"] == B * (LAYERS * n * LAYER_LINEAR + D * V)  # the new tokens, the last one's logits
    assert ops["einsum"] == B * LAYERS * n * ABSORB  # absorbed, as FlashMLA's sparse prefill runs it
    # the indexer scores each new token against the 14 keys held (the table: the whole 4 x 14)
    assert ops["matmul"] == B * LAYERS * SCORE * n * (k + n)
    # every new token already sees more than K = 8 positions: K latents each
    assert ops["scaled_dot_product_attention"] == B * LAYERS * PAIR * n * K
