"""The hardware presets: dense peaks and bandwidths from each vendor's datasheet, memory as the device reports it.

The figures and their sources are tabulated in docs/hardware.md; ``tests/hardware/test_hardware.py`` checks
the ridge points against ratios worked from the datasheets.
"""

from __future__ import annotations

from .interconnect import scale_up
from .presets_2026 import accelerators_2026
from .sparse_support import NVIDIA_2_4, SparseSupport
from .spec import TENSOR, VECTOR, Hardware, T

# Capacities as the device reports them (nvidia-smi's memory.total, rocm-smi's VRAM total), which is what an
# engine's gpu_memory_utilization takes a share of: an H100 SXM "80 GB" reports 81,559 MiB, 7% more than 80e9
# bytes. The reports are cited in docs/hardware.md.
MIB = 2**20

# NVLink 4 (H100/H200 SXM): 18 links, 900 GB/s bidirectional; HGX boards of 8 with one 400 Gb/s
# InfiniBand NDR (ConnectX-7) port per GPU. NVLink 5 (B200): 1.8 TB/s. NVLink 3 (A100 SXM): 600 GB/s,
# HDR 200 Gb/s per GPU. MI300X: 7 Infinity Fabric links of 128 GB/s bidirectional to its 7 peers.
_NVLINK4 = scale_up(900e9, 8, 400, "NVLink 4 + NVSwitch, 8 GPUs a node; InfiniBand NDR 400 Gb/s per GPU")
_NVLINK5 = scale_up(1800e9, 8, 400, "NVLink 5 + NVSwitch, 8 GPUs a node; 400 Gb/s per GPU (ConnectX-7)")
_NVLINK3 = scale_up(600e9, 8, 200, "NVLink 3 + NVSwitch, 8 GPUs a node; InfiniBand HDR 200 Gb/s per GPU")
_INFINITY_FABRIC = scale_up(
    7 * 128e9, 8, 400, "Infinity Fabric, 7 links to 7 peers, 8 GPUs a node; 400 Gb/s RoCE per GPU"
)
# Block-scaled FP4 on Blackwell's tensor cores: NVFP4 and MXFP4 at one rate (NVIDIA HGX B200 specifications).
_B200_FP4 = 9e15

# ----- presets (dense peaks; sources in docs/hardware.md) ---------------------------------------
_H100_SXM_PEAK = {
    VECTOR: {"float64": 33.5 * T, "float32": 66.9 * T, "float16": 133.8 * T, "bfloat16": 133.8 * T},
    TENSOR: {
        "float64": 66.9 * T,
        "tf32": 494.7 * T,
        "float16": 989.4 * T,
        "bfloat16": 989.4 * T,
        "float8_e4m3fn": 1978.9 * T,
        "float8_e5m2": 1978.9 * T,
        "int8": 1978.9 * T,
    },
}
_A100_PEAK = {  # the A100's peaks do not depend on memory (40 / 80 GB) or form factor (SXM4 / PCIe)
    VECTOR: {"float64": 9.7 * T, "float32": 19.5 * T, "float16": 78 * T, "bfloat16": 39 * T},
    TENSOR: {"float64": 19.5 * T, "tf32": 156 * T, "float16": 312 * T, "bfloat16": 312 * T, "int8": 624 * T},
}


def _xeon_8480_2s() -> Hardware:
    # Intel publishes no FLOP/s for this part: cores x FLOP/cycle x base clock (AVX-512 and AMX
    # run near base under sustained load). Per core and cycle: AVX-512 2 FMA ports x 16 fp32 = 64
    # FLOP (fp64 32, AVX512-FP16 / -BF16 128); AMX 1024 bf16 FLOP, 2048 int8 ops.
    cores, clock = 2 * 56, 2.0e9
    per_cycle = cores * clock
    return Hardware(
        "xeon-8480-2s",
        {
            VECTOR: {
                "float64": 32 * per_cycle,
                "float32": 64 * per_cycle,
                "float16": 128 * per_cycle,
                "bfloat16": 128 * per_cycle,
            },
            TENSOR: {"bfloat16": 1024 * per_cycle, "int8": 2048 * per_cycle},
        },
        bandwidth=2 * 8 * 4800e6 * 8,  # 2 sockets x 8 DDR5-4800 channels x 8 bytes
        buffer_bytes=2 * 105 * 2**20,
        clock_hz=clock,
        description="2 x Intel Xeon Platinum 8480+ (Sapphire Rapids, 2 x 56 cores, AVX-512 + AMX, 16 x DDR5-4800)",
    )


