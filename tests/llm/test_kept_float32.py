"""Weights transformers keeps in float32 (transformers 5.24's rule: a class's
``_keep_in_fp32_modules_strict`` when loaded in float16 or bfloat16, ``_keep_in_fp32_modules`` only
in float16), priced in float32 in the weights total and the traffic, against closed forms on tiny
models; a per-module ``--weight-dtype`` assignment still overrides them.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.models.build import build_on_meta  # noqa: E402
from opcount.llm.precision.dtypes import Precision  # noqa: E402

D, F, V = 32, 64, 100


def _rwkv(act: str) -> CausalLM:
    config = transformers.RwkvConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=2)
    return CausalLM(config, Precision(weight=act, act=act))


def test_rwkv_time_decay_and_bonus_are_float32_in_float16_only() -> None:
    # RwkvPreTrainedModel._keep_in_fp32_modules = ["time_decay", "time_first"] (not strict): per layer
    # two vectors of D, 2 layers: 128 values, 2 bytes more each in float16, none in bfloat16
    fp16, bf16 = _rwkv("float16"), _rwkv("bfloat16")
    parameters = sum(p.numel() for p in fp16.model.parameters())
    assert bf16.phase("decode", kv_len=4).memory.weights == 2 * parameters
    assert fp16.phase("decode", kv_len=4).memory.weights == 2 * parameters + 2 * 128
    # a decode step reads each once: its speed of light moves those 256 bytes more (every other
    # tensor is 2 bytes an element in both, the WKV state's float32 parts 4 in both)
    steps = [llm.phase("decode", kv_len=4, hardware="h100-sxm").schedule for llm in (fp16, bf16)]
    assert steps[0] is not None and steps[1] is not None
    assert steps[0].compulsory_bytes - steps[1].compulsory_bytes == 2 * 128


def _llama_keeping_down_proj(weight: str | list[str], kept: bool = True) -> CausalLM:
    config = transformers.LlamaConfig(
        vocab_size=V, hidden_size=D, intermediate_size=F, num_attention_heads=4, num_key_value_heads=2,
        num_hidden_layers=2,
    )  # fmt: skip
    model = build_on_meta(config)
    if kept:  # as a class declaring _keep_in_fp32_modules_strict = ["mlp.down_proj"] would
        model._keep_in_fp32_modules_strict = {"mlp.down_proj"}
    return CausalLM(model, Precision(weight=weight))


def test_a_strict_float32_weight_beats_the_default_format_and_yields_to_an_assignment() -> None:
    down = D * F  # each layer's down_proj: 32 x 64 = 2048 values
    plain = _llama_keeping_down_proj("bfloat16", kept=False).phase("decode", kv_len=4).memory.weights
    # bfloat16: the two down_proj weights in float32, 2 bytes more a value
    assert _llama_keeping_down_proj("bfloat16").phase("decode", kv_len=4).memory.weights == plain + 2 * 2 * down
    # int8 by default (one float16 scale per output row: 32 x 64 + 2 x 32 = 2112 bytes a down_proj): the
    # float32 rule keeps down_proj at 4 x 2048 = 8192 bytes
    int8 = _llama_keeping_down_proj("int8", kept=False).phase("decode", kv_len=4).memory.weights
    assert _llama_keeping_down_proj("int8").phase("decode", kv_len=4).memory.weights == int8 + 2 * (4 * down - 2112)
    # an assignment naming down_proj wins over the float32 rule
    assigned = ["down_proj=int8", "bfloat16"]
    expected = _llama_keeping_down_proj(assigned, kept=False).phase("decode", kv_len=4).memory.weights
    assert _llama_keeping_down_proj(assigned).phase("decode", kv_len=4).memory.weights == expected
    assert expected == plain - 2 * (2 * down - 2112)  # 2 down_proj from 4096 bytes to 2112
