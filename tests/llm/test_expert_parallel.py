"""Expert parallelism under attention data parallelism (``ep = tp x dp``), against figures worked by hand:
the routes that reach a device, the distinct experts it reads, its padded expert GEMMs, its all-to-all,
redundant expert slots (EPLB), FP8 dispatch and two-batch overlap.

Expected routing spreads ``R`` routes as evenly as integers allow over ``n`` slots: ``R // n`` each, one
more on the first ``R % n``; a slot no route reaches is not read. The trace prices one replica's ``T``
tokens (``T x top_k`` routes over the ``E`` experts); under ``dp x ep`` the experts are shared by the
``dp`` replicas' tokens: ``T x dp x top_k`` routes, ``1 / ep`` of them a device, over its ``E / ep`` experts.
Expert GEMMs pad their rows to tiles of 64.

Tiny MoE: tests/llm/test_deploy.py's Mixtral (d 256, f 512, n 2 layers, top 2; bfloat16, 2 bytes),
an expert ``3 x d x f = 393,216`` weights = 786,432 bytes.

DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json): hidden 7,168, 256 routed experts of
``moe_intermediate_size`` 2,048, 8 per token, the first 3 layers dense, 61 layers. Under ``fp8-block``
an expert is 3 matrices of 7,168 x 2,048 bytes plus a float32 scale per 128 x 128 block
(56 x 16 = 896 blocks): 3 x (14,680,064 + 3,584) = 44,050,944 bytes. H200 SXM: 4.8 TB/s (datasheet).
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountError  # noqa: E402
from opcount.hardware.interconnect import Interconnect  # noqa: E402
from opcount.hardware.lookup import Hardware, hardware  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.expert_routes import Dispatch, Spread, expert_share  # noqa: E402
from opcount.llm.deploy.layout import Parallel  # noqa: E402
from opcount.llm.deploy.placement import Placement  # noqa: E402
from opcount.llm.models.catalogue import config  # noqa: E402
from opcount.llm.moe.routing import Experts  # noqa: E402
from opcount.llm.precision.dtypes import Precision  # noqa: E402
from tests.llm.test_deploy import DEVICE, D, F, N  # noqa: E402
from tests.llm.test_deploy import mixtral as mixtral_config  # noqa: E402

EXPERT = 3 * D * F * 2  # bytes of one tiny expert: 786,432
# 1e15 FLOP/s, 1e12 B/s and a link too fast to bind: the bound is the device's bytes over 1e12
INSTANT = Hardware("instant-link", DEVICE.peak, DEVICE.bandwidth, interconnect=Interconnect(1e15, 1e-9, 8))
DS_EXPERT = 3 * (7168 * 2048 + 4 * 56 * 16)  # 44,050,944 bytes
H200_BANDWIDTH = 4.8e12


def tiny(count: int) -> Experts:
    return Experts(name="experts", block="block", count=count, top_k=2, per_expert=1)


# ------------------------------------------------------------------------------------------------
# The arithmetic
# ------------------------------------------------------------------------------------------------
def test_a_device_receives_its_share_of_every_replicas_routes() -> None:
    # 8 experts, top 2, T = 2 tokens a replica. Traced: 4 routes over 8 experts, 4 hit, 1 row each (4 tiles).
    # dp 4 x ep 4: 2 x 4 x 2 = 16 routes, 4 a device over its 2 experts: 2 rows each, both hit (2 tiles).
    share = expert_share(tiny(8), 2, dp=4, ep=4)
    assert share.routes == 4 / 4  # its FLOPs, inputs and outputs: as many routes as the trace
    assert share.experts == 2 / 4  # the expert weights it reads: 2 experts where the trace read 4
    assert share.padded == 2 / 4  # its GEMMs' padded rows: 2 tiles of 64 where the trace ran 4
    assert share.dispatched == 16 / 4  # its own 2 tokens' 4 routes leave for the group
    # tp 2 x ep 2 (dp 1): the replica's 4 routes, 2 a device over its 4 experts, 2 hit
    tp = expert_share(tiny(8), 2, dp=1, ep=2)
    assert (tp.routes, tp.experts, tp.padded, tp.dispatched) == (2 / 4, 2 / 4, 2 / 4, 4 / 2)


def test_rows_are_padded_per_expert_and_slots_spread_the_routes() -> None:
    assert (Spread(130, 2).hits, Spread(130, 2).padded) == (2, 2 * 128)  # 65 rows each: two tiles each
    assert (Spread(3, 8).hits, Spread(3, 8).padded) == (3, 3 * 64)
    # 8 experts + 4 redundant slots over ep 4: 3 slots a device; 16 routes, 4 a device: loads 2, 1, 1
    assert expert_share(tiny(8), 2, dp=4, ep=4, redundant=4).experts == 3 / 4
    with pytest.raises(OpcountError, match="--ep 3: does not divide the 8 expert slots of experts"):
        expert_share(tiny(8), 2, dp=3, ep=3)


def test_identity_slots_send_and_run_only_the_real_routes() -> None:
    # LongCat-like: 4 experts beside 2 identity slots, top 3: 2 tokens make 6 picks, 6 x 4 / 6 = 4 real
    experts = Experts(name="experts", block="block", count=4, top_k=3, per_expert=1, identity=2)
    share = expert_share(experts, 2, dp=2, ep=2)  # 4 tokens: 12 picks, 8 real, 4 a device over 2 experts
    assert (share.routes, share.experts, share.dispatched) == (4 / 4, 2 / 4, 8 / 2)


def test_the_dispatch_dtype_sets_a_routes_bytes() -> None:
    # DeepSeek-V3's hidden 7,168: 14,336 bytes in bfloat16; DeepEP's FP8 dispatch 7,168 bytes and a
    # float32 scale per 128 channels, 56 x 4 = 224: 7,392 bytes
    assert Dispatch().bytes_per_route(7168, 2.0) == 14336
    assert Dispatch("fp8").bytes_per_route(7168, 2.0) == 7392
    assert Dispatch("bf16").dtype == "bfloat16" and Dispatch("FP8").dtype == "float8_e4m3fn"
    with pytest.raises(OpcountError, match="--dispatch-dtype int4: choose one of bfloat16, float16, float8_e4m3fn"):
        Dispatch("int4")


# ------------------------------------------------------------------------------------------------
# A tiny MoE deployed
# ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixtral8() -> CausalLM:
    return CausalLM(mixtral_config(8))


def test_a_device_reads_the_experts_every_replicas_routes_reach(mixtral8: CausalLM) -> None:
    # decode, B = 2: the traced replica reads 4 experts a layer; under dp 4 x ep 4 a device reads its
    # 2 (both hit by its 4 of the 16 routes), everything else as the replica (replicated weights, its own
    # cache, the experts' inputs and outputs of as many routes): 2 n experts fewer, 3,145,728 bytes
    cost = mixtral8.phase("decode", kv_len=7, batch=2, hardware=INSTANT)
    d = mixtral8.deploy(cost, Parallel(dp=4, ep=4))
    assert cost.time_bound is not None and d.time_bound is not None and d.time is not None
    assert cost.time_bound - d.time_bound == pytest.approx(N * 2 * EXPERT / 1e12, rel=1e-9)
    assert d.time_bound <= d.time
    # it holds 2 of the 8 experts a layer
    assert d.per_device.weights == pytest.approx(cost.memory.weights - N * 6 * EXPERT)


def test_the_all_to_all_carries_the_devices_routes_in_the_dispatch_dtype(mixtral8: CausalLM) -> None:
    # dp 4 x ep 4, B = 2: a device dispatches its 2 tokens' 4 routes (16 / 4), d = 256 wide, 3/4 of them
    # to other devices. bfloat16: 4 x 512 bytes, 1,536 sent each way; FP8: 4 x (256 + 2 x 4) = 1,056,
    # 792 sent, the combine still 1,536. Two layers.
    cost = mixtral8.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    plain = mixtral8.deploy(cost, Parallel(dp=4, ep=4))
    fp8 = mixtral8.deploy(cost, Parallel(dp=4, ep=4), dispatch=Dispatch("fp8"))
    assert plain.communication_bytes == N * (1536 + 1536)
    assert fp8.communication_bytes == N * (792 + 1536)
    # 4 all-to-alls of one step each at 100 GB/s and 1 us
    assert fp8.communication_time == pytest.approx(N * (792 + 1536) / 100e9 + 4e-6)
    with pytest.raises(OpcountError, match="--dispatch-dtype applies to the experts' all-to-all: give --ep"):
        mixtral8.deploy(cost, Parallel(tp=2), dispatch=Dispatch("fp8"))


def test_redundant_slots_hold_copies_and_let_ep_divide() -> None:
    # 6 experts over ep 4 do not divide; 2 redundant slots make 8, 2 a device: it holds 2 experts' weights
    # a layer, 4 fewer than the replica's 6
    moe = CausalLM(mixtral_config(6))
    cost = moe.phase("decode", kv_len=7, batch=2, hardware=INSTANT)
    with pytest.raises(OpcountError, match=r"--ep 4: does not divide the 6 expert slots .*--ep-num-redundant-experts"):
        moe.deploy(cost, Parallel(dp=4, ep=4))
    d = moe.deploy(cost, Parallel(dp=4, ep=4, redundant_experts=2))
    assert d.per_device.weights == pytest.approx(cost.memory.weights - N * 4 * EXPERT)
    assert d.parallel.label() == "ep4 x dp4 = 4 devices, 2 redundant experts"
    with pytest.raises(OpcountError, match=r"--ep-num-redundant-experts 2: .* give --ep"):
        Parallel(redundant_experts=2)


def test_two_batch_overlap_runs_two_halves_and_hides_the_all_to_all(mixtral8: CausalLM) -> None:
    # dp 2 x ep 2, B = 4 as two halves of 2: the kernels are twice a half's, so are the collectives;
    # the all-to-alls (all of this layout's collectives) run under the other half's kernels, so the step
    # is the larger of the two. The bound stays the whole batch's: no split runs faster.
    cost = mixtral8.phase("decode", kv_len=7, batch=4, hardware=DEVICE)
    half = mixtral8.phase("decode", kv_len=7, batch=2, hardware=DEVICE)
    layout = Parallel(dp=2, ep=2)
    overlapped = mixtral8.deploy(cost, layout, dispatch=Dispatch(two_batch_overlap=True))
    plain, one_half = mixtral8.deploy(cost, layout), mixtral8.deploy(half, layout)
    assert one_half.compute_time is not None and one_half.communication_time is not None
    assert overlapped.compute_time == pytest.approx(2 * one_half.compute_time)
    assert overlapped.communication_time == pytest.approx(2 * one_half.communication_time)
    assert overlapped.overlapped_time == pytest.approx(min(overlapped.compute_time, overlapped.communication_time))
    assert overlapped.time == pytest.approx(max(overlapped.compute_time, overlapped.communication_time))
    assert overlapped.time_bound == plain.time_bound
    assert overlapped.time_bound is not None and overlapped.time is not None
    assert overlapped.time_bound <= overlapped.time
    with pytest.raises(OpcountError, match="--batch 3 must be even"):
        mixtral8.deploy(
            mixtral8.phase("decode", kv_len=7, batch=3, hardware=DEVICE),
            layout,
            dispatch=Dispatch(two_batch_overlap=True),
        )


@pytest.mark.parametrize(
    "layout",
    [Parallel(dp=4, ep=4), Parallel(tp=2, dp=2, ep=4), Parallel(dp=8, ep=8), Parallel(dp=4, ep=4, redundant_experts=4)],
    ids=str,
)
@pytest.mark.parametrize("overlap", [False, True])
def test_the_estimate_is_never_below_the_bound(mixtral8: CausalLM, layout: Parallel, overlap: bool) -> None:
    for hw in (DEVICE, INSTANT):
        for cost in (
            mixtral8.phase("prefill", seq_len=32, batch=2, hardware=hw),
            mixtral8.phase("decode", kv_len=7, batch=2, hardware=hw),
            mixtral8.phase("decode", kv_len=7, batch=64, hardware=hw),
        ):
            d = mixtral8.deploy(cost, layout, dispatch=Dispatch("fp8", two_batch_overlap=overlap))
            assert d.time_bound is not None and d.time is not None
            assert 0 < d.time_bound <= d.time


# ------------------------------------------------------------------------------------------------
# DeepSeek-V3
# ------------------------------------------------------------------------------------------------
def test_deepseek_v3_dp8_ep8_device_reads_its_32_experts_and_divides_their_gemms() -> None:
    # Its first 4 layers (3 dense, 1 MoE), decode, 16 sequences a replica, 8,191 cached, fp8-block, H200.
    # The trace: 16 x 8 = 128 routes over 256 experts, 128 experts read, 1 row each (128 tiles of 64).
    # dp 8 x ep 8: 8 x 16 x 8 = 1,024 routes, 128 a device over its 32 experts: 4 rows each, all 32 read
    # (32 tiles). Everything else the device reads as the replica does, so it reads 96 experts fewer:
    # 96 x 44,050,944 bytes over 4.8 TB/s = 0.881 ms less at the bound.
    assert hardware("h200-sxm").bandwidth == H200_BANDWIDTH
    llm = CausalLM(config("deepseek-v3", num_hidden_layers=4), Precision("fp8-block"))
    cost = llm.phase("decode", kv_len=8191, batch=16, hardware="h200-sxm")
    d = llm.deploy(cost, Parallel(dp=8, ep=8))
    placement = Placement(llm, Parallel(dp=8, ep=8))
    share = placement.expert_share("model.layers.3.mlp.experts", 16)
    assert (share.routes, share.experts, share.padded) == (1.0, 32 / 128, 32 / 128)
    assert cost.time_bound is not None and d.compute_time_bound is not None
    assert cost.time_bound - d.compute_time_bound == pytest.approx(96 * DS_EXPERT / H200_BANDWIDTH, rel=1e-9)
    # The estimate: the device's expert GEMMs run 32 tiles of 64 rows, 2 x 64 x 7,168 x (4,096 + 2,048)
    # FLOPs each, 1.80e11 FLOPs at 0.8 of the bf16 989 TFLOP/s: 0.23 ms, under its 32 experts' 1.41 GB
    # at 0.9 of 4.8 TB/s, 0.33 ms: memory binds them as it binds the replica's 128 (5.64 GB, 1.31 ms), so
    # the device saves the 96 experts' bytes at the streamed bandwidth, 0.979 ms. (Undivided, its 128
    # tiles would take 0.91 ms.) The kernels also move the experts' activations, which the share weighs
    # with the weights: within 1%.
    assert cost.time is not None and d.compute_time is not None
    assert cost.time - d.compute_time == pytest.approx(96 * DS_EXPERT / (H200_BANDWIDTH * 0.9), rel=0.01)


def test_deepseek_v3_ep72_runs_with_32_redundant_experts() -> None:
    # 256 experts over 72 devices do not divide; 256 + 32 = 288 slots do, 4 a device (SGLang's EPLB example)
    llm = CausalLM(config("deepseek-v3", num_hidden_layers=4), Precision("fp8-block"))
    with pytest.raises(OpcountError, match="--ep 72: does not divide the 256 expert slots"):
        Placement(llm, Parallel(dp=72, ep=72))
    whole = Placement(llm, Parallel()).weights_per_stage()[0]
    wide = Placement(llm, Parallel(dp=72, ep=72, redundant_experts=32)).weights_per_stage()[0]
    assert whole - wide == pytest.approx((256 - 4) * DS_EXPERT)  # the MoE layer holds 4 experts of 256


@pytest.mark.slow
def test_deepseek_v3_dp8_ep8_bound_is_what_each_device_reads() -> None:
    # The whole model, as the command: decode, 16 sequences a replica, 8,191 cached, fp8-block, H200,
    # dp 8 x ep 8. What a device must read, by hand from the config:
    # - its 32 experts in each of the 58 MoE layers: 58 x 32 x 44,050,944 = 81,758,552,064 bytes;
    # - the rest in fp8-block (MLA: q_a 1,536 x 7,168, q_b 24,576 x 1,536, kv_a 576 x 7,168, kv_b
    #   32,768 x 512, o 7,168 x 16,384 = 187,105,280 a layer, 61 layers; 3 dense MLPs of 3 x 18,432 x
    #   7,168; 58 shared experts of 3 x 2,048 x 7,168): 15,156,838,400 bytes and 926,808 block scales
    #   (3,707,232 bytes); 58 routers of 256 x 7,168 in bfloat16 (212,860,928); lm_head in bfloat16
    #   (1,853,358,080): 17.23 GB, norms and the 16 embedding rows aside;
    # - its replica's latent cache: 16 x 8,192 positions x 61 layers x 576 x 2 = 9,210,691,584 bytes.
    # 108.2 GB over 4.8 TB/s: 22.5 ms (the 22.6 ms counts 17.4 GB for the rest).
    experts = 58 * 32 * DS_EXPERT
    rest = 15_156_838_400 + 3_707_232 + 212_860_928 + 1_853_358_080
    cache = 16 * 8192 * 61 * 576 * 2
    by_hand = (experts + rest + cache) / H200_BANDWIDTH
    llm = CausalLM(config("deepseek-v3"), Precision("fp8-block"))
    cost = llm.phase("decode", kv_len=8191, batch=16, hardware="h200-sxm")
    d = llm.deploy(cost, Parallel(dp=8, ep=8))
    assert d.time_bound is not None and d.time is not None
    assert by_hand <= d.time_bound <= by_hand * 1.01  # activations and norms: under 1%
    assert d.time_bound <= d.time
