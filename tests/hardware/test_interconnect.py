"""Collectives against the ring algorithm's closed forms, worked by hand, and the presets' links
against their datasheets (bidirectional NVLink figures halved: NCCL's bus bandwidth per direction)."""

from __future__ import annotations

from pathlib import Path

import pytest

from opcount.errors import OpcountError
from opcount.hardware.interconnect import (
    Interconnect,
    all_gather,
    all_reduce,
    all_to_all,
    reduce_scatter,
    send_recv,
)
from opcount.hardware.lookup import PRESETS, Hardware, hardware

# 100 GB/s a direction and 1 us a step inside nodes of 8; 10 GB/s and 5 us between nodes.
LINK = Interconnect(100e9, 1e-6, 8, 10e9, 5e-6)
MB = 1e6


def test_ring_all_reduce_sends_2_n_minus_1_over_n_in_2_n_minus_1_steps() -> None:
    # n = 4: 2 * 3 / 4 = 1.5 MB sent; 1.5e6 / 100e9 = 15 us, plus 6 steps x 1 us
    c = all_reduce(MB, 4, LINK)
    assert (c.sent, c.steps) == (1.5e6, 6)
    assert c.time == pytest.approx(15e-6 + 6e-6)


def test_reduce_scatter_and_all_gather_send_n_minus_1_over_n() -> None:
    # n = 4: 3 / 4 = 0.75 MB in 3 steps: 7.5 us + 3 us
    for c in (reduce_scatter(MB, 4, LINK), all_gather(MB, 4, LINK)):
        assert (c.sent, c.steps) == (0.75e6, 3)
        assert c.time == pytest.approx(7.5e-6 + 3e-6)


def test_all_to_all_sends_what_is_bound_for_others_in_one_step() -> None:
    # n = 8: 7 / 8 of 1 MB, every pair at once: 8.75 us + 1 us
    c = all_to_all(MB, 8, LINK)
    assert c.sent == 0.875e6
    assert c.time == pytest.approx(8.75e-6 + 1e-6)


def test_one_device_communicates_nothing() -> None:
    assert all_reduce(MB, 1, LINK).time == 0 and all_reduce(MB, 1, LINK).sent == 0


def test_a_group_wider_than_a_node_runs_at_the_network() -> None:
    # n = 16 > 8: 2 * 15 / 16 = 1.875 MB at 10 GB/s = 187.5 us, 30 steps x 5 us
    assert all_reduce(MB, 16, LINK).time == pytest.approx(187.5e-6 + 150e-6)
    assert send_recv(MB, LINK, across_nodes=True).time == pytest.approx(100e-6 + 5e-6)
    assert send_recv(MB, LINK).time == pytest.approx(10e-6 + 1e-6)


def test_a_node_without_network_refuses_a_wider_group() -> None:
    alone = Interconnect(100e9, 1e-6, 8)
    with pytest.raises(OpcountError, match="16 devices spans nodes of 8"):
        all_reduce(MB, 16, alone)


@pytest.mark.parametrize(
    ("name", "bidirectional", "network_gbit", "memory"),
    [
        # memory: what the device reports (nvidia-smi's memory.total in MiB, rocm-smi's VRAM total in bytes)
        ("h100-sxm", 900e9, 400, 81_559 * 2**20),  # NVLink 4, InfiniBand NDR (ConnectX-7)
        ("h200-sxm", 900e9, 400, 143_771 * 2**20),
        ("b200", 1800e9, 400, 183_359 * 2**20),  # NVLink 5
        ("a100-sxm", 600e9, 200, 81_920 * 2**20),  # NVLink 3, InfiniBand HDR
        ("mi300x", 7 * 128e9, 400, 205_822_885_888),  # 7 Infinity Fabric links of 128 GB/s
    ],
)
def test_presets_links_are_the_datasheets(name: str, bidirectional: float, network_gbit: int, memory: int) -> None:
    hw = PRESETS[name]
    assert hw.interconnect is not None
    assert hw.interconnect.bandwidth == bidirectional / 2
    assert hw.interconnect.network_bandwidth == network_gbit * 1e9 / 8
    assert hw.interconnect.devices_per_node == 8
    assert hw.memory_bytes == memory


def test_a_hardware_file_gives_links_and_memory(tmp_path: Path) -> None:
    path = tmp_path / "npu.toml"
    path.write_text(
        'name = "npu"\nbandwidth = 1e12\nmemory_bytes = 32e9\n[peak.tensor]\nbfloat16 = 1e14\n'
        "[interconnect]\nbandwidth = 50e9\nlatency = 2e-6\ndevices_per_node = 4\n"
    )
    hw = hardware(path)
    assert hw.memory_bytes == 32e9
    assert hw.interconnect == Interconnect(50e9, 2e-6, 4)
    assert Hardware.from_dict(hw.to_dict()) == hw and Hardware.from_dict(hw.to_dict()).interconnect == hw.interconnect


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"bandwidth": 0, "latency": 1e-6, "devices_per_node": 8}, "bandwidth must be a number of bytes/s"),
        ({"bandwidth": 1e11, "latency": 10.0, "devices_per_node": 8}, "latency must be a number of s"),
        ({"bandwidth": 1e11, "latency": 1e-6, "devices_per_node": 0}, "devices_per_node must be"),
        ({"bandwidth": 1e11, "latency": 1e-6}, "lacks"),
        ({"bandwidth": 1e11, "latency": 1e-6, "devices_per_node": 8, "nvlink": 1}, "unknown interconnect keys"),
        ({"bandwidth": 1e11, "latency": 1e-6, "devices_per_node": 8, "network_bandwidth": 1e10}, "together"),
    ],
)
def test_out_of_range_links_are_refused_naming_the_field(table: dict[str, object], message: str) -> None:
    with pytest.raises(OpcountError, match=message):
        Hardware("x", {"tensor": {"bfloat16": 1e14}}, 1e12, interconnect=table)  # type: ignore[arg-type]
