"""The presets of 2026 (B300, GB200 NVL72, GB300 NVL72, MI325X, MI355X) and the B200's FP4, against the
datasheets' figures typed here as printed, never read from the presets.

NVIDIA prints tensor figures per platform (8 GPUs of an HGX board, 72 of an NVL72 rack) and "with
sparsity" (2:4 doubles them, marked *): a GPU's dense peak is the figure / GPUs / 2. AMD prints dense
peaks per GPU. Sources are named in docs/hardware.md.
"""

from __future__ import annotations

import pytest

from opcount.hardware.lookup import PRESETS, hardware

T, P = 1e12, 1e15
MIB, GIB = 2**20, 2**30
SPARSE = 2

# (preset, unit, dtype, dense FLOP/s per GPU worked from the datasheet's printed figure)
PEAKS = [
    # NVIDIA HGX B200 specifications, per GPU: FP4 Tensor Core 18* PFLOPS
    ("b200", "tensor", "nvfp4", 18 * P / SPARSE),
    ("b200", "tensor", "mxfp4", 18 * P / SPARSE),
    # NVIDIA HGX B300 specifications, 8 GPUs: FP4 144* | 105 PFLOPS dense, FP8/FP6 72*, INT8 2* POPS,
    # FP16/BF16 36*, TF32 18* PFLOPS, FP32 600 TFLOPS, FP64 10 TFLOPS
    ("b300", "tensor", "nvfp4", 105 * P / 8),
    ("b300", "tensor", "float8_e4m3fn", 72 * P / 8 / SPARSE),
    ("b300", "tensor", "int8", 2 * P / 8 / SPARSE),
    ("b300", "tensor", "bfloat16", 36 * P / 8 / SPARSE),
    ("b300", "tensor", "tf32", 18 * P / 8 / SPARSE),
    ("b300", "vector", "float32", 600 * T / 8),
    ("b300", "vector", "float64", 10 * T / 8),
    # NVIDIA GB200 NVL72 specifications, 72 GPUs: FP4 1,440*, FP8/FP6 720*, INT8 720* POPS, FP16/BF16 360*,
    # TF32 180* PFLOPS; NVIDIA Blackwell datasheet, GB200 at 1,200 W: FP32 90, FP64 45 TFLOPS a GPU
    ("gb200-nvl72", "tensor", "nvfp4", 1440 * P / 72 / SPARSE),
    ("gb200-nvl72", "tensor", "float8_e4m3fn", 720 * P / 72 / SPARSE),
    ("gb200-nvl72", "tensor", "int8", 720 * P / 72 / SPARSE),
    ("gb200-nvl72", "tensor", "float16", 360 * P / 72 / SPARSE),
    ("gb200-nvl72", "tensor", "tf32", 180 * P / 72 / SPARSE),
    ("gb200-nvl72", "vector", "float32", 90 * T),
    ("gb200-nvl72", "vector", "float64", 45 * T),
    # NVIDIA GB300 NVL72 specifications, 72 GPUs: FP4 1,440* | 1,080 PFLOPS dense, FP8/FP6 720*, INT8 24* POPS,
    # FP16/BF16 360*, TF32 180* PFLOPS; FP32 80 TFLOPS a GPU (Verda's per-GPU table)
    ("gb300-nvl72", "tensor", "nvfp4", 1080 * P / 72),
    ("gb300-nvl72", "tensor", "mxfp4", 1080 * P / 72),
    ("gb300-nvl72", "tensor", "float8_e4m3fn", 720 * P / 72 / SPARSE),
    ("gb300-nvl72", "tensor", "int8", 24 * P / 72 / SPARSE),
    ("gb300-nvl72", "tensor", "bfloat16", 360 * P / 72 / SPARSE),
    ("gb300-nvl72", "tensor", "tf32", 180 * P / 72 / SPARSE),
    ("gb300-nvl72", "vector", "float32", 80 * T),
    # MI325X: the MI300X's CDNA 3 peaks (AMD's MI325X figures): FP16/BF16 1,307.4, FP8 2,614.9 (fnuz),
    # TF32 653.7, FP32 163.4 TFLOPS
    ("mi325x", "tensor", "bfloat16", 1307.4 * T),
    ("mi325x", "tensor", "float8_e4m3fnuz", 2614.9 * T),
    ("mi325x", "tensor", "tf32", 653.7 * T),
    ("mi325x", "vector", "float32", 163.4 * T),
    # MI355X: FP8 "five petaflops" (AMD at ISSCC 2026), FP4 10 PFLOPS dense (The Register, AMD's launch),
    # FP64 78.6 TFLOPS (AMD), FP16/BF16 half of FP8
    ("mi355x", "tensor", "float8_e4m3fn", 5.0 * P),
    ("mi355x", "tensor", "mxfp4", 10.0 * P),
    ("mi355x", "tensor", "bfloat16", 2.5 * P),
    ("mi355x", "vector", "float64", 78.6 * T),
]


