"""The experts' top-k read once, whatever the config calls it (opcount.llm.moe.experts.TOP_K_FIELDS),
and used by everything that routes tokens: expert-parallel all-to-all bytes worked by hand on a tiny
Aria, whose config names its top-k ``moe_topk`` (transformers' AriaTextConfig)."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.layout import Parallel  # noqa: E402

D, F, N, H, X, V = 64, 32, 2, 4, 4, 128  # hidden, expert width, layers, heads (= KV heads), experts, vocab
B = 2  # sequences, one new token each
BYTES = 2  # bfloat16 activations


def aria(top_k: int) -> CausalLM:
    config = transformers.AriaTextConfig(
        hidden_size=D, intermediate_size=F, num_hidden_layers=N, num_attention_heads=H, num_key_value_heads=H,
        moe_num_experts=X, moe_topk=top_k, moe_num_shared_experts=1, vocab_size=V,
    )  # fmt: skip
    assert not hasattr(config, "num_experts_per_tok")  # the field the deployment once read
    return CausalLM(config)


def test_the_experts_carry_the_configs_moe_topk() -> None:
    assert [(e.block, e.count, e.top_k) for e in aria(2).experts] == [
        ("model.layers.0.mlp", X, 2),
        ("model.layers.1.mlp", X, 2),
    ]


def test_expert_parallel_all_to_all_is_priced_at_aria_top_k() -> None:
    # Decode, B = 2 tokens, tp = ep = 2 (dp 1). transformers' plan for Aria splits the embedding by rows,
    # attention's o_proj and the shared expert's down_proj row-wise (an all-reduce each), lm_head by
    # columns (gathered), and the experts over ep: each device dispatches its dp/ep = 1/2 share of the
    # tokens to their top_k = 2 experts, B * 1/2 * 2 = 2 token-copies of D * 2 = 128 bytes = 256 bytes, half
    # of them for the other device: 128 sent by the dispatch and 128 by the combine, in each layer.
    all_to_all = N * 2 * (B * D * BYTES * 2 // 2) // 2  # 4 x 128 = 512
    # the embedding's and 2 a layer all-reduced: B * D * 2 = 256 bytes each, 2(n-1)/n = 1 of it sent
    all_reduce = (1 + 2 * N) * B * D * BYTES  # 5 x 256 = 1280
    gathered = B * V * BYTES // 2  # the logits, 512 bytes, half sent: 256
    llm = aria(2)
    d = llm.deploy(llm.phase("decode", kv_len=3, batch=B), Parallel(tp=2, ep=2))
    assert d.communication_bytes == all_to_all + all_reduce + gathered == 2048
    # priced at top_k 1 (the field Aria does not have, defaulted) the all-to-alls would send half: 1792
    one = aria(1)
    half = one.deploy(one.phase("decode", kv_len=3, batch=B), Parallel(tp=2, ep=2))
    assert d.communication_bytes - half.communication_bytes == all_to_all // 2 == 256
