"""A decode step of a recurrent layer is its one-token update from the state held, whatever the cache
holds: with nothing cached (``kv_len`` 0) the state is a zero one, and the step is not a prompt's
chunked scan padded to a chunk (64, 128 or 256 tokens), as engines run a decode token (vLLM's
``selective_state_update`` for Mamba, ``fused_recurrent_gated_delta_rule`` for gated DeltaNet).

So the step after 0 cached tokens costs what the step after 1 costs, less the one cached token's
attention in each attention layer: there the new query (``h`` heads of ``e``) sees itself alone
instead of 2 keys, one key row fewer for ``q k^T`` (``h x e`` multiply-adds) and one value row fewer
for ``p v`` (``h x e``), ``2 h e`` multiply-adds per sequence and attention layer; its softmax over one
score fewer saves 3 flops a row (an exponential, a sum, a divide: ``3 k - 1`` over ``k`` scores).

Tiny configs: d hidden, h heads, g KV heads, e head dim, B sequences.
"""

from __future__ import annotations

from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="state layers in the cache need transformers 5")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from tests.llm.test_caches import cache_traffic  # noqa: E402

D, H, G, E, V, B = 64, 4, 2, 16, 128, 2


def one_cached_token(attention_layers: int, *, softmax: bool) -> int:
    """What one more cached token adds to a decode step: ``2 h e`` multiply-adds per sequence and
    attention layer (one key and one value row), with the default preset 3 softmax flops per head
    besides."""
    return B * attention_layers * H * (2 * E + (3 if softmax else 0))


def qwen3_next() -> Any:
    # a gated DeltaNet layer (2 key heads and 4 value heads of 8; transformers' chunk is 64 tokens),
    # then gated attention; 4 experts, 2 routed
    return transformers.Qwen3NextConfig(
        vocab_size=V, hidden_size=D, intermediate_size=128, moe_intermediate_size=32,
        shared_expert_intermediate_size=32, num_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"], num_attention_heads=H, num_key_value_heads=G,
        head_dim=E, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
        linear_value_head_dim=8,
    )  # fmt: skip


def granite_4_h() -> Any:
    # GraniteMoeHybrid (Granite-4.0-H): a Mamba-2 mixer (4 heads of 16, state 8; chunk 256), then
    # attention with no positions ("nope"), e = d / h = 16; 2 experts, both routed
    return transformers.GraniteMoeHybridConfig(
        vocab_size=V, hidden_size=D, intermediate_size=32, shared_intermediate_size=64, num_hidden_layers=2,
        layer_types=["mamba", "attention"], num_attention_heads=H, num_key_value_heads=G, num_local_experts=2,
        num_experts_per_tok=2, mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=8,
        mamba_expand=1,
    )  # fmt: skip


def nemotron_h() -> Any:
    # Nemotron-H: a Mamba-2 mixer (4 heads of 16, state 8; chunk 128), attention, 2 experts both routed
    return transformers.NemotronHConfig(
        vocab_size=V, hidden_size=D, num_attention_heads=H, num_key_value_heads=G, head_dim=E,
        layers_block_type=["mamba", "attention", "moe"], mamba_num_heads=4, mamba_head_dim=16, n_groups=1,
        ssm_state_size=8, conv_kernel=4, n_routed_experts=2, num_experts_per_tok=2, moe_intermediate_size=16,
        moe_shared_expert_intermediate_size=16,
    )  # fmt: skip


FAMILIES = {"qwen3_next": qwen3_next, "granite_4_h": granite_4_h, "nemotron_h": nemotron_h}


@pytest.mark.parametrize("family", FAMILIES)
def test_decode_with_an_empty_cache_is_the_recurrent_step(family: str) -> None:
    llm = CausalLM(FAMILIES[family]())
    assert [layer.layer_type for layer in llm.caches.layers][:2] in (["state", "full_attention"],)
    for preset, softmax in (("macs", False), ("default", True)):
        empty, one = (llm.phase("decode", kv_len=n, batch=B, preset=preset).flops.total() for n in (0, 1))
        assert one - empty == one_cached_token(1, softmax=softmax)  # MACs: 2 * 1 * 4 * 32 = 256
    # the step reads the state held (a zero one) and writes it back, as it does after a cached token
    empty_read, empty_written = cache_traffic(llm.phase("decode", kv_len=0, batch=B))
    one_read, one_written = cache_traffic(llm.phase("decode", kv_len=1, batch=B))
    states = [name for name in one_read if name.startswith("kv_cache.0.")]
    assert states and all(empty_read[s] == one_read[s] > 0 for s in states)
    assert all(empty_written[s] == one_written[s] > 0 for s in states)


def test_a_prompt_of_one_token_still_runs_the_prompt_path() -> None:
    # a prefill starts from no state: it reads none (only a decode step reads the state held)
    llm = CausalLM(granite_4_h())
    read, written = cache_traffic(llm.phase("prefill", seq_len=1, batch=B))
    assert sum(v for k, v in read.items() if k.startswith("kv_cache.0.")) == 0
    assert sum(v for k, v in written.items() if k.startswith("kv_cache.0.")) > 0


def mamba() -> Any:
    return transformers.MambaConfig(vocab_size=V, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2)


def minimax() -> Any:
    return transformers.MiniMaxConfig(
        vocab_size=V, hidden_size=D, intermediate_size=128, num_attention_heads=H, num_key_value_heads=G,
        head_dim=E, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
        num_local_experts=2, num_experts_per_tok=1,
    )  # fmt: skip


def recurrent_gemma() -> Any:
    # a recurrent block, then local attention (4 heads of 16, one KV head)
    return transformers.RecurrentGemmaConfig(
        vocab_size=V, hidden_size=D, lru_width=D, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=H, num_key_value_heads=1, block_types=["recurrent", "attention"],
        attention_window_size=16,
    )  # fmt: skip


# the other families opcount runs whose empty-cache step ran a prompt's path (a scan, blocks or no
# state read): one cached token adds its attention alone, and nothing in a model without attention
OTHERS = {"mamba": (mamba, 0), "minimax": (minimax, 1), "recurrent_gemma": (recurrent_gemma, 1)}


@pytest.mark.parametrize("family", OTHERS)
def test_other_recurrent_families_step_from_an_empty_cache(family: str) -> None:
    make, attention_layers = OTHERS[family]
    llm = CausalLM(make())
    empty, one = (llm.phase("decode", kv_len=n, batch=B, preset="macs") for n in (0, 1))
    assert one.flops.total() - empty.flops.total() == B * attention_layers * H * 2 * E
    # the state read at each step: the same whether a token is cached or not
    (empty_read, _), (one_read, _) = cache_traffic(empty), cache_traffic(one)
    states = [name for name in one_read if name.startswith("kv_cache.0.")]
    assert states and all(empty_read[s] == one_read[s] > 0 for s in states)
