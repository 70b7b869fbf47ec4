"""Llama-3-8B, Llama-3-70B and Mixtral-8x7B at their published sizes, on the meta device, against
closed forms worked by hand from their hyperparameters (slow: a 70B phase takes a second or two).

The hyperparameters are written here as published in each model's config.json on the Hugging
Face Hub (meta-llama/Meta-Llama-3-8B, meta-llama/Meta-Llama-3-70B, mistralai/Mixtral-8x7B-v0.1),
not read from opcount's catalogue, which is checked against them.

Notation as in tests/llm/test_llm.py: d hidden, f MLP width, n layers, h query heads, g KV heads,
e = d/h head dim, V vocab; s new tokens, L cached tokens, B batch. 1 multiply-add = 1 flop.
Per layer the linear layers hold ``P = 2*d*d + 2*d*g*e + 3*d*f`` weights (q and o, k and v,
SwiGLU's gate, up and down); the model adds the embedding table and the untied output projection
(``V*d`` each) and ``2n+1`` RMSNorm weight vectors of ``d``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

transformers = pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.generation import generation  # noqa: E402
from opcount.llm.models.catalogue import config  # noqa: E402
from opcount.llm.phases import PhaseCost  # noqa: E402
from opcount.llm.precision.dtypes import Precision  # noqa: E402

pytestmark = pytest.mark.slow

H100_BANDWIDTH = 3.35e12  # bytes/s: NVIDIA H100 SXM5 datasheet, HBM3
BF16 = 2
PROMPT, CONTEXT = 2048, 2048


@dataclass(frozen=True)
class Hyper:
    d: int
    f: int
    n: int
    h: int
    g: int
    V: int

    @property
    def e(self) -> int:
        return self.d // self.h

    @property
    def linear_per_layer(self) -> int:
        return 2 * self.d * self.d + 2 * self.d * self.g * self.e + 3 * self.d * self.f

    @property
    def parameters(self) -> int:
        return self.n * self.linear_per_layer + 2 * self.V * self.d + (2 * self.n + 1) * self.d

    def attention_macs(self, s: int, cached: int, batch: int = 1) -> int:
        """q x k and attention x v over every (query, key) pair, per query head."""
        return self.n * 2 * batch * self.h * self.e * s * (cached + s)

    def attention_softmax(self, s: int, cached: int, batch: int = 1) -> int:
        """The softmax inside fused attention, per query row over its cached + s scores: 3 flops
        a score less one a row (chainer-computational-cost's softmax: exp, sum, divide)."""
        return self.n * batch * self.h * s * (3 * (cached + s) - 1)

    def kv_bytes(self, tokens: int, batch: int = 1, itemsize: int = BF16) -> int:
        return 2 * self.n * self.g * self.e * tokens * batch * itemsize

    def int4_weight_bytes(self) -> float:
        """Linear weights at 4 bits, plus a float16 scale and zero-point per 128 inputs of each
        output row; embeddings, lm_head and norms in bf16."""
        d, f, ge = self.d, self.f, self.g * self.e
        rows_x_groups = (d + ge + ge + d) * math.ceil(d / 128) + 2 * f * math.ceil(d / 128) + d * math.ceil(f / 128)
        packed = self.n * self.linear_per_layer / 2
        scales = self.n * rows_x_groups * 2 * 2
        return packed + scales + (2 * self.V * self.d + (2 * self.n + 1) * self.d) * BF16


# config.json of meta-llama/Meta-Llama-3-8B and meta-llama/Meta-Llama-3-70B
LLAMA3_8B = Hyper(d=4096, f=14336, n=32, h=32, g=8, V=128256)
LLAMA3_70B = Hyper(d=8192, f=28672, n=80, h=64, g=8, V=128256)
MODELS = {"llama-3-8b": LLAMA3_8B, "llama-3-70b": LLAMA3_70B}


@pytest.fixture(scope="module", params=list(MODELS))
def case(request: pytest.FixtureRequest) -> tuple[Hyper, CausalLM, PhaseCost, PhaseCost]:
    """The model, its prefill of 2048 tokens and its decode step at 2048 cached tokens (bf16, H100 SXM)."""
    llm = CausalLM(config(request.param))
    prefill = llm.phase("prefill", seq_len=PROMPT, hardware="h100-sxm")
    decode = llm.phase("decode", kv_len=CONTEXT, hardware="h100-sxm")
    return MODELS[request.param], llm, prefill, decode


@pytest.mark.parametrize("name", list(MODELS))
def test_catalogue_matches_the_published_config(name: str) -> None:
    c, hp = config(name), MODELS[name]
    got = (c.hidden_size, c.intermediate_size, c.num_hidden_layers, c.num_attention_heads)
    assert got == (hp.d, hp.f, hp.n, hp.h)
    assert (c.num_key_value_heads, c.vocab_size, c.tie_word_embeddings) == (hp.g, hp.V, False)


def test_parameter_count(case: tuple[Hyper, CausalLM, PhaseCost, PhaseCost]) -> None:
    hp, llm, _, _ = case
    assert llm.parameters == hp.parameters
    # the model cards round these to 8.03B and 70.6B
    assert round(hp.parameters / 1e9, 2 if hp is LLAMA3_8B else 1) == (8.03 if hp is LLAMA3_8B else 70.6)


def test_prefill_macs(case: tuple[Hyper, CausalLM, PhaseCost, PhaseCost]) -> None:
    hp, _, prefill, _ = case
    ops = prefill.flops.by_operator()
    # every linear layer on every prompt token; the output projection on the last one only
    assert ops["linear"] == hp.n * hp.linear_per_layer * PROMPT + hp.d * hp.V
    assert ops["scaled_dot_product_attention"] == hp.attention_macs(PROMPT, 0) + hp.attention_softmax(PROMPT, 0)
    assert prefill.flops.unsupported_ops() == {}


def test_decode_macs(case: tuple[Hyper, CausalLM, PhaseCost, PhaseCost]) -> None:
    hp, _, _, decode = case
    ops = decode.flops.by_operator()
    assert ops["linear"] == hp.n * hp.linear_per_layer + hp.d * hp.V
    # the new token attends to the 2048 cached ones and to itself
    assert ops["scaled_dot_product_attention"] == hp.attention_macs(1, CONTEXT) + hp.attention_softmax(1, CONTEXT)


def test_kv_cache_bytes(case: tuple[Hyper, CausalLM, PhaseCost, PhaseCost]) -> None:
    hp, llm, prefill, decode = case
    assert prefill.memory.kv_cache == hp.kv_bytes(PROMPT)
    assert decode.memory.kv_cache == hp.kv_bytes(CONTEXT + 1)
    assert llm.kv_bytes(CONTEXT, batch=8) == hp.kv_bytes(CONTEXT, batch=8)
    # Llama-3-70B: 2 x 80 x 8 x 128 x 2 bytes = 320 KiB per token
    assert hp.kv_bytes(1) == (327680 if hp is LLAMA3_70B else 131072)


def test_weight_bytes_bf16(case: tuple[Hyper, CausalLM, PhaseCost, PhaseCost]) -> None:
    hp, _, prefill, decode = case
    assert prefill.memory.weights == decode.memory.weights == hp.parameters * BF16


@pytest.mark.parametrize("name", list(MODELS))
def test_weight_bytes_int4(name: str) -> None:
    hp = MODELS[name]
    llm = CausalLM(config(name), Precision(weight="int4"))
    assert llm.phase("decode", kv_len=1).memory.weights == hp.int4_weight_bytes()
    # 4.25 bits per linear weight: the scales and zero-points cost 1/16 of the packed weights here
    assert hp.int4_weight_bytes() / (hp.parameters * BF16) == pytest.approx(
        0.288 if hp is LLAMA3_70B else 0.362, abs=1e-3
    )


def decode_bytes_closed_form(hp: Hyper, weight_bytes: float, kv_tokens: int) -> float:
    """What one decode step must read: every weight once but only the token's row of the
    embedding table, and the whole cache, each KV head once."""
    return weight_bytes - hp.V * hp.d * BF16 + hp.d * BF16 + hp.kv_bytes(kv_tokens)


@pytest.mark.parametrize("weight", ["bfloat16", "int4"])
@pytest.mark.parametrize("name", list(MODELS))
def test_decode_time_is_weights_and_cache_over_bandwidth(name: str, weight: str) -> None:
    """Decode at batch 1 is memory-bound: the speed of light = bytes / 3.35 TB/s. The closed form counts the
    weights and the cache; the model also reads and writes its activations (hidden states,
    attention output, the MLP's intermediate, logits: about 0.1 GB for 70B, 0.02 GB for 8B), 0.07%
    to 0.45% more (the most for 8B in int4, the fewest bytes). The 1% tolerance covers those and
    nothing else: a weight read twice, or the cache read once per query head (8 times more for
    these models), would fail it."""
    hp = MODELS[name]
    cost = CausalLM(config(name), Precision(weight=weight)).phase("decode", kv_len=CONTEXT, hardware="h100-sxm")
    weights = hp.parameters * BF16 if weight == "bfloat16" else hp.int4_weight_bytes()
    closed = decode_bytes_closed_form(hp, weights, CONTEXT + 1) / H100_BANDWIDTH
    assert cost.limited_by == "memory"
    assert closed <= cost.time_bound <= closed * 1.01
    assert cost.time_bound <= cost.time  # the estimate never beats the bound
    # the weights and cache the roofline reads are exactly the closed form's
    # (and the rotary frequencies, head_dim / 2 values, a buffer transformers 5 reads by name each step)
    read = sum(t.layer.weight_bytes for t in cost.roofline.layers)
    assert read == decode_bytes_closed_form(hp, weights, CONTEXT + 1) + hp.d // hp.h // 2 * BF16


def test_prefill_is_compute_bound_at_2048_tokens(case: tuple[Hyper, CausalLM, PhaseCost, PhaseCost]) -> None:
    """The linear layers and attention at 2 flops per multiply-add on the bf16 tensor peak
    (989.4 TFLOP/s dense, H100 SXM5 datasheet) bound time to first token from below."""
    hp, _, prefill, _ = case
    macs = hp.n * hp.linear_per_layer * PROMPT + hp.attention_macs(PROMPT, 0)
    assert prefill.limited_by == "compute"
    assert prefill.time >= 2 * macs / 989.4e12


# config.json of mistralai/Mixtral-8x7B-v0.1: 8 experts, 2 per token
MIXTRAL = Hyper(d=4096, f=14336, n=32, h=32, g=8, V=32000)
EXPERTS, TOP_K = 8, 2


@pytest.fixture(scope="module")
def mixtral() -> CausalLM:
    return CausalLM(config("mixtral-8x7b"))


def test_mixtral_parameters(mixtral: CausalLM) -> None:
    hp = MIXTRAL
    attention = 2 * hp.d * hp.d + 2 * hp.d * hp.g * hp.e
    expert = 3 * hp.d * hp.f
    total = hp.n * (attention + EXPERTS * expert + hp.d * EXPERTS + 2 * hp.d) + 2 * hp.V * hp.d + hp.d
    assert mixtral.parameters == total
    assert round(total / 1e9, 1) == 46.7  # Mistral AI's announcement: 46.7B total parameters
    # active: the 6 experts a token skips in each layer left out; embeddings counted, as Mistral AI does
    active = total - hp.n * (EXPERTS - TOP_K) * expert
    assert mixtral.active_parameters == active
    assert round(active / 1e9, 1) == 12.9  # the announcement: 12.9B parameters per token


@pytest.mark.parametrize("batch,s,kv_len", [(1, 1, 2048), (4, 1, 512), (1, 64, 0)])
def test_mixtral_active_parameters_per_token(mixtral: CausalLM, batch: int, s: int, kv_len: int) -> None:
    """Each token runs attention, the router and top_k = 2 of the 8 experts: the linear MACs per
    token are the active parameters (12.75B with the output projection; Mistral AI quotes 12.9B,
    which also counts the embedding table)."""
    hp, tokens = MIXTRAL, batch * s
    cost = mixtral.phase("prefill" if kv_len == 0 else "decode", seq_len=s, kv_len=kv_len, batch=batch)
    experts = sum(cost.flops.by_operator(f"model.layers.{i}.mlp.experts")["linear"] for i in range(hp.n))
    router = sum(cost.flops.by_operator(f"model.layers.{i}.mlp.gate")["linear"] for i in range(hp.n))
    assert experts == tokens * TOP_K * hp.n * 3 * hp.d * hp.f
    assert router == tokens * hp.n * hp.d * EXPERTS
    attention = 2 * hp.d * hp.d + 2 * hp.d * hp.g * hp.e
    active = hp.n * (attention + TOP_K * 3 * hp.d * hp.f + hp.d * EXPERTS)
    logits = batch * hp.d * hp.V  # the last token of each prompt, or each new token
    assert cost.flops.by_operator()["linear"] == tokens * active + logits
    assert active + hp.d * hp.V == 12_748_587_008
    assert cost.flops.unsupported_ops() == {}


def test_generation_is_the_sum_of_its_steps_at_full_width() -> None:
    """Two decode traces give every step: checked against each step traced on its own, on
    Llama-3-8B's full width (two of its layers), a batch of 2, a 256-token prompt."""
    llm = CausalLM(config("llama-3-8b", num_hidden_layers=2))
    prompt, steps = 256, 6
    gen = generation(llm, prompt, steps, batch=2, hardware="h100-sxm")
    each = [llm.phase("decode", kv_len=prompt + j, batch=2, hardware="h100-sxm") for j in range(steps)]
    assert gen.decode_flops == sum(c.flops.total() for c in each)
    assert gen.decode_time == pytest.approx(sum(c.time for c in each), rel=1e-12)
    assert gen.tokens_per_s == pytest.approx(2 * steps / gen.decode_time)
