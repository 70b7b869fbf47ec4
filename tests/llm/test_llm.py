"""LLM phases against closed forms worked by hand on small configs (the 8B/70B checks are slow).

Notation: d hidden, f MLP width, n layers, h query heads, g KV heads, e = d/h head dim, V vocab,
B batch, s new tokens, L cached tokens. 1 multiply-add = 1 flop (opcount's default).
Per layer, per token: q and o projections d*d each, k and v d*g*e each, SwiGLU's gate, up and
down projections d*f each. Attention (q x k and attention x v, every pair as published tables
count it): 2*h*e*(L+s) per new token. The output projection runs on the last token of a prompt
(prefill) and on every new token in decode: d*V each.
"""

from __future__ import annotations

import math

import pytest
import torch

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.generation import generation  # noqa: E402
from opcount.llm.moe.experts import expert_loads  # noqa: E402
from opcount.llm.precision.dtypes import Precision, weight_bytes  # noqa: E402

D, F, N, H, G, V = 256, 512, 2, 8, 2, 1000
E = D // H


# The small geometry every config of these tests shares.
GEOMETRY = {
    "hidden_size": D,
    "intermediate_size": F,
    "num_hidden_layers": N,
    "num_attention_heads": H,
    "num_key_value_heads": G,
    "vocab_size": V,
}


def llama(**extra: object) -> object:
    return transformers.LlamaConfig(**GEOMETRY, **extra)


@pytest.fixture(scope="module")
def llm() -> CausalLM:
    return CausalLM(llama())


def linear_macs(tokens: int) -> int:
    return N * tokens * (2 * D * D + 2 * D * G * E + 3 * D * F)


def attention_macs(batch: int, s: int, cached: int) -> int:
    return N * 2 * batch * H * s * (cached + s) * E


def attention_softmax(batch: int, s: int, cached: int) -> int:
    """The softmax inside sdpa: each of the s queries' cached + s scores, 3 * (cached + s) - 1 flops a row."""
    return N * batch * H * s * (3 * (cached + s) - 1)


@pytest.mark.parametrize("batch,s", [(1, 16), (3, 7)])
def test_prefill_macs(llm: CausalLM, batch: int, s: int) -> None:
    cost = llm.phase("prefill", seq_len=s, batch=batch)
    ops = cost.flops.by_operator()
    assert ops["linear"] == linear_macs(batch * s) + batch * D * V  # lm_head: the prompt's last token
    assert ops["scaled_dot_product_attention"] == attention_macs(batch, s, 0) + attention_softmax(batch, s, 0)
    # SwiGLU's gate: silu(x) = x * sigmoid(x), 5 flops per element (chainer's sigmoid 4 + the multiply)
    assert ops["silu"] == 5 * N * batch * s * F
    # rotary embedding: rotate_half negates half of each of q's and k's heads
    assert ops["neg"] == N * batch * s * (H + G) * E // 2


@pytest.mark.parametrize("batch,s,cached", [(1, 1, 32), (2, 1, 100), (1, 4, 9)])
def test_decode_macs(llm: CausalLM, batch: int, s: int, cached: int) -> None:
    cost = llm.phase("decode", seq_len=s, kv_len=cached, batch=batch)
    ops = cost.flops.by_operator()
    assert ops["linear"] == linear_macs(batch * s) + batch * s * D * V
    assert ops["scaled_dot_product_attention"] == attention_macs(batch, s, cached) + attention_softmax(batch, s, cached)


def test_kv_cache_bytes(llm: CausalLM) -> None:
    cost = llm.phase("decode", kv_len=40, batch=2, hardware="h100-sxm")
    per_token = 2 * N * G * E * 2  # keys and values, bf16
    assert cost.memory.kv_cache == per_token * 41 * 2
    # attention reads the whole cache once per step; the new token's keys and values are written
    layers = cost.roofline.layers
    kv_read = sum(
        a.nbytes
        for t in cost.roofline.layers
        if t.layer.call is not None
        for a in _reads(cost, t)
        if a.tensor is not None and (a.tensor.param or "").startswith("kv_cache.")
    )
    assert layers and kv_read == per_token * 41 * 2


def _reads(cost, layer_time):  # type: ignore[no-untyped-def]
    from opcount.handles import MEMORY

    call = layer_time.layer.call
    return MEMORY.handles[call.kind](call.inputs, call.outputs).read


