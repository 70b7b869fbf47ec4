"""Deployments against closed forms worked by hand on small configs.

Notation (as tests/llm/test_llm.py): d hidden, f MLP width, n layers, h query heads, g KV heads,
e = d/h head dim, V vocab, B batch, L cached tokens; bfloat16 weights, activations and cache (2 bytes).
Per layer the weights are q and o (d*d each), k and v (d*g*e each), gate, up and down (d*f each) and
two norms (d each); the embedding and the output projection V*d each, the final norm d.
transformers' plan for Llama (LlamaConfig.base_model_tp_plan, LlamaForCausalLM._tp_plan) splits
q/k/v/gate/up column-wise, o/down row-wise (an all-reduce each), the embedding by rows (an
all-reduce) and lm_head by columns with its output gathered; the norms are replicated.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

transformers = pytest.importorskip("transformers")

from opcount.cli import main  # noqa: E402
from opcount.errors import OpcountError  # noqa: E402
from opcount.hardware.interconnect import Interconnect  # noqa: E402
from opcount.hardware.lookup import Hardware  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy import DEFAULT_GPU_MEMORY_UTILIZATION  # noqa: E402
from opcount.llm.deploy.layout import Parallel  # noqa: E402
from opcount.llm.deploy.placement import Placement  # noqa: E402
from opcount.llm.phases import PhaseRequest  # noqa: E402
from tests.llm.small_configs import small  # noqa: E402

D, F, N, H, G, V = 256, 512, 2, 8, 2, 1000
E = D // H
BYTES = 2
LAYER = 2 * D * D + 2 * D * G * E + 3 * D * F  # a layer's split weights (elements)
NORMS = 2 * N + 1  # replicated, d each
LINK = Interconnect(100e9, 1e-6, 8, 10e9, 5e-6)
DEVICE = Hardware("test-gpu", {"tensor": {"bfloat16": 1e15}, "vector": {"bfloat16": 1e14}}, 1e12, interconnect=LINK)


def llama(**extra: object) -> object:
    geometry = {"hidden_size": D, "intermediate_size": F, "num_hidden_layers": N, "num_attention_heads": H}
    return transformers.LlamaConfig(**geometry, num_key_value_heads=G, vocab_size=V, **extra)


def mixtral(experts: int) -> object:
    """The same geometry with ``experts`` experts in each layer, 2 per token."""
    geometry = {"hidden_size": D, "intermediate_size": F, "num_hidden_layers": N, "num_attention_heads": H}
    return transformers.MixtralConfig(
        **geometry, num_key_value_heads=G, vocab_size=V, num_local_experts=experts, num_experts_per_tok=2
    )


@pytest.fixture(scope="module")
def llm() -> CausalLM:
    return CausalLM(llama())


def kv_bytes(batch: int, tokens: int, heads: int = G) -> int:
    return 2 * N * heads * E * tokens * batch * BYTES


def test_tensor_parallel_splits_the_planned_weights_and_replicates_the_norms(llm: CausalLM) -> None:
    cost = llm.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    d = llm.deploy(cost, Parallel(tp=2))
    split = (2 * V * D + N * LAYER) * BYTES
    assert d.per_device.weights == split / 2 + NORMS * D * BYTES
    # 2 KV heads over 2 devices: one each, half the cache (8 positions: 7 cached + 1 new)
    assert d.per_device.kv_cache == kv_bytes(2, 8) / 2


def test_one_device_holds_the_footprint(llm: CausalLM) -> None:
    cost = llm.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    d = llm.deploy(cost, Parallel())
    assert (d.per_device.weights, d.per_device.kv_cache) == (cost.memory.weights, cost.memory.kv_cache)
    assert d.per_device.weights == ((2 * V * D + N * LAYER) + NORMS * D) * BYTES
    # one device runs the phase's kernels: the phase's two times (tests/llm/test_deploy_times.py)
    assert d.communication_bytes == 0 and d.time == pytest.approx(cost.time, rel=1e-12)
    assert d.per_device.activations == cost.memory.activations  # the same working set, the same liveness


def test_a_split_device_holds_less_of_the_working_set(llm: CausalLM) -> None:
    # a prompt of 64 tokens: the peak is inside the MLP (B*s*f wide), split in 2; the residual stream is not
    cost = llm.phase("prefill", seq_len=64, batch=2, hardware=DEVICE)
    one, two = llm.deploy(cost, Parallel()).per_device, llm.deploy(cost, Parallel(tp=2)).per_device
    assert cost.memory.activations / 2 <= two.activations < one.activations


def test_tensor_parallel_above_the_kv_heads_copies_them(llm: CausalLM) -> None:
    # tp 4 > g 2: each device holds one KV head (copied on 2 devices, as vLLM does): 1/2 of the cache, not 1/4
    cost = llm.phase("decode", kv_len=7, hardware=DEVICE)
    assert llm.deploy(cost, Parallel(tp=4)).per_device.kv_cache == kv_bytes(1, 8) / 2


def test_tensor_parallel_all_reduce_bytes_per_step(llm: CausalLM) -> None:
    # decode, B = 2, one token each: the residual stream is B*d*2 = 1024 bytes. Megatron's count:
    # 2 all-reduces a layer (after attention, after the MLP) + 1 after the vocab-parallel embedding
    # = 5, each sending 2(n-1)/n = 1 x 1024 bytes at n = 2; the logits B*V*2 = 4000 bytes gathered,
    # (n-1)/n = 1/2 sent: 5 * 1024 + 2000 = 7120 bytes.
    cost = llm.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    d = llm.deploy(cost, Parallel(tp=2))
    assert d.communication_bytes == 5 * 1024 + 2000
    # time: 7120 bytes at 100 GB/s, 5 all-reduces of 2 steps and a gather of 1, 1 us each
    assert d.communication_time == pytest.approx(7120 / 100e9 + (5 * 2 + 1) * 1e-6)
    assert d.time == pytest.approx(d.compute_time + d.communication_time)


def test_pipeline_stages_hold_their_layers(llm: CausalLM) -> None:
    # pp 2, n 2: stage 0 the embedding and layer 0, stage 1 layer 1, the final norm and lm_head;
    # the last stage holds the most (its norm): V*d + layer + 2 norms (of the layer) + 1 (final)
    cost = llm.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    d = llm.deploy(cost, Parallel(pp=2))
    assert d.per_device.weights == (V * D + LAYER + 3 * D) * BYTES
    assert d.per_device.kv_cache == kv_bytes(2, 8) / 2
    # one send of the hidden states, B*d*2 = 1024 bytes, between the stages: 1024 / 100e9 + 1 us
    assert d.communication_bytes == 1024
    assert d.communication_time == pytest.approx(1024 / 100e9 + 1e-6)


def test_micro_batches_add_the_bubble(llm: CausalLM) -> None:
    # m micro-batches through pp stages: every stage once, then m - 1 more through the slowest
    whole = llm.phase("decode", kv_len=7, batch=4, hardware=DEVICE)
    micro = llm.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    one = llm.deploy(micro, Parallel(pp=2))
    d = llm.deploy(whole, Parallel(pp=2, micro_batches=2))  # the micro-batch traced by the deployment
    assert d.compute_time > one.compute_time
    assert d.compute_time < 2 * one.compute_time  # the stages overlap: less than running twice
    with pytest.raises(OpcountError, match="--micro-batches 3: does not divide the batch of 4"):
        llm.deploy(whole, Parallel(pp=2, micro_batches=3))


def test_data_parallel_replicas_multiply_throughput_not_memory(llm: CausalLM) -> None:
    cost = llm.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    one, four = llm.deploy(cost, Parallel()), llm.deploy(cost, Parallel(dp=4))
    assert four.per_device == one.per_device
    assert four.tokens_per_s == pytest.approx(4 * one.tokens_per_s)
    assert four.parallel.devices == 4 and four.communication_bytes == 0


def test_the_largest_batch_fits_and_one_more_does_not(llm: CausalLM) -> None:
    one = llm.deploy(llm.phase("decode", kv_len=63, hardware=DEVICE), Parallel(tp=2))
    per_sequence = one.per_device.kv_cache + one.per_device.activations
    # room for 5.5 sequences beside the weights, in the share of the memory the engine takes
    memory = (one.per_device.weights + 5.5 * per_sequence) / DEFAULT_GPU_MEMORY_UTILIZATION
    sized = Hardware(
        "sized", DEVICE.peak, DEVICE.bandwidth, memory_bytes=memory, interconnect=LINK
    )  # the same device with that memory
    best = llm.deploy(llm.phase("decode", kv_len=63, hardware=sized), Parallel(tp=2), max_batch=True).max_batch
    assert best == 5
    assert llm.deploy(llm.phase("decode", kv_len=63, batch=5, hardware=sized), Parallel(tp=2)).fits is True
    six = llm.phase("decode", kv_len=63, batch=6, hardware=sized)
    too_many = llm.deploy(six, Parallel(tp=2))
    assert too_many.fits is False and too_many.fit is not None
    # the smallest layout that fits: tp 3 divides no 8 heads; tp 4 holds a quarter of the split weights and
    # the same share of the cache as tp 2 (one of the 2 KV heads, copied on 2 devices), so 6 sequences fit
    assert too_many.fit.layout_that_fits == Parallel(tp=4)
    assert too_many.fit.layout_per_device == llm.deploy(six, Parallel(tp=4)).per_device.total


def test_cost_per_million_tokens(llm: CausalLM) -> None:
    # $3.60 a device-hour = $0.001 a device-second; tp 2 x pp 1 = 2 devices a replica; B = 4 tokens a
    # decode step: 2 * 0.001 * step time / 4 per token, times 1e6
    cost = llm.phase("decode", kv_len=7, batch=4, hardware=DEVICE)
    d = llm.deploy(cost, Parallel(tp=2, dp=3), price=3.6)
    assert d.cost == {"generated": pytest.approx(2 * 0.001 * d.time / 4 * 1e6)}


def test_a_generation_prices_prompt_and_generated_tokens(llm: CausalLM) -> None:
    from opcount.llm.generation import generation

    gen = generation(llm, 16, 4, batch=2, hardware=DEVICE)
    d = llm.deploy(gen, Parallel(tp=2), price=3.6)
    assert d.cost is not None and set(d.cost) == {"prompt", "generated"}
    # the KV cache at the last step: 16 + 4 positions, half on each device
    assert d.per_device.kv_cache == kv_bytes(2, 20) / 2
    assert llm.deploy(gen).per_device.activations == gen.memory.activations  # the larger of prefill and decode


def test_a_generation_of_no_token_is_its_prefill(llm: CausalLM) -> None:
    from opcount.llm.generation import generation

    # gen_len 0: no decode step (a mean over no step divided by zero); the prompt's 2 x 16 tokens are
    # priced as the prefill alone: 2 devices x $0.001 a second x its step time / 32 tokens, x 1e6
    gen = generation(llm, 16, 0, batch=2, hardware=DEVICE)
    d = llm.deploy(gen, Parallel(tp=2), price=3.6)
    assert d.time is not None and d.cost == {"prompt": pytest.approx(2 * 0.001 * d.time / 32 * 1e6)}
    assert d.per_device.kv_cache == kv_bytes(2, 16) / 2  # the prompt's 16 positions, half on each device
    prefill = llm.deploy(gen.prefill, Parallel(tp=2), price=3.6)
    assert (d.per_device, d.step_time, d.step_time_bound, d.cost) == (
        prefill.per_device,
        prefill.time,
        prefill.time_bound,
        prefill.cost,
    )
    # a generation's names: its prompt is the whole of it, no output token
    assert d.time_to_first_token == d.time == prefill.time and d.time_bound == prefill.time_bound
    assert d.time_per_output_token is None and d.tokens_per_s is None


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (Parallel(tp=3), "--tp 3: does not divide the 8 attention heads"),
        (Parallel(tp=8, dp=1), None),  # 8 heads, 2 KV heads: each copied 4 times, allowed
        (Parallel(pp=3), "--pp 3: more pipeline stages than the 2 layers"),
        (Parallel(ep=2, tp=2), "--ep 2: LlamaConfig has no experts blocks"),
    ],
)
def test_bad_layouts_name_their_flag(llm: CausalLM, layout: Parallel, message: str | None) -> None:
    cost = llm.phase("decode", kv_len=3, hardware=DEVICE)
    if message is None:
        assert llm.deploy(cost, layout).parallel.devices == 8
        return
    with pytest.raises(OpcountError, match=message):
        llm.deploy(cost, layout)


def test_ep_must_cover_the_devices_of_a_stage() -> None:
    with pytest.raises(OpcountError, match=r"--ep 4: .* must be 1 or --tp x --dp \(2\)"):
        Parallel(tp=2, ep=4)
    with pytest.raises(OpcountError, match="--tp: expected a whole number"):
        Parallel(tp=0)


def test_a_model_without_a_tensor_parallel_plan_is_refused() -> None:
    # GPT-Neo: no plan in transformers, none in opcount (vLLM does not run it)
    neo = CausalLM(
        transformers.GPTNeoConfig(
            hidden_size=64, num_layers=2, num_heads=4, vocab_size=100, attention_types=[[["global"], 2]]
        )
    )
    cost = neo.phase("decode", kv_len=3, hardware=DEVICE)
    with pytest.raises(OpcountError, match="no tensor-parallel plan"):
        neo.deploy(cost, Parallel(tp=2))
    assert neo.deploy(cost, Parallel(pp=2)).parallel.devices == 2  # pipelines need no plan


def test_expert_parallel_spreads_the_experts() -> None:
    # Mixtral-like: X = 4 experts of gate+up (2*f*d) and down (d*f) each, top 2; router d*X replicated.
    # tp 2 = ep 2: attention split in 2, the experts 2 a device (whole), the router and norms replicated.
    X = 4
    moe = CausalLM(mixtral(X))
    cost = moe.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    d = moe.deploy(cost, Parallel(tp=2, ep=2))
    attention = 2 * D * D + 2 * D * G * E
    experts = X * 3 * D * F
    expected = ((2 * V * D + N * attention) / 2 + N * experts / 2 + N * D * X + NORMS * D) * BYTES
    assert d.per_device.weights == expected
    # the all-to-alls: each device dispatches its share of the B = 2 tokens, dp/ep = 1/2, to top 2
    # experts (2 * 1/2 * 2 = 2 token-copies of d*2 = 512 bytes = 1024 bytes), half bound for the other
    # device: 512 sent, dispatch and combine, each layer: 2 * 2 * 512; plus attention's all-reduces and
    # the embedding's (3 of 1024 bytes, 2(n-1)/n = 1) and the logits gathered (4000 / 2)
    assert d.communication_bytes == N * 2 * 512 + 3 * 1024 + 2000


def test_llama_3_8b_tensor_parallel_communication_is_megatrons() -> None:
    # meta-llama/Meta-Llama-3-8B config.json: 32 layers, hidden 4096, vocab 128256. Decode, one
    # sequence, tp 8: 2 all-reduces a layer + the embedding's = 65 of 4096 x 2 bytes, each sending
    # 2 x 7 / 8 of it; the logits 128256 x 2 bytes gathered, 7 / 8 of them sent.
    from opcount.llm.models.catalogue import config

    llm = CausalLM(config("llama-3-8b"))
    d = llm.deploy(llm.phase("decode", kv_len=16, hardware=DEVICE), Parallel(tp=8))
    assert d.communication_bytes == pytest.approx(65 * 4096 * 2 * 2 * 7 / 8 + 128256 * 2 * 7 / 8)
    # 65 all-reduces of 2 x 7 = 14 steps and a gather of 7, 1 us each, beside the bytes at 100 GB/s
    assert d.communication_time == pytest.approx(d.communication_bytes / 100e9 + (65 * 14 + 7) * 1e-6)


def test_a_plan_that_splits_no_layer_is_refused() -> None:
    # transformers 5.24's DiffLlama plan names the embedding (and lm_head) alone, and no engine plan
    # completes it (opcount.llm.deploy.engine_plans): followed, --tp 2 would replicate every attention and
    # MLP weight and report that as tensor parallelism
    config = transformers.DiffLlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=100,
    )  # fmt: skip
    llm = CausalLM(config)
    with pytest.raises(
        OpcountError, match=r"--tp 2: DiffLlamaForCausalLM's tensor-parallel plan .* splits no attention"
    ):
        llm.deploy(llm.phase("decode", kv_len=3, hardware=DEVICE), Parallel(tp=2))


def test_attention_set_per_layer_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    # Dots 3 sets its attention per layer (transformers 5's per_layer_config, which raises on reading the
    # model's num_attention_heads): its DSA and sliding layers of the small config have 128 and 64 heads
    config = small(transformers.Dots3NoteTextConfig)
    assert sorted(layer.num_attention_heads for layer in config.per_layer_config) == [64, 128]
    llm = CausalLM(config)
    for layout, flags in ((Parallel(tp=2), "--tp 2"), (Parallel(pp=2), "--pp 2"), (Parallel(), "a deployment")):
        with pytest.raises(
            OpcountError,
            match=rf"^{flags}: Dots3NoteForCausalLM's attention heads are set per layer \(Dots3NoteTextConfig"
            r"\.per_layer_config: 1 layer of 64 heads, 1 layer of 128 heads\)",
        ):
            Placement(llm, layout)
    # the command line: one line naming the model and why, exit 2 (an internal error before)
    argv = ["hf:Dots3NoteTextConfig", "--hf-config", "num_hidden_layers=2", "--phase", "decode", "--tp", "2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("opcount: error: --tp 2: Dots3NoteForCausalLM's attention heads are set per layer")
    assert len(err.strip().splitlines()) == 1


def test_a_layout_is_placed_once_and_a_phase_priced_from_one_trace_on_each_device(llm: CausalLM) -> None:
    # the placement (and its tensor-parallel plan) is the model's: the same object for every phase on a layout
    assert Placement.of(llm, Parallel(tp=2)) is Placement.of(llm, Parallel(tp=2))
    assert Placement.of(llm, Parallel(tp=2)).sharding is Placement.of(llm, Parallel(pp=2)).sharding
    # the trace reads no device: one trace priced on another device deploys as that device's own trace does
    other = Hardware("other-gpu", {"tensor": {"bfloat16": 2e15}, "vector": {"bfloat16": 1e14}}, 3e12, interconnect=LINK)
    asked = llm.check_phase(PhaseRequest(phase="decode", kv_len=7, batch=2, hardware=DEVICE))
    traced = llm.traced(asked)
    here, there = llm.priced(traced, asked), llm.priced(traced, replace(asked, hardware=other))
    assert here.flops is there.flops and here.layouts is there.layouts  # what every layout reads, shared
    for layout in (Parallel(), Parallel(tp=2), Parallel(tp=2, pp=2)):
        for cost, device in ((here, DEVICE), (there, other)):
            shared = llm.deploy(cost, layout, hardware=device)
            own = llm.deploy(llm.cost(replace(asked, hardware=device)), layout, hardware=device)
            assert (shared.time, shared.time_bound, shared.per_device) == (own.time, own.time_bound, own.per_device)
            assert shared.communication_time == own.communication_time