def _nvdla_full() -> Hardware:
    # AMAIX: CONV_CORE peak = Tk * Tc * clock multiply-adds with Tk = 16, Tc = 64 for
    # fp16 (int8 doubles Tk); the SDP handles 16 elements per cycle (nv_full.spec, SDP_*_THROUGHPUT_16);
    # 512-bit AXI at 1 GHz = 64 GB/s; 512 KiB convolution buffer.
    clock = 1e9
    return Hardware(
        "nvdla-full",
        {
            TENSOR: {"float16": 2 * 16 * 64 * clock, "int8": 2 * 32 * 64 * clock},
            VECTOR: {"float16": 16 * clock, "int8": 16 * clock},
        },
        bandwidth=64e9,
        buffer_bytes=512 * 1024,
        clock_hz=clock,
        description="NVDLA full configuration at 1 GHz: 16 x 64 fp16 MAC array, SDP 16/cycle, 64 GB/s (AMAIX)",
    )


def _current_accelerators() -> tuple[Hardware, ...]:
    """H200, B200, MI300X, A10G, L40S and A100 PCIe 40 GB: dense peaks, sources in docs/hardware.md."""
    # H200: the same GH100 chip and clocks as the H100 SXM; its datasheet repeats the H100 SXM
    # figures and only the memory differs (141 GB HBM3e, 4.8 TB/s).
    h100 = {unit: dict(table) for unit, table in _H100_SXM_PEAK.items()}
    # AMD ROCm documentation, "AMD Instinct MI300 series microarchitecture": FLOPS/clock/CU x 304 CUs
    # x 2.1 GHz. FP8 on CDNA 3 is the fnuz variant; no vector fp16 figure is given (runs at fp32's).
    mi300x_clock = 2.1e9
    return (
        Hardware(
            "h200-sxm",
            h100,
            bandwidth=4.8e12,
            buffer_bytes=50 * 2**20,
            clock_hz=1.98e9,
            description="NVIDIA H200 SXM 141 GB (HBM3e)",
            memory_bytes=143_771 * MIB,  # nvidia-smi on an H200 SXM
            interconnect=_NVLINK4,
            sparse=NVIDIA_2_4,
            power_w=700,
        ),
        Hardware(
            "b200",
            {
                VECTOR: {"float64": 37 * T, "float32": 75 * T},
                TENSOR: {
                    "float64": 37 * T,
                    "tf32": 1.1e15,
                    "float16": 2.25e15,
                    "bfloat16": 2.25e15,
                    "float8_e4m3fn": 4.5e15,
                    "float8_e5m2": 4.5e15,
                    "int8": 4.5e15,
                    "nvfp4": _B200_FP4,
                    "mxfp4": _B200_FP4,
                },
            },
            bandwidth=7.7e12,
            description="NVIDIA B200 (HGX B200, 180 GB HBM3e); FP8 OCP e4m3fn, FP4 nvfp4 / mxfp4",
            memory_bytes=183_359 * MIB,  # nvidia-smi on a B200
            interconnect=_NVLINK5,
            sparse=NVIDIA_2_4,
            power_w=1000,
        ),
        Hardware(
            "mi300x",
            {
                VECTOR: {"float64": 128 * 304 * mi300x_clock, "float32": 256 * 304 * mi300x_clock},
                TENSOR: {
                    "float64": 256 * 304 * mi300x_clock,
                    "float32": 256 * 304 * mi300x_clock,
                    "tf32": 1024 * 304 * mi300x_clock,
                    "float16": 2048 * 304 * mi300x_clock,
                    "bfloat16": 2048 * 304 * mi300x_clock,
                    "float8_e4m3fnuz": 4096 * 304 * mi300x_clock,
                    "float8_e5m2fnuz": 4096 * 304 * mi300x_clock,
                    "int8": 4096 * 304 * mi300x_clock,
                },
            },
            bandwidth=5.3e12,
            buffer_bytes=256 * 2**20,
            clock_hz=mi300x_clock,
            description="AMD Instinct MI300X 192 GB (HBM3); FP8 fnuz (e4m3fnuz)",
            memory_bytes=205_822_885_888,  # rocm-smi --showmeminfo vram on an MI300X: 196,288 MiB
            interconnect=_INFINITY_FABRIC,
            power_w=750,
            # CDNA 3 (AMD Instinct MI300X data sheet): 2:4 in fp16, bf16, fp8 and int8, not tf32/fp32/fp64
            sparse=SparseSupport(
                nm=((2, 4),),
                nm_precisions=frozenset({"float16", "bfloat16", "int8", "float8_e4m3fnuz", "float8_e5m2fnuz"}),
            ),
        ),
        Hardware(
            "a10g",
            # The NVIDIA A10 datasheet's figures: AWS's A10G has the same 24 GB / 600 GB/s but lower
            # tensor-core peaks that NVIDIA does not publish, so the tensor figures are an upper bound.
            {
                VECTOR: {"float32": 31.2 * T, "float16": 31.2 * T, "bfloat16": 31.2 * T},
                TENSOR: {"tf32": 62.5 * T, "float16": 125 * T, "bfloat16": 125 * T, "int8": 250 * T},
            },
            bandwidth=600e9,
            description="NVIDIA A10G 24 GB (GDDR6), A10 datasheet figures",
            memory_bytes=23_028 * MIB,  # nvidia-smi on an A10G
            sparse=NVIDIA_2_4,
        ),
        Hardware(
            "l40s",
            {
                VECTOR: {"float32": 91.6 * T, "float16": 91.6 * T, "bfloat16": 91.6 * T},
                TENSOR: {
                    "tf32": 183 * T,
                    "float16": 362.05 * T,
                    "bfloat16": 362.05 * T,
                    "float8_e4m3fn": 733 * T,
                    "float8_e5m2": 733 * T,
                    "int8": 733 * T,
                },
            },
            bandwidth=864e9,
            description="NVIDIA L40S 48 GB (GDDR6)",
            memory_bytes=46_068 * MIB,  # nvidia-smi on an L40S
            sparse=NVIDIA_2_4,
        ),
        Hardware(
            "a100-pcie-40gb",
            {unit: dict(table) for unit, table in _A100_PEAK.items()},
            bandwidth=1.555e12,
            buffer_bytes=40 * 2**20,
            clock_hz=1.41e9,
            description="NVIDIA A100 PCIe 40 GB (HBM2)",
            memory_bytes=40_960 * MIB,  # nvidia-smi on an A100 PCIe 40 GB
            sparse=NVIDIA_2_4,
        ),
    )