@pytest.mark.parametrize(("name", "unit", "dtype", "peak"), PEAKS)
def test_dense_peaks_are_the_datasheets(name: str, unit: str, dtype: str, peak: float) -> None:
    # 1% covers AMD's rounding (5.03 PFLOP/s from FLOPs per clock prints as "five petaflops")
    assert PRESETS[name].peak[unit][dtype] == pytest.approx(peak, rel=0.01)


# (preset, bandwidth bytes/s, memory bytes, board power W, scale-up devices, scale-up bidirectional bytes/s,
#  scale-out Gb/s per GPU)
SYSTEMS = [
    # HGX B300: 2.3 TB HBM3e at 64 TB/s for 8 GPUs; nvidia-smi: 275,040 MiB, 1,100 W; NVLink 5 1.8 TB/s;
    # ConnectX-8 800 Gb/s a GPU
    ("b300", 64e12 / 8, 275_040 * MIB, 1100, 8, 1.8e12, 800),
    # GB200 NVL72: 576 TB/s for 72 GPUs; nvidia-smi: 189,471 MiB; 1,200 W a GPU; 72 GPUs on NVLink 5;
    # ConnectX-7 400 Gb/s a GPU
    ("gb200-nvl72", 576e12 / 72, 189_471 * MIB, 1200, 72, 1.8e12, 400),
    # GB300 NVL72: 576 TB/s for 72 GPUs; nvidia-smi: 284,208 MiB; 1,400 W a GPU; ConnectX-8 800 Gb/s
    ("gb300-nvl72", 576e12 / 72, 284_208 * MIB, 1400, 72, 1.8e12, 800),
    # MI325X: 6 TB/s, 256 GiB (ROCm GPU specifications), 1,000 W; 7 Infinity Fabric links of 128 GB/s
    ("mi325x", 6e12, 256 * GIB, 1000, 8, 7 * 128e9, 400),
    # MI355X: 8 TB/s, 288 GiB (ROCm GPU specifications), 1,400 W; 7 Infinity Fabric links of 153.6 GB/s
    ("mi355x", 8e12, 288 * GIB, 1400, 8, 7 * 153.6e9, 400),
]


@pytest.mark.parametrize(("name", "bandwidth", "memory", "power", "devices", "link", "network_gbit"), SYSTEMS)
def test_memory_links_and_power_are_the_datasheets(
    name: str, bandwidth: float, memory: float, power: float, devices: int, link: float, network_gbit: int
) -> None:
    hw = PRESETS[name]
    assert hw.bandwidth == pytest.approx(bandwidth)
    assert hw.memory_bytes == memory
    assert hw.power_w == power
    ic = hw.interconnect
    assert ic is not None
    assert ic.devices_per_node == devices
    assert ic.bandwidth == pytest.approx(link / 2)  # per direction: half the bidirectional figure
    assert ic.network_bandwidth == pytest.approx(network_gbit * 1e9 / 8)


def test_an_nvl72_rack_is_one_nvlink_domain_of_72() -> None:
    # A ring of 72 stays on NVLink (900 GB/s a direction); 73 devices leave the rack for the network.
    ic = hardware("gb200-nvl72").interconnect
    assert ic is not None
    assert ic.link(72) == (900e9, ic.latency)
    assert ic.link(73)[0] == pytest.approx(50e9)  # 400 Gb/s


def test_what_each_device_lacks() -> None:
    # Blackwell Ultra cut FP64 and INT8; CDNA 4 has no TF32 and no NVFP4; CDNA 3 no FP4 at all
    assert hardware("b300").peak_of("tensor", "float64") < hardware("b200").peak_of("tensor", "float64") / 20
    assert hardware("mi355x").peak_of("tensor", "tf32") is None
    assert hardware("mi355x").peak_of("tensor", "nvfp4") is None
    assert hardware("mi325x").peak_of("tensor", "mxfp4") is None
    assert hardware("gb300-nvl72").peak_of("vector", "float64") is None  # no published figure found


def test_opcount_hardware_lists_them() -> None:
    from opcount.cli.hardware import describe, presets_table

    table = presets_table()
    for name in ("b300", "gb200-nvl72", "gb300-nvl72", "mi325x", "mi355x"):
        assert f"| {name} " in table
    text = describe(hardware("gb300-nvl72"))
    assert "72 a node" in text and "board power 1,400 W" in text and "FP8 format float8_e4m3fn (OCP)" in text
    assert "FP8 format float8_e4m3fnuz (AMD fnuz)" in describe(hardware("mi325x"))
