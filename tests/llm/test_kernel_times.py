"""The estimate of a phase's kernels attributed to modules and operators (opcount.llm.report.times):
a kernel's time split by hand on a tiny Llama, and the whole model's row equal to the phase's time
for dense and mixture-of-experts models, prefill and decode, fused and eager kernels."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator

import pytest

pytest.importorskip("transformers")

from transformers import DeepseekV3Config, GPT2Config, LlamaConfig, MixtralConfig

from opcount.errors import OpcountValueError
from opcount.hardware.lookup import hardware as lookup_hardware
from opcount.llm.causal_lm import CausalLM
from opcount.llm.generation import generation
from opcount.llm.report.operators import operator_rows
from opcount.llm.report.times import KernelTimes

from .small_configs import small

H, FFN, VOCAB = 64, 128, 1000
HW = lookup_hardware("h100-sxm")
BANDWIDTH = HW.bandwidth * HW.efficiency.stream  # 3.35 TB/s (datasheet) x 0.9 reached by a stream
LAUNCH = HW.efficiency.launch_s  # 2 µs per kernel


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecation notices on the cache argument
        yield


def llama(hidden: int = H, ffn: int = FFN, layers: int = 2) -> CausalLM:
    heads = hidden // 16
    config = LlamaConfig(
        hidden_size=hidden,
        intermediate_size=ffn,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2,
        vocab_size=VOCAB,
    )
    return CausalLM(config)


def mixtral() -> CausalLM:
    config = MixtralConfig(
        hidden_size=H,
        intermediate_size=FFN,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCAB,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    return CausalLM(config)


def test_a_memory_bound_kernel_splits_by_its_calls_bytes() -> None:
    """Decode, one token, bf16: the down projection's kernel runs the gate x up product (module
    ``mlp``) as its prologue, then ``down_proj``; memory binds it (a 64 x 128 weight for one token)."""
    cost = llama().phase("decode", kv_len=10, hardware=HW)
    rows = KernelTimes(cost).by_module()
    # the kernel's bytes: the SiLU'd gate and the up projection read (128 bf16 each), the weight
    # 64 x 128 x 2 bytes, the output written (64 bf16); the product stays on chip
    kernel = (2 * FFN * 2 + H * FFN * 2 + H * 2) / BANDWIDTH + LAUNCH  # 17,024 bytes
    # each call as its own kernel: the product reads two 128-element rows and writes one (768 bytes),
    # the projection reads its input and weight and writes its output (256 + 16,384 + 128 = 16,768)
    product, projection = 3 * FFN * 2, FFN * 2 + H * FFN * 2 + H * 2
    down = rows["model.layers.0.mlp.down_proj"]
    assert down.time == pytest.approx(kernel * projection / (product + projection), rel=1e-12)
    assert down.limited_by == "memory"
    # the mlp's own time is the product's part; its gate and up kernel (and the SiLU) are its children's
    children = sum(rows[f"model.layers.0.mlp.{c}"].time for c in ("gate_proj", "up_proj", "down_proj", "act_fn"))
    assert rows["model.layers.0.mlp"].time - children == pytest.approx(kernel * product / (product + projection))


def test_a_kernel_of_one_call_is_all_its_modules() -> None:
    """The output projection's kernel holds the projection alone (the views before it launch
    nothing): 64 x 64 x 2 bytes of weight, 64 bf16 read and 64 written."""
    cost = llama().phase("decode", kv_len=10, hardware=HW)
    o_proj = KernelTimes(cost).by_module()["model.layers.1.self_attn.o_proj"]
    assert o_proj.time == pytest.approx((H * H * 2 + 2 * H * 2) / BANDWIDTH + LAUNCH, rel=1e-12)


def test_a_compute_bound_kernel_splits_by_its_calls_compute() -> None:
    """A 1,024-token prompt through a 1024-wide MLP: the down projection's kernel computes. Its
    product (1 flop per element, at the vector peak) and its projection (2 per multiply-add, at the
    tensor peak) share it by those seconds: the ratio is 2 x hidden x vector peak / tensor peak."""
    hidden, ffn, tokens = 1024, 2048, 1024
    cost = llama(hidden, ffn, layers=1).phase("prefill", seq_len=tokens, hardware=HW)
    rows = KernelTimes(cost).by_module()
    down, mlp = rows["model.layers.0.mlp.down_proj"], rows["model.layers.0.mlp"]
    assert down.limited_by == "compute"
    children = sum(rows[f"model.layers.0.mlp.{c}"].time for c in ("gate_proj", "up_proj", "down_proj", "act_fn"))
    product = mlp.time - children
    tensor, vector = HW.peak_of("tensor", "bfloat16"), HW.peak_of("vector", "bfloat16")
    assert tensor is not None and vector is not None
    # (2 x tokens x hidden x ffn / tensor) / (tokens x ffn / vector)
    assert down.time / product == pytest.approx(2 * hidden * vector / tensor, rel=1e-9)


PHASES = [
    ("llama prefill", llama, {"phase": "prefill", "seq_len": 24, "batch": 2}),
    ("llama decode", llama, {"phase": "decode", "kv_len": 300, "batch": 3}),
    ("mixtral prefill", mixtral, {"phase": "prefill", "seq_len": 16}),
    ("mixtral decode", mixtral, {"phase": "decode", "kv_len": 40, "batch": 4}),
    (
        "gpt2 decode",
        lambda: CausalLM(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=VOCAB)),
        {"phase": "decode"},
    ),
    ("deepseek-v3 decode", lambda: CausalLM(small(DeepseekV3Config)), {"phase": "decode", "kv_len": 20}),
]


@pytest.mark.parametrize("mode", ["fused", "eager"])
@pytest.mark.parametrize(("name", "make", "args"), PHASES, ids=[p[0] for p in PHASES])
def test_the_whole_model_row_is_the_estimate(name: str, make: object, args: dict[str, object], mode: str) -> None:
    llm = make()  # type: ignore[operator]
    cost = llm.phase(hardware=HW, kernels=mode, **args)
    times = KernelTimes(cost)
    rows = times.by_module()
    assert rows[""].time == cost.time  # the model's row is the estimate itself
    # its parts: every call's share, every operator, the model's children and its own calls
    assert math.fsum(p.seconds for p in times.parts) == pytest.approx(cost.time, rel=1e-12)
    assert math.fsum(r.time for r in times.by_operator().values()) == pytest.approx(cost.time, rel=1e-12)
    assert math.fsum(r.time for r in times.by_module_and_operator()[""].values()) == pytest.approx(cost.time)
    top = [m for m in rows if m and "." not in m]
    own = times.by_module_and_operator()[""]
    mine = sum(r.time for op, r in own.items()) - sum(rows[m].time for m in top)
    assert mine >= -1e-12 * cost.time  # the model's own calls (the root's) take what its children do not
    # the per-operator rows of --by-operator sum to it too
    assert math.fsum(r[f"time_{mode}"] for r in operator_rows(cost)) == pytest.approx(cost.time, rel=1e-12)


def test_a_generation_table_is_its_prefill() -> None:
    gen = generation(llama(), prompt_len=12, gen_len=3, hardware=HW)
    assert KernelTimes(gen.prefill).by_module()[""].time == gen.time_to_first_token


def test_a_phase_without_hardware_is_refused() -> None:
    with pytest.raises(OpcountValueError, match="hardware"):
        KernelTimes(llama().phase("decode", kv_len=4))