PRESETS: dict[str, Hardware] = {
    hw.name: hw
    for hw in (
        Hardware(
            "h100-sxm",
            _H100_SXM_PEAK,
            bandwidth=3.35e12,
            buffer_bytes=50 * 2**20,
            clock_hz=1.98e9,
            description="NVIDIA H100 SXM5 80 GB (HBM3)",
            memory_bytes=81_559 * MIB,  # nvidia-smi on an H100 SXM
            interconnect=_NVLINK4,
            sparse=NVIDIA_2_4,
            power_w=700,
        ),
        Hardware(
            "h100-pcie",
            {
                VECTOR: {"float64": 25.6 * T, "float32": 51.2 * T, "float16": 102.4 * T, "bfloat16": 102.4 * T},
                TENSOR: {
                    "float64": 51.2 * T,
                    "tf32": 378 * T,
                    "float16": 756.5 * T,
                    "bfloat16": 756.5 * T,
                    "float8_e4m3fn": 1513 * T,
                    "float8_e5m2": 1513 * T,
                    "int8": 1513 * T,
                },
            },
            bandwidth=2.0e12,
            buffer_bytes=50 * 2**20,
            clock_hz=1.755e9,
            description="NVIDIA H100 PCIe 80 GB (HBM2e)",
            memory_bytes=81_559 * MIB,  # nvidia-smi on an H100 PCIe
            sparse=NVIDIA_2_4,
        ),
        Hardware(
            "a100-sxm",
            _A100_PEAK,
            bandwidth=2.039e12,
            buffer_bytes=40 * 2**20,
            clock_hz=1.41e9,
            description="NVIDIA A100 SXM4 80 GB (HBM2e)",
            memory_bytes=81_920 * MIB,  # nvidia-smi on an A100 SXM4 80 GB
            interconnect=_NVLINK3,
            sparse=NVIDIA_2_4,
        ),
        Hardware(
            "l4",
            {
                VECTOR: {"float32": 30.3 * T, "float16": 30.3 * T, "bfloat16": 30.3 * T},
                TENSOR: {
                    "tf32": 60 * T,
                    "float16": 121 * T,
                    "bfloat16": 121 * T,
                    "float8_e4m3fn": 242.5 * T,
                    "float8_e5m2": 242.5 * T,
                    "int8": 242.5 * T,
                },
            },
            bandwidth=300e9,
            buffer_bytes=48 * 2**20,
            clock_hz=2.04e9,
            description="NVIDIA L4 24 GB (GDDR6)",
            memory_bytes=23_034 * MIB,  # nvidia-smi on an L4
            sparse=NVIDIA_2_4,
        ),
        Hardware(
            "t4",
            {
                VECTOR: {"float32": 8.1 * T, "float16": 16.2 * T},
                TENSOR: {"float16": 65 * T, "int8": 130 * T},
            },
            bandwidth=320e9,
            buffer_bytes=4 * 2**20,
            clock_hz=1.59e9,
            description="NVIDIA T4 16 GB (GDDR6); Turing: no bf16, no TF32",
            memory_bytes=15_360 * MIB,  # nvidia-smi on a T4
        ),
        Hardware(
            "rtx-4090",
            {
                VECTOR: {"float32": 82.6 * T, "float16": 82.6 * T, "bfloat16": 82.6 * T},
                # fp32 accumulation, as PyTorch's fp16/bf16 matmuls use (fp16 accumulation: 330.3)
                TENSOR: {
                    "tf32": 82.6 * T,
                    "float16": 165.2 * T,
                    "bfloat16": 165.2 * T,
                    "float8_e4m3fn": 330.3 * T,
                    "float8_e5m2": 330.3 * T,
                    "int8": 660.6 * T,
                },
            },
            bandwidth=1008e9,
            buffer_bytes=72 * 2**20,
            clock_hz=2.52e9,
            description="NVIDIA GeForce RTX 4090 24 GB (GDDR6X)",
            memory_bytes=24_564 * MIB,  # nvidia-smi on an RTX 4090
            sparse=NVIDIA_2_4,
        ),
        _xeon_8480_2s(),
        *_current_accelerators(),
        *accelerators_2026(),
        Hardware(
            "m2-max",
            # 38-core GPU: 38 cores x 128 ALUs x 2 x 1.398 GHz; fp16 at the fp32 rate. The 15.8 TOPS
            # Neural Engine is left out: PyTorch (MPS) does not run on it.
            {VECTOR: {"float32": 13.6 * T, "float16": 13.6 * T}},
            bandwidth=400e9,
            clock_hz=1.398e9,
            description="Apple M2 Max, 38-core GPU, 400 GB/s unified memory (GPU only)",
        ),
        _nvdla_full(),
    )
}
