"""Fit as a serving engine sizes a device (opcount.llm.deploy.fit): the capacity it takes, a step's activations
in chunks of at most max_batched_tokens tokens, the largest batch, and a layout that fits where one device or
the layout asked does not. Closed forms on the small configs of tests/llm/test_deploy.py (Llama: d 256, f 512,
n 2, h 8, g 2, V 1000) and tests/llm/test_engine_plans.py (an MLA model of 8 heads, 2 layers); bfloat16.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountValueError  # noqa: E402
from opcount.hardware.lookup import Hardware, hardware  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.deployment import fit  # noqa: E402
from opcount.llm.deploy.fit import default_max_batched_tokens  # noqa: E402
from opcount.llm.deploy.layout import Parallel  # noqa: E402
from tests.llm.test_deploy import DEVICE, LINK, kv_bytes, llama  # noqa: E402
from tests.llm.test_engine_plans import MLA  # noqa: E402

MIB = 2**20


def sized(capacity: float, links: bool = True) -> Hardware:
    """The test device with the memory whose 0.9 (vLLM's gpu_memory_utilization) is ``capacity``."""
    return Hardware(
        "sized", DEVICE.peak, DEVICE.bandwidth, memory_bytes=capacity / 0.9, interconnect=LINK if links else None
    )


@pytest.fixture(scope="module")
def llm() -> CausalLM:
    return CausalLM(llama())


@pytest.mark.parametrize(
    ("name", "tokens"),
    [
        # vLLM V1's OpenAI server (EngineArgs.get_batch_defaults): 8192 on 70 GiB or more but an A100, else 2048
        ("h100-sxm", 8192),  # 81,559 MiB = 79.6 GiB
        ("mi300x", 8192),
        ("a100-sxm", 2048),  # 80 GiB, but an A100
        ("l40s", 2048),  # 46,068 MiB = 45 GiB
    ],
)
def test_the_token_budget_is_vllms_default_for_the_device(name: str, tokens: int) -> None:
    assert default_max_batched_tokens(hardware(name)) == tokens


def test_capacity_is_the_reported_memory_times_the_utilization(llm: CausalLM) -> None:
    cost = llm.phase("decode", kv_len=7, hardware="h100-sxm")
    assert llm.deploy(cost, Parallel(tp=2)).capacity == pytest.approx(81_559 * MIB * 0.9, rel=1e-15)
    half = llm.deploy(cost, Parallel(tp=2), gpu_memory_utilization=0.5)
    assert half.capacity == 81_559 * MIB * 0.5 and half.fit is not None and half.fit.gpu_memory_utilization == 0.5
    for bad in (0, 1.5):
        with pytest.raises(OpcountValueError, match="gpu_memory_utilization must be a fraction above 0 and up to 1"):
            llm.deploy(cost, Parallel(), gpu_memory_utilization=bad)
    with pytest.raises(OpcountValueError, match="max_batched_tokens must be a whole number of tokens from 1"):
        llm.deploy(cost, Parallel(), max_batched_tokens=0)


def test_a_long_prompt_holds_the_working_set_of_a_chunk(llm: CausalLM) -> None:
    # 4 prompts of 64 tokens: 256 tokens; the engine runs at most 64 a step, a quarter of the working set
    whole = llm.phase("prefill", seq_len=64, batch=4, hardware=DEVICE)
    chunked = llm.deploy(whole, Parallel(), max_batched_tokens=64).per_device.activations
    assert chunked == whole.memory.activations / 4
    # within the budget the traced working set is held as it is
    assert llm.deploy(whole, Parallel(), max_batched_tokens=256).per_device.activations == whole.memory.activations
    # and a chunk holds what one prompt of 64 tokens traced alone holds
    assert chunked == llm.phase("prefill", seq_len=64, batch=1, hardware=DEVICE).memory.activations


def test_the_largest_batch_when_steps_reach_the_token_budget(llm: CausalLM) -> None:
    # decode after 63 cached tokens: each sequence adds its cache k and one token's working set a; with a
    # budget of 2 tokens a step the working set stops growing at 2 sequences: w + 2a + b k <= capacity
    one = llm.deploy(llm.phase("decode", kv_len=63, hardware=DEVICE), Parallel())
    w, k, a = one.per_device.weights, one.per_device.kv_cache, one.per_device.activations
    assert k == kv_bytes(1, 64)
    device = sized(w + 2 * a + 5.5 * k)
    step = llm.phase("decode", kv_len=63, hardware=device)
    assert llm.deploy(step, Parallel(), max_batch=True, max_batched_tokens=2).max_batch == 5
    # without the budget every sequence brings its working set: (2a + 5.5k) / (a + k) sequences
    unchunked = llm.deploy(step, Parallel(), max_batch=True, max_batched_tokens=10**6).max_batch
    assert unchunked == int((2 * a + 5.5 * k) // (a + k))


def test_one_device_that_does_not_fit_names_the_tensor_parallel_layout_that_does(llm: CausalLM) -> None:
    # one device holds all the weights W; tp 2 holds the split ones halved and the norms whole (with half the
    # cache): a capacity between the two, and one device fails where tp 2 fits
    weights = ((2 * 1000 * 256 + 2 * (2 * 256 * 256 + 2 * 256 * 2 * 32 + 3 * 256 * 512)) + 5 * 256) * 2
    cost = llm.phase("decode", kv_len=7, hardware=sized(0.75 * weights))
    alone = fit(llm, cost)
    assert alone is not None and alone.fits is False and alone.per_device.weights == weights
    assert alone.layout_that_fits == Parallel(tp=2)
    assert alone.layout_per_device is not None and alone.layout_per_device <= 0.75 * weights
    assert fit(llm, cost, hardware=sized(2 * weights)).fits is True  # type: ignore[union-attr]
    assert fit(llm, llm.phase("decode", kv_len=7)) is None  # no device, no verdict


def test_a_latent_cache_whole_on_every_rank_needs_pipeline_stages() -> None:
    # MLA's latent (32) and rope key (16): 48 elements a token a layer, whole on every tensor-parallel rank:
    # 64 sequences x 1024 positions x 2 layers x 48 x 2 bytes = 12.6 MB on each of tp 2, 4 or 8 devices.
    # Two stages of tp 8 hold a layer each: 6.3 MB of cache, and well under 1 MB of weights (the split
    # weights' eighth and the latents' projections, 0.5 MB at tp 8 on both layers)
    llm = CausalLM(transformers.DeepseekV3Config(**MLA))
    cache = 64 * 1024 * 2 * 48 * 2
    cost = llm.phase("decode", kv_len=1023, batch=64, hardware=sized(10e6))
    assert cost.memory.kv_cache == cache
    verdict = fit(llm, cost)
    assert verdict is not None and verdict.fits is False
    # spread evenly the bytes would need 2 devices, but no tp holds less than the whole cache on a rank
    assert verdict.layout_that_fits == Parallel(tp=8, pp=2)
    # at 5 MB a device no layout fits: the 2 layers allow 2 stages at most
    none = fit(llm, cost, hardware=sized(5e6))
    assert none is not None and none.layout_that_fits is None and none.searched == 8 * 8  # 8 nodes of 8


def test_a_device_without_links_suggests_no_layout(llm: CausalLM) -> None:
    cost = llm.phase("decode", kv_len=7, hardware=sized(1e5, links=False))
    verdict = fit(llm, cost)
    assert verdict is not None and verdict.layout_that_fits is None
    assert verdict.reason == "sized has no interconnect figures for a layout of several"
