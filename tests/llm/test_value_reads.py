"""Models whose forward reads a value from the cache (how many tokens it holds) run on meta: the
cache answers with the number the phase knows (OPT counts cached tokens to size its mask, Git
slices its position ids with it, CPM-style branches on it), and a model that computes attention
in its own code keeps its own masks (MPT needs its mask as a tensor). The counts are checked
against closed forms: d hidden, f MLP width, n layers, V vocab; one token's linear layers cost
n x (4 d^2 + 2 d f) + d V multiply-adds (q, k, v, o projections; two MLP projections; the head)."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM  # noqa: E402

pytestmark = pytest.mark.smoke

D, F, N, H, V = 64, 128, 2, 4, 100


def _linear_macs(tokens: int) -> int:
    return tokens * (N * (4 * D * D + 2 * D * F) + D * V)


CONFIGS = {
    "opt": lambda: transformers.OPTConfig(
        hidden_size=D, ffn_dim=F, num_hidden_layers=N, num_attention_heads=H, vocab_size=V, word_embed_proj_dim=D
    ),
    "biogpt": lambda: transformers.BioGptConfig(
        hidden_size=D, intermediate_size=F, num_hidden_layers=N, num_attention_heads=H, vocab_size=V
    ),
}
# transformers 4.x's XGLM checks its input ids for padding (pad_token_id in input_ids), a value meta
# tensors have not; 5.x does not
if int(transformers.__version__.split(".")[0]) >= 5:
    CONFIGS["xglm"] = lambda: transformers.XGLMConfig(
        d_model=D, ffn_dim=F, num_layers=N, attention_heads=H, vocab_size=V
    )


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("cached", [0, 5])
def test_linear_layers_of_a_decode_step(name: str, cached: int) -> None:
    llm = CausalLM(CONFIGS[name]())
    step = llm.phase("decode", kv_len=cached, preset="macs")
    assert step.flops.by_operator()["linear"] == _linear_macs(1)


@pytest.mark.parametrize("name", CONFIGS)
def test_linear_layers_of_a_prompt(name: str) -> None:
    # the head runs on the last prompt token only (logits_to_keep=1) where the model takes it
    llm = CausalLM(CONFIGS[name]())
    prompt = llm.phase("prefill", seq_len=8, preset="macs")
    head_tokens = 1 if llm.keeps_logits else 8
    assert prompt.flops.by_operator()["linear"] == 8 * N * (4 * D * D + 2 * D * F) + head_tokens * D * V


def test_mpt_runs_its_own_attention_with_its_mask() -> None:
    # MPT: a fused Wqkv (3 d^2) and out_proj (d^2); an MLP 4 d wide (transformers 5 builds it so whatever
    # expansion_ratio says, and 4 is its default): 2 x 4 d^2
    config = transformers.MptConfig(d_model=D, n_layers=N, n_heads=H, vocab_size=V)
    llm = CausalLM(config)
    step = llm.phase("decode", kv_len=5, preset="macs")
    assert step.flops.by_operator()["linear"] == N * (4 * D * D + 2 * D * 4 * D) + D * V
