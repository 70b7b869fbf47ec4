"""Step time, throughput, MFU, run time and cost, and the data-parallel collectives, against
their arithmetic worked by hand."""

from __future__ import annotations

import pytest

from opcount.errors import OpcountError
from opcount.hardware.interconnect import Interconnect
from opcount.training.step import StepTime, Throughput, gradient_sync

LINK = Interconnect(bandwidth=100e9, latency=1e-6, devices_per_node=8)


def test_throughput_mfu_time_and_cost() -> None:
    # 8 devices, 8 x 4096 tokens per 0.5 s step, 8 x 100 TFLOP of model FLOPs, 8 x 1000 TFLOP/s peak
    rate = Throughput(tokens=8 * 4096, time=0.5, devices=8, model_flops=8 * 100e12, peak=8 * 1000e12)
    assert rate.tokens_per_s == 65536  # 32768 / 0.5
    assert rate.mfu == pytest.approx(0.2)  # 800e12 / (0.5 x 8000e12)
    assert rate.time_to_train(65536 * 3600) == pytest.approx(3600)  # one hour
    assert rate.cost(65536 * 3600, 2.5) == pytest.approx(8 * 2.5)  # 8 device-hours at $2.5


def test_step_overlaps_communication() -> None:
    # the estimate: compute + recompute + the collectives' seconds the compute does not hide
    assert StepTime(0.3, 0.1, 0.2).time == pytest.approx(0.4)  # compute 0.3 + recompute 0.1 hides 0.2
    assert StepTime(0.3, 0.1, 0.2).exposed == 0
    step = StepTime(0.3, 0.0, 0.5)
    assert step.exposed == pytest.approx(0.2)  # 0.5 - 0.3
    assert step.time == pytest.approx(0.5)  # 0.3 + 0.2
    assert step.limited_by == "communication" and step.time_bound == 0.5


def test_step_bound_is_the_largest_of_its_three_terms() -> None:
    # estimate 0.3 + 0.1 = 0.4 s; bound max(FLOPs at peak 0.25, bytes at bandwidth 0.15, collectives 0.2)
    step = StepTime(0.3, 0.1, 0.2, flops_at_peak=0.25, bytes_at_bandwidth=0.15)
    assert (step.time_bound, step.limited_by) == (0.25, "compute")
    memory = StepTime(0.3, 0.1, 0.2, flops_at_peak=0.1, bytes_at_bandwidth=0.35)
    assert (memory.time_bound, memory.limited_by) == (0.35, "memory")
    # MFU and tokens/s at the bound: 8 x 4096 tokens, 100 TFLOP per device at 1000 TFLOP/s, 0.25 s
    rate = Throughput(8 * 4096, step.time, 8, 8 * 100e12, 8 * 1000e12, step.time_bound)
    assert rate.mfu == pytest.approx(0.25)  # 100e12 / (0.4 x 1000e12)
    assert rate.mfu_bound == pytest.approx(0.4)  # 100e12 / (0.25 x 1000e12)
    assert rate.tokens_per_s_bound == pytest.approx(8 * 4096 / 0.25)


def test_data_parallel_collectives() -> None:
    g = w = 16e9  # bytes of one replica's gradients and weights
    n = 8
    ring = (n - 1) / n
    zero0 = gradient_sync(g, w, 0, n, LINK)
    assert [c.kind for c in zero0] == ["all_reduce"]
    assert zero0[0].sent == pytest.approx(2 * ring * g)  # 28 GB
    assert zero0[0].time == pytest.approx(2 * ring * g / 100e9 + 2 * (n - 1) * 1e-6)
    for zero in (1, 2):  # reduce-scatter + all-gather: the all-reduce's bytes
        assert sum(c.sent for c in gradient_sync(g, w, zero, n, LINK)) == pytest.approx(2 * ring * g)
    zero3 = gradient_sync(g, w, 3, n, LINK)  # and the weights gathered for the forward and the backward
    assert [c.kind for c in zero3] == ["reduce_scatter", "all_gather", "all_gather"]
    assert sum(c.sent for c in zero3) == pytest.approx(3 * ring * g)  # 1.5 x the all-reduce, as the paper says
    assert gradient_sync(g, w, 0, 1, None) == []


def test_data_parallel_needs_an_interconnect() -> None:
    with pytest.raises(OpcountError, match="no interconnect"):
        gradient_sync(1e9, 1e9, 0, 2, None)
