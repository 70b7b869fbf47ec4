"""A deployment's two times per device: the bound (speed of light) and the estimate (kernels,
then collectives), against the phase's on one device and closed forms worked by hand.

Notation and model as tests/llm/test_deploy.py: d hidden, f MLP width, n layers, h query heads,
g KV heads, e = d/h, V vocab, B batch; bfloat16 (2 bytes). Its test device: 1e15 FLOP/s on the
tensor unit, 1e12 bytes/s, a link of 100 GB/s and 1 us a step.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountError  # noqa: E402
from opcount.hardware.interconnect import Interconnect  # noqa: E402
from opcount.hardware.lookup import Hardware  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.layout import Parallel  # noqa: E402
from opcount.llm.generation import generation  # noqa: E402
from tests.llm.test_deploy import DEVICE, NORMS, D, E, llama  # noqa: E402
from tests.llm.test_deploy import mixtral as mixtral_config  # noqa: E402

# a link so fast (1e15 B/s, 1 ns a step) that communication never binds: the bound is FLOPs or bytes
INSTANT = Hardware("instant-link", DEVICE.peak, DEVICE.bandwidth, interconnect=Interconnect(1e15, 1e-9, 8))


@pytest.fixture(scope="module")
def llm() -> CausalLM:
    return CausalLM(llama())


@pytest.fixture(scope="module")
def mixtral() -> CausalLM:
    return CausalLM(mixtral_config(4))


@pytest.mark.parametrize("kernels", ["fused", "eager"])
@pytest.mark.parametrize("phase", [("prefill", {"seq_len": 32}), ("decode", {"kv_len": 7})])
def test_one_device_has_the_phases_two_times(llm: CausalLM, kernels: str, phase: tuple[str, dict[str, int]]) -> None:
    cost = llm.phase(phase[0], batch=2, hardware=DEVICE, kernels=kernels, **phase[1])
    d = llm.deploy(cost, Parallel())
    assert d.communication_time == 0
    assert d.time == pytest.approx(cost.time, rel=1e-12)
    assert d.time_bound == pytest.approx(cost.time_bound, rel=1e-12)
    assert d.tokens_per_s == pytest.approx(cost.tokens_per_s, rel=1e-12)
    assert d.tokens_per_s_bound == pytest.approx(cost.tokens_per_s_bound, rel=1e-12)


@pytest.mark.parametrize(
    "layout",
    [Parallel(tp=2), Parallel(tp=4), Parallel(pp=2), Parallel(tp=2, pp=2), Parallel(tp=2, dp=3)],
    ids=str,
)
@pytest.mark.parametrize("hardware", [DEVICE, INSTANT], ids=["link", "instant"])
def test_the_bound_never_exceeds_the_estimate_llama(llm: CausalLM, layout: Parallel, hardware: Hardware) -> None:
    for kernels in ("fused", "eager"):
        for cost in (
            llm.phase("prefill", seq_len=32, batch=2, hardware=hardware, kernels=kernels),
            llm.phase("decode", kv_len=7, batch=2, hardware=hardware, kernels=kernels),
        ):
            d = llm.deploy(cost, layout)
            assert d.time_bound is not None and d.time is not None
            assert 0 < d.time_bound <= d.time
            assert d.time == pytest.approx(d.compute_time + d.communication_time)


@pytest.mark.parametrize("layout", [Parallel(tp=2, ep=2), Parallel(ep=2, dp=2), Parallel(tp=2, ep=4, dp=2)], ids=str)
@pytest.mark.parametrize("hardware", [DEVICE, INSTANT], ids=["link", "instant"])
def test_the_bound_never_exceeds_the_estimate_mixtral(mixtral: CausalLM, layout: Parallel, hardware: Hardware) -> None:
    for cost in (
        mixtral.phase("prefill", seq_len=32, batch=2, hardware=hardware),
        mixtral.phase("decode", kv_len=7, batch=2, hardware=hardware),
    ):
        d = mixtral.deploy(cost, layout)
        assert d.time_bound is not None and d.time is not None
        assert 0 < d.time_bound <= d.time


def test_micro_batches_keep_the_bound_below_the_estimate(llm: CausalLM) -> None:
    whole = llm.phase("decode", kv_len=7, batch=4, hardware=DEVICE)
    d = llm.deploy(whole, Parallel(pp=2, micro_batches=2))
    assert d.time_bound is not None and d.time is not None and d.time_bound <= d.time


@pytest.mark.parametrize("kernels", ["fused", "eager"])
def test_micro_batches_run_the_kernels_the_phase_asked_for(llm: CausalLM, kernels: str) -> None:
    # One stage (pp 1), M micro-batches of B / M sequences: they run one after the other through it,
    # M times one micro-batch's kernels (the bubble formula: every stage once, then M - 1 more through
    # the slowest, with one stage). One device runs a phase's own kernels (test above), so a
    # micro-batch's are the phase at batch B / M in the same mode: eager kernels give eager times.
    whole = llm.phase("prefill", seq_len=32, batch=4, hardware=DEVICE, kernels=kernels)
    micro = llm.phase("prefill", seq_len=32, batch=2, hardware=DEVICE, kernels=kernels)
    d = llm.deploy(whole, Parallel(micro_batches=2))
    assert micro.time is not None and micro.time_bound is not None
    assert d.compute_time == pytest.approx(2 * micro.time, rel=1e-12)
    assert d.compute_time_bound == pytest.approx(2 * micro.time_bound, rel=1e-12)
    other = llm.phase(
        "prefill", seq_len=32, batch=2, hardware=DEVICE, kernels="fused" if kernels == "eager" else "eager"
    )
    assert other.time is not None and d.compute_time != pytest.approx(2 * other.time, rel=1e-3)


def test_a_micro_batch_is_traced_with_the_phases_settings(llm: CausalLM) -> None:
    """Hardware, FLOP convention, preset and kernels: a micro-batch is the phase at batch / M, nothing else."""
    whole = llm.phase("decode", kv_len=7, batch=4, hardware=DEVICE, flops_per_mac=2, preset="macs", kernels="eager")
    micro = llm.micro_batch(whole, 2)
    assert (micro.phase, micro.batch, micro.seq_len, micro.kv_len) == ("decode", 2, 1, 7)
    assert (micro.flops.flops_per_mac, micro.flops.preset, micro.kernels) == (2, "macs", "eager")
    assert micro.roofline is not None and micro.roofline.hardware is DEVICE
    with pytest.raises(OpcountError, match="prices one phase, not a generation"):
        llm.deploy(generation(llm, 16, 2, batch=2, hardware=DEVICE), Parallel(pp=2, micro_batches=2))


def test_tensor_parallel_bound_is_the_devices_half_of_the_bytes(llm: CausalLM) -> None:
    # decode, B = 2, tp 2: every compulsory byte is split in 2 (the planned weights, the embedding's
    # looked-up rows, the 2 KV heads one a device, the logits' columns) except what both devices read
    # whole: the 2n + 1 norms' weights, d each, and the rotary embedding's e / 2 = 16 inverse frequencies
    # (2 bytes each, as the phase prices them): device bytes = (phase bytes - replicated) / 2 + replicated.
    # Memory binds a decode step on the test device (1e12 B/s against 1e15 FLOP/s); the link takes 11 ns.
    cost = llm.phase("decode", kv_len=7, batch=2, hardware=INSTANT)
    assert cost.schedule is not None
    norms = NORMS * D * 2 + E // 2 * 2
    device_bytes = (cost.schedule.compulsory_bytes - norms) / 2 + norms
    d = llm.deploy(cost, Parallel(tp=2))
    assert d.time_bound == pytest.approx(device_bytes / 1e12, rel=1e-12)
    # the estimate's kernels: less than the phase's, more than half of them (norms and launches stay)
    assert cost.time is not None and cost.time / 2 < d.compute_time < cost.time


def test_tensor_parallel_bound_is_the_communication_when_it_is_slower(llm: CausalLM) -> None:
    # the same step on the 100 GB/s, 1 us link: 7120 bytes sent and 11 steps (tests/llm/test_deploy.py),
    # 11.07 us, above the device's ~0.85 MB at 1e12 B/s (< 1 us): the bound is the communication
    cost = llm.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    d = llm.deploy(cost, Parallel(tp=2))
    assert d.time_bound == pytest.approx(7120 / 100e9 + 11e-6)
    assert d.time == pytest.approx(d.compute_time + d.time_bound)


def test_costs_from_the_estimate_and_the_bound(llm: CausalLM) -> None:
    # $3.60 a device-hour = $0.001 a device-second, 2 devices a replica, B = 4 tokens a step
    cost = llm.phase("decode", kv_len=7, batch=4, hardware=DEVICE)
    d = llm.deploy(cost, Parallel(tp=2), price=3.6)
    assert d.cost == {"generated": pytest.approx(2 * 0.001 * d.time / 4 * 1e6)}
    assert d.cost_bound == {"generated": pytest.approx(2 * 0.001 * d.time_bound / 4 * 1e6)}


def test_a_generation_has_both_times(llm: CausalLM) -> None:
    gen = generation(llm, 16, 4, batch=2, hardware=DEVICE)
    d = llm.deploy(gen, Parallel(tp=2), price=3.6)
    assert d.time_to_first_token_bound is not None and d.time_to_first_token is not None
    assert d.time_to_first_token_bound <= d.time_to_first_token
    assert d.time_bound is not None and d.time is not None
    assert d.time_bound <= d.time
    # a generation's names, as GenerationCost's: the prompt, then 4 decode steps at the mean step time
    assert d.time_per_output_token == d.step_time and d.step_time is not None
    assert d.time == pytest.approx(d.time_to_first_token + 4 * d.step_time)
    assert d.tokens_per_s == pytest.approx(2 / d.step_time)  # B = 2 tokens a decode step
    # the prompt's price at the prompt's time: 2 devices at $0.001 a second, B x 16 prompt tokens
    assert d.cost is not None and d.cost["prompt"] == pytest.approx(2 * 0.001 * d.time_to_first_token / 32 * 1e6)
    assert d.cost is not None and d.cost_bound is not None and set(d.cost_bound) == {"prompt", "generated"}
    assert all(d.cost_bound[k] <= d.cost[k] for k in d.cost)