def test_weights_read_once_per_decode_step(llm: CausalLM) -> None:
    cost = llm.phase("decode", kv_len=8, hardware="h100-sxm")
    params = sum(p.numel() for p in llm.model.parameters())
    assert cost.memory.weights == params * 2
    # named tensors read: every weight once, but only the token's row of the embedding table, and
    # the whole cache (9 positions of keys and values, each KV head once: grouped-query attention)
    read = sum(t.layer.weight_bytes for t in cost.roofline.layers)
    kv = 2 * N * G * E * 2 * 9
    embedding = V * D * 2
    # transformers 5's rotary embedding casts its e/2 frequencies (a bf16 buffer) by the buffer's name
    # each step; 4.x reads them through a view first, an activation's read
    rotary = E // 2 * 2 if int(transformers.__version__.split(".")[0]) >= 5 else 0
    assert read == params * 2 - embedding + D * 2 + kv + rotary


def test_int4_weight_bytes() -> None:
    # [out, in] = [512, 256]: 4 bits per weight, plus a float16 scale and zero per 128 inputs
    assert weight_bytes((512, 256), "int4") == 512 * 256 / 2 + 512 * 2 * 4
    assert weight_bytes((512, 256), "int8") == 512 * 256 + 512 * 2
    assert weight_bytes((512, 256), "bfloat16") == 512 * 256 * 2
    llm = CausalLM(llama(), Precision(weight="int4"))
    linears = N * (2 * D * D + 2 * D * G * E + 3 * D * F)
    scales = (
        N * ((D + G * E + G * E + D) * math.ceil(D / 128) + (F + F) * math.ceil(D / 128) + D * math.ceil(F / 128)) * 4
    )
    other = (2 * V * D + (2 * N + 1) * D) * 2  # embedding, lm_head, norms stay in bf16
    assert llm.phase("decode", kv_len=1).memory.weights == linears / 2 + scales + other


def test_quantized_decode_is_faster_when_memory_bound() -> None:
    dense = CausalLM(llama()).phase("decode", kv_len=64, hardware="h100-sxm")
    w4 = CausalLM(llama(), Precision(weight="int4")).phase("decode", kv_len=64, hardware="h100-sxm")
    assert dense.limited_by == "memory"
    assert w4.time < dense.time
    assert w4.flops.total() == dense.flops.total()  # the arithmetic is the same


def test_generation_from_two_traces_equals_every_step(llm: CausalLM) -> None:
    prompt, steps = 12, 5
    gen = generation(llm, prompt, steps, batch=2, hardware="h100-sxm")
    each = [llm.phase("decode", kv_len=prompt + j, batch=2, hardware="h100-sxm") for j in range(steps)]
    assert gen.decode_flops == sum(c.flops.total() for c in each)
    assert gen.decode_time == pytest.approx(sum(c.time for c in each), rel=1e-12)
    assert gen.time_per_output_token == pytest.approx(gen.decode_time / steps)
    assert gen.time_to_first_token == llm.phase("prefill", seq_len=prompt, batch=2, hardware="h100-sxm").time


def test_expert_loads_spread_evenly() -> None:
    assert expert_loads(1, 2, 8) == [1, 1, 0, 0, 0, 0, 0, 0]
    assert expert_loads(5, 2, 4) == [3, 3, 2, 2]
    assert sum(expert_loads(37, 4, 60)) == 37 * 4


@pytest.mark.parametrize("batch,s", [(1, 1), (2, 8)])
def test_mixtral_expert_share(batch: int, s: int) -> None:
    experts, top_k = 4, 2
    config = transformers.MixtralConfig(**GEOMETRY, num_local_experts=experts, num_experts_per_tok=top_k)
    cost = CausalLM(config).phase("decode", seq_len=s, kv_len=16, batch=batch)
    tokens = batch * s
    moe = "model.layers.0.mlp"
    # each token through top_k SwiGLU experts: three D x F products each, and the router D x experts
    assert cost.flops.by_operator(f"{moe}.experts")["linear"] == tokens * top_k * 3 * D * F
    assert cost.flops.by_operator(f"{moe}.gate")["linear"] == tokens * D * experts
    assert cost.flops.unsupported_ops() == {}


def test_errors(llm: CausalLM) -> None:
    with pytest.raises(OpcountError, match="prefill needs seq_len"):
        llm.phase("prefill")
    with pytest.raises(OpcountError, match="unknown phase"):
        llm.phase("generate", seq_len=1)
    with pytest.raises(OpcountError, match="batch must be an integer"):
        llm.phase("decode", batch=0)
    with pytest.raises(OpcountError, match="unknown weight dtype"):
        Precision(weight="int3")
    with torch.device("cpu"):
        real = transformers.LlamaForCausalLM(llama())
    with pytest.raises(OpcountError, match="real weights"):
        CausalLM(real)


def test_the_callers_config_is_left_as_it_was() -> None:
    # transformers' from_config writes the dtype it builds in (bfloat16) into the config it is given
    config = llama()
    before = config.to_dict()  # type: ignore[attr-defined]
    llm = CausalLM(config)
    llm.phase("decode", kv_len=3, batch=2)
    assert config.to_dict() == before  # type: ignore[attr-defined]
