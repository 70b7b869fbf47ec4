"""Kernels as engines fuse them, and the bound: worked by hand on tiny models."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from transformers import GPT2Config, LlamaConfig, MixtralConfig

from opcount.errors import OpcountValueError
from opcount.hardware.spec import Hardware
from opcount.llm.causal_lm import CausalLM
from opcount.llm.generation import generation
from opcount.llm.kernels.estimate import ATTENTION_KINDS, attention_work
from opcount.llm.phases import PhaseCost
from opcount.llm.precision.dtypes import Precision
from opcount.roofline.bound import time_bound

H, FFN, LAYERS, HEADS, KV_HEADS, VOCAB = 64, 128, 2, 4, 2, 1000
HEAD_DIM = H // HEADS  # 16


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecation notices on the cache argument
        yield


def tiny_llama() -> CausalLM:
    return CausalLM(
        LlamaConfig(
            hidden_size=H,
            intermediate_size=FFN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            vocab_size=VOCAB,
        )
    )


def tiny_gpt2() -> CausalLM:
    return CausalLM(GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=1000, n_positions=256))


def tiny_mixtral() -> CausalLM:
    return CausalLM(
        MixtralConfig(
            hidden_size=H,
            intermediate_size=FFN,
            num_hidden_layers=LAYERS,
            num_attention_heads=HEADS,
            num_key_value_heads=KV_HEADS,
            vocab_size=VOCAB,
            num_local_experts=4,
            num_experts_per_tok=2,
        )
    )


def attention_calls(cost: PhaseCost) -> list[int]:
    return [i for i, c in enumerate(cost.flops.trace().calls) if c.kind in ATTENTION_KINDS]


def test_causal_prefill_attention_computes_the_lower_triangle() -> None:
    llm, batch, t = tiny_llama(), 2, 24
    cost = llm.phase("prefill", seq_len=t, batch=batch, hardware="h100-sxm")
    calls = cost.flops.trace().calls
    macs = sum(attention_work(calls[i], causal=True)[0] for i in attention_calls(cost))
    # per head and layer: T(T+1)/2 = 300 (query, key) pairs, each q.k and p.v over head_dim 16
    assert macs == LAYERS * batch * HEADS * (t * (t + 1) // 2) * HEAD_DIM * 2 == 2 * 2 * 4 * 300 * 32
    # the bound's FLOPs: 2 per multiply-add of every projection (one token each) and of that attention
    per_token = H * H + 2 * H * KV_HEADS * HEAD_DIM + H * H + 3 * H * FFN  # q, k and v, o, gate/up/down
    linear = LAYERS * batch * t * per_token + batch * H * VOCAB  # lm_head: the last token's logits only
    assert cost.schedules is not None
    assert cost.schedules["fused"].matmul_flops == 2 * (linear + macs)


def test_decode_attends_to_every_cached_token() -> None:
    cost = tiny_llama().phase("decode", kv_len=10, batch=3, hardware="h100-sxm")
    calls = cost.flops.trace().calls
    # one new token over 11 positions: 11 pairs per head, whatever causal says
    for i in attention_calls(cost):
        assert attention_work(calls[i], causal=True)[0] == 3 * HEADS * 11 * HEAD_DIM * 2


def test_no_score_matrix_bytes_under_fused_kernels() -> None:
    def attention_bytes(t: int) -> float:
        cost = tiny_llama().phase("prefill", seq_len=t, hardware="h100-sxm")
        assert cost.schedules is not None
        fused = cost.schedules["fused"]
        return sum(b for k, b in zip(fused.kernels, fused.bytes, strict=True) if k.kind == "attention")

    # every tensor the attention kernels move (Q, K, V, the cache, the output, rotary) grows linearly
    # with T: equal steps from T to 2T to 3T; a T x T score matrix would make the second step larger
    one, two, three = attention_bytes(128), attention_bytes(256), attention_bytes(384)
    assert three - two == pytest.approx(two - one, rel=1e-12)
    scores = HEADS * 128 * 128 * 2  # what one layer's bf16 scores alone would take at T = 128
    assert one / LAYERS < scores


def test_decode_bound_bytes_by_hand() -> None:
    llm, batch, cached = tiny_llama(), 3, 10
    cost = llm.phase("decode", kv_len=cached, batch=batch, hardware="h100-sxm")
    params = sum(p.numel() for p in llm.model.parameters())
    # bfloat16 weights read once, the embedding table only for the 3 looked-up rows
    weights = (params - VOCAB * H) * 2 + batch * H * 2
    kv_read = 2 * LAYERS * KV_HEADS * (cached + 1) * HEAD_DIM * 2 * batch  # keys and values, whole cache
    kv_written = 2 * LAYERS * KV_HEADS * 1 * HEAD_DIM * 2 * batch  # the new token's
    rotary = HEAD_DIM // 2 * 2  # the rotary inverse frequencies, a buffer of head_dim / 2 values
    io = batch * 8 + batch * VOCAB * 2  # int64 token ids in, the last token's logits out
    assert cost.schedules is not None
    assert cost.schedules["fused"].compulsory_bytes == weights + rotary + kv_read + kv_written + io


@pytest.mark.parametrize("make", [tiny_llama, tiny_gpt2, tiny_mixtral])
@pytest.mark.parametrize("hw", ["h100-sxm", "a100-sxm"])
def test_bound_below_fused_below_eager(make: object, hw: str) -> None:
    llm = make()  # type: ignore[operator]
    phases = [
        llm.phase("prefill", seq_len=32, batch=2, hardware=hw),
        llm.phase("decode", kv_len=32, batch=2, hardware=hw),
        llm.phase("decode", seq_len=4, kv_len=32, hardware=hw),
    ]
    for cost in phases:
        assert cost.schedules is not None and cost.time_bound is not None
        assert cost.time_bound <= cost.schedules["fused"].time <= cost.schedules["eager"].time
        # the eager kernels move at least the roofline's bytes per operator
        assert cost.roofline is not None
    gen = generation(llm, 16, 5, batch=2, hardware=hw)
    assert gen.time_bound is not None and gen.time is not None
    assert gen.time_bound <= gen.time
    eager = generation(llm, 16, 5, batch=2, hardware=hw, kernels="eager")
    assert eager.time is not None and gen.time <= eager.time
    assert eager.time_bound == pytest.approx(gen.time_bound, rel=1e-12)


def test_decode_sums_are_exact() -> None:
    llm, prompt, steps = tiny_llama(), 12, 4
    gen = generation(llm, prompt, steps, hardware="h100-sxm")
    each = [llm.phase("decode", kv_len=prompt + j, hardware="h100-sxm") for j in range(steps)]
    assert gen.decode_time == pytest.approx(sum(c.time or 0 for c in each), rel=1e-9)
    assert gen.decode_time_bound == pytest.approx(sum(c.time_bound or 0 for c in each), rel=1e-9)


def test_time_bound_of_plain_numbers() -> None:
    # 1e15 FLOPs at 1e15 FLOP/s: 1 s; 2e12 bytes at 1e12 bytes/s: 2 s; 3 s of communication
    assert time_bound(1e15, 1e15, 2e12, 1e12) == 2.0
    assert time_bound(1e15, 1e15, 2e12, 1e12, communication=3.0) == 3.0
    assert time_bound(4e15, 1e15, 2e12, 1e12) == 4.0
    with pytest.raises(OpcountValueError, match="bandwidth"):
        time_bound(1.0, 1.0, 1.0, 0.0)


def test_efficiency_from_a_hardware_file_and_its_ranges() -> None:
    base = {"name": "x", "peak": {"tensor": {"bfloat16": 1e15}, "vector": {"float32": 1e13}}, "bandwidth": 1e12}
    hw = Hardware.from_dict({**base, "efficiency": {"gemm": 0.5, "launch_s": 0.0}})
    assert (hw.efficiency.gemm, hw.efficiency.attention, hw.efficiency.launch_s) == (0.5, 0.6, 0.0)
    assert Hardware.from_dict(hw.to_dict()) == hw
    with pytest.raises(OpcountValueError, match=r"efficiency.stream must be a number from 0.001 to 1"):
        Hardware.from_dict({**base, "efficiency": {"stream": 1.5}})
    with pytest.raises(OpcountValueError, match="unknown efficiency keys"):
        Hardware.from_dict({**base, "efficiency": {"gemm_eff": 0.5}})


def test_an_unknown_kernels_mode_is_refused() -> None:
    with pytest.raises(OpcountValueError, match="unknown kernels 'graph'; choose fused or eager"):
        tiny_llama().phase("prefill", seq_len=4, kernels="graph")


def test_k_and_v_stream_once_per_query_tile_past_the_buffer() -> None:
    llm, t = tiny_llama(), 256
    peaks = {"tensor": {"bfloat16": 1e15}, "vector": {"bfloat16": 1e13, "float32": 1e13}}
    roomy = Hardware("roomy", peaks, bandwidth=1e12, buffer_bytes=1e9)
    tiny = Hardware("tiny", peaks, bandwidth=1e12, buffer_bytes=1024)  # less than one head's K and V

    def attention_bytes(hw: Hardware) -> float:
        cost = llm.phase("prefill", seq_len=t, hardware=hw)
        assert cost.schedules is not None
        fused = cost.schedules["fused"]
        return sum(b for k, b in zip(fused.kernels, fused.bytes, strict=True) if k.kind == "attention")

    # a prompt attends to its own keys and values: V [1, kv_heads, T, head_dim] as the projection wrote
    # it, K made in the kernel by rotary from the projection's K and the cos and sin tables [1, T,
    # head_dim]; past the buffer what K and V are read from streams once per tile of 128 queries,
    # 256 / 128 = 2 times: once more, per layer
    k_and_v = 2 * KV_HEADS * t * HEAD_DIM * 2
    cos_and_sin = 2 * t * HEAD_DIM * 2
    assert attention_bytes(tiny) - attention_bytes(roomy) == LAYERS * (k_and_v + cos_and_sin)


def test_an_fp8_cache_is_read_at_one_byte_an_element() -> None:
    # one decode step of 3 sequences after 10 cached tokens: each layer reads 11 positions of keys and
    # values and writes 1, 2 x KV_HEADS x HEAD_DIM = 64 elements a position, 1 byte each in fp8 (2 in bfloat16)
    batch, cached = 3, 10
    costs = [
        CausalLM(tiny_llama().config, precision=Precision(kv=kv)).phase(
            "decode", kv_len=cached, batch=batch, hardware="h100-sxm"
        )
        for kv in (None, "fp8")
    ]
    schedules = [c.schedules["fused"] for c in costs if c.schedules is not None]
    params = sum(p.numel() for p in tiny_llama().model.parameters())
    weights = (params - VOCAB * H) * 2 + batch * H * 2  # as test_decode_bound_bytes_by_hand
    kv_read = 2 * LAYERS * KV_HEADS * (cached + 1) * HEAD_DIM * 1 * batch  # 4,224
    kv_written = 2 * LAYERS * KV_HEADS * 1 * HEAD_DIM * 1 * batch  # 384
    rotary, io = HEAD_DIM // 2 * 2, batch * 8 + batch * VOCAB * 2
    # the bound: every byte once, the cache's at 1 byte
    assert schedules[1].compulsory_bytes == weights + rotary + kv_read + kv_written + io
    # the estimate's attention kernels (their prologue writes the new token): the cache's traffic halves
    attention = [sum(b for k, b in zip(s.kernels, s.bytes, strict=True) if k.kind == "attention") for s in schedules]
    assert attention[0] - attention[1] == kv_read + kv_written  # 4,608 bytes fewer than bfloat16's


def test_an_fp8_cache_is_sized_at_one_byte_against_the_buffer() -> None:
    # 256 new tokens after 8 cached (2 tiles of 128 queries over 264 positions): one head's keys and values
    # are 2 x 264 x HEAD_DIM = 8,448 elements, 16,896 bytes in bfloat16 (past a 12,000-byte buffer: read
    # once per query tile, twice) and 8,448 in fp8 (within it: read once)
    peaks = {"tensor": {"bfloat16": 1e15}, "vector": {"bfloat16": 1e13, "float32": 1e13}}
    roomy = Hardware("roomy", peaks, bandwidth=1e12, buffer_bytes=1e9)
    small = Hardware("small", peaks, bandwidth=1e12, buffer_bytes=12_000)

    def attention_bytes(kv: str | None, hw: Hardware) -> float:
        llm = CausalLM(tiny_llama().config, precision=Precision(kv=kv))
        cost = llm.phase("decode", seq_len=256, kv_len=8, hardware=hw)
        assert cost.schedules is not None
        fused = cost.schedules["fused"]
        return sum(b for k, b in zip(fused.kernels, fused.bytes, strict=True) if k.kind == "attention")

    # bfloat16: the cache's keys and values once more per layer, 2 x KV_HEADS x 264 x HEAD_DIM x 2 bytes
    assert attention_bytes(None, small) - attention_bytes(None, roomy) == LAYERS * 2 * KV_HEADS * 264 * HEAD_DIM * 2
    assert attention_bytes("fp8", small) == attention_bytes("fp8", roomy)


def test_experts_run_as_grouped_gemms() -> None:
    cost = tiny_mixtral().phase("decode", kv_len=8, batch=2, hardware="h100-sxm")
    assert cost.schedules is not None
    calls = cost.flops.trace().calls
    kernels = cost.schedules["fused"].kernels
    grouped = [k for k in kernels if k.kind == "grouped_gemm"]
    # per layer: the router with every expert's gate/up projection (one input read once), and every
    # expert's down projection; 2 tokens x top-2 over 4 experts: each expert runs once
    assert len(grouped) == 2 * LAYERS
    for k in grouped:
        products = [calls[i] for i in k.calls if calls[i].kind == "aten::linear"]
        assert len(products) in (1 + 4, 4)
    experts = [i for i, c in enumerate(calls) if c.kind == "aten::linear" and ".experts" in c.scope[-1]]
    assert len(experts) == LAYERS * 4 * 2
    assert all(kernels[cost.schedules["fused"].kernel_of[i]].kind == "grouped_gemm" for i in experts)


def test_one_grouping_priced_at_many_points() -> None:
    # Two matrix products reading one activation x [B, 8] (query and key projections, bfloat16):
    # one kernel reading x once. Per point (B = 1, then 3), by hand: x is 16 B bytes, each weight
    # [8, 4] 64 bytes, each output [B, 4] 8 B bytes; the second product reads x as a 12 B-byte
    # slice, so the kernel's read of x is the larger, 16 B.
    import numpy as np

    from opcount.handles.memory import Access, Traffic
    from opcount.hardware.lookup import hardware
    from opcount.ir import OpCall, TensorSpec
    from opcount.llm.kernels.estimate import CallPrices, priced
    from opcount.llm.kernels.groups import group_kernels

    x = TensorSpec((1, 8), "bfloat16", id=0)
    w1, w2 = (TensorSpec((4, 8), "bfloat16", param=f"w{i}", id=i) for i in (1, 2))
    y1, y2 = TensorSpec((1, 4), "bfloat16", id=3), TensorSpec((1, 4), "bfloat16", id=4)
    calls = [OpCall("aten::mm", (x, w1), (y1,), ("q",)), OpCall("aten::mm", (x, w2), (y2,), ("k",))]
    moved = [
        Traffic((Access(x, 16), Access(w1, 64)), (Access(y1, 8),)),
        Traffic((Access(x, 12), Access(w2, 64)), (Access(y2, 8),)),
    ]
    kernels = group_kernels(calls, moved, (y1, y2), [True, True], "fused")
    assert [(k.kind, k.calls) for k in kernels.groups] == [("gemm", (0, 1))]
    b = np.array([1.0, 3.0])
    ones = np.ones((2, 2))
    flops = np.array([2 * 8 * 4 * b, 2 * 8 * 4 * b])  # 2 x B x 8 x 4 per product
    prices = CallPrices(
        timed=ones.astype(bool), tensor_s=flops / 1e15, tensor_eff_s=flops / 5e14, vector_s=0 * ones,
        bound_s=flops / 1e15, flops=flops, passes=ones,
        reads=[np.array([16 * b, [64, 64]]), np.array([12 * b, [64, 64]])],
        writes=[np.array([8 * b]), np.array([8 * b])],
        held=[np.array([[0, 0], [64, 64], [0, 0]]), np.array([[0, 0], [64, 64], [0, 0]])],  # each weight whole: 64
    )  # fmt: skip
    schedules = priced(kernels, prices, hardware("h100-sxm"))
    for schedule, batch in zip(schedules, (1, 3), strict=True):
        # x once (its larger read), both weights, both outputs (the model returns them)
        assert schedule.bytes.tolist() == [16 * batch + 2 * 64 + 2 * 8 * batch]
        assert schedule.compulsory_bytes == 16 * batch + 2 * 64 + 2 * 8 * batch
        assert schedule.matmul_flops == 2 * 2 * 8 * 4 * batch
        assert schedule.matmul_peak == pytest.approx(1e15)  # the FLOPs over their seconds at peak
        assert schedule.tensor_eff_s.tolist() == [2 * 2 * 8 * 4 * batch / 5e14]
        assert schedule.call_io_bytes.tolist() == [16 * batch + 8 * batch, 8 * batch]  # x charged to its larger read


def test_the_bound_does_not_depend_on_the_kernels_mode() -> None:
    # a prompt long enough for compute to bind: eager kernels compute attention's whole square, but
    # the speed of light counts the causal triangle's kept pairs in both modes
    llm, tokens = tiny_llama(), 512
    cost = llm.phase("prefill", seq_len=tokens, hardware="h100-sxm")
    assert cost.schedules is not None
    fused, eager = cost.schedules["fused"], cost.schedules["eager"]
    linear = LAYERS * (H * H + 2 * H * KV_HEADS * HEAD_DIM + H * H + 3 * H * FFN)  # q, k, v, o, gate, up, down
    kept = LAYERS * HEADS * tokens * (tokens + 1) // 2 * (2 * HEAD_DIM)  # scores and values, kept pairs
    logits = VOCAB * H  # the last position's
    expected = 2 * (tokens * linear + kept + logits)
    assert fused.matmul_flops == eager.matmul_flops == expected
    assert fused.time_bound == eager.time_bound
    assert fused.limited_by == "compute"
