"""``opcount hf:LlamaForCausalLM`` (a ``*ForCausalLM`` class, no LLM flags) analyzes the whole
model, with the jit tracer and on meta: the command must not force ``return_dict=False``, which
those classes' forward does not support (``'tuple' object has no attribute 'last_hidden_state'``)."""

from __future__ import annotations

import json

import pytest

from opcount import cli

transformers = pytest.importorskip("transformers")

H, HEADS, KV_HEADS, FFN, VOCAB, T = 32, 4, 2, 64, 100, 8
HEAD_DIM = H // HEADS
CONFIG = [
    f"hidden_size={H}",
    f"num_attention_heads={HEADS}",
    f"num_key_value_heads={KV_HEADS}",
    f"intermediate_size={FFN}",
    f"vocab_size={VOCAB}",
    "num_hidden_layers=1",
]


def llama_macs() -> int:
    """Multiply-adds of one Llama layer and the head on T tokens, worked by hand."""
    q_o = 2 * T * H * H  # q_proj, o_proj
    k_v = 2 * T * H * KV_HEADS * HEAD_DIM  # grouped-query: kv heads only
    swiglu = 3 * T * H * FFN  # gate, up, down
    head = T * H * VOCAB
    attention = 2 * HEADS * T * T * HEAD_DIM  # q @ k^T and p @ v, the full square
    # inv_freq outer positions: a matmul in transformers 4.x; 5.x multiplies elementwise, no multiply-add
    rotary = (HEAD_DIM // 2) * T if int(transformers.__version__.split(".")[0]) < 5 else 0
    return q_o + k_v + swiglu + head + attention + rotary


@pytest.mark.parametrize("flags", [[], ["--meta"]], ids=["jit", "meta"])
def test_a_causal_lm_class_runs_without_llm_flags(capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    argv = ["hf:LlamaForCausalLM", "--seq-len", str(T), "--preset", "macs", "--format", "json", *flags]
    for item in CONFIG:
        argv += ["--hf-config", item]
    assert cli.main(argv) == 0, capsys.readouterr().err
    assert json.loads(capsys.readouterr().out)["total"]["flops"] == llama_macs()
