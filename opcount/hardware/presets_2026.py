"""The presets of the GPUs serving LLMs in 2026: B300, GB200 NVL72, GB300 NVL72, MI325X and MI355X.

Peaks are dense, per GPU, 2 FLOPs per multiply-add. NVIDIA quotes its tensor figures per platform
(8 GPUs of an HGX board, 72 of an NVL72 rack) and "with sparsity" (2:4 doubles them): each figure is
written below as the datasheet prints it, divided by the GPUs and halved, so that the code shows the
arithmetic. AMD's peaks are FLOPs per clock per compute unit times the compute units times the peak
clock, as AMD derives them. Memory is what the device reports where a stored report was found
(``nvidia-smi``'s ``memory.total``, less than the datasheet's HBM: the driver keeps some), else the
ROCm table's GiB. Every figure's source is in docs/hardware.md, and the figures are checked against
the datasheets' numbers in tests/hardware/test_presets_2026.py.
"""

from __future__ import annotations

from .interconnect import scale_up
from .sparse_support import NVIDIA_2_4, SparseSupport
from .spec import TENSOR, VECTOR, Hardware

MIB, GIB = 2**20, 2**30
# NVLink 5 (Blackwell, Blackwell Ultra): 18 links, 1.8 TB/s bidirectional per GPU, inside an HGX board of 8
# or across an NVL72 rack of 72 (NVLink Switch trays). Scale-out: one NIC per GPU, ConnectX-7 at 400 Gb/s
# (GB200 NVL72) or ConnectX-8 at 800 Gb/s (B300, GB300 NVL72).
_HGX_B300 = scale_up(1.8e12, 8, 800, "NVLink 5 + NVSwitch, 8 GPUs a node; 800 Gb/s per GPU (ConnectX-8)")
_NVL72_GB200 = scale_up(1.8e12, 72, 400, "NVLink 5, 72 GPUs in one NVLink domain (NVL72); 400 Gb/s per GPU")
_NVL72_GB300 = scale_up(1.8e12, 72, 800, "NVLink 5, 72 GPUs in one NVLink domain (NVL72); 800 Gb/s per GPU")
# AMD Instinct platforms: 8 GPUs, each with 7 Infinity Fabric links, one to each peer; 128 GB/s a link on
# CDNA 3 (MI325X), 153.6 GB/s on CDNA 4 (MI355X); a 400 Gb/s NIC per GPU between nodes.
_IF_CDNA3 = scale_up(7 * 128e9, 8, 400, "Infinity Fabric, 7 links to 7 peers, 8 GPUs a node; 400 Gb/s per GPU")
_IF_CDNA4 = scale_up(7 * 153.6e9, 8, 400, "Infinity Fabric 4, 7 links to 7 peers, 8 GPUs a node; 400 Gb/s per GPU")


def _dense(figure: float, gpus: int) -> float:
    """A platform's tensor figure "with sparsity" as one GPU's dense peak."""
    return figure / gpus / 2


Peaks = dict[str, dict[str, float]]


def _blackwell(sparse: dict[str, float], gpus: int, fp4_dense: float, vector: dict[str, float]) -> Peaks:
    """A Blackwell peak table from a platform's sparse tensor figures, its dense FP4 and per-GPU vector rates."""
    tensor = {dtype: _dense(figure, gpus) for dtype, figure in sparse.items()}
    tensor["float8_e5m2"] = tensor["float8_e4m3fn"]
    tensor["bfloat16"] = tensor["float16"]
    tensor["nvfp4"] = tensor["mxfp4"] = fp4_dense / gpus  # one rate for both FP4 formats
    if "float64" in vector:
        tensor["float64"] = vector["float64"]  # FP64 and "FP64 Tensor Core" are one figure
    return {VECTOR: dict(vector), TENSOR: tensor}


def _b300() -> Hardware:
    # NVIDIA HGX B300 specifications, 8 GPUs: FP4 144 | 105 PFLOPS (sparse | dense), FP8/FP6 72*,
    # INT8 2* POPS, FP16/BF16 36*, TF32 18* PFLOPS; FP32 600, FP64 10 TFLOPS; 2.3 TB HBM3e, 64 TB/s.
    gpus = 8
    peak = _blackwell(
        {"float8_e4m3fn": 72e15, "int8": 2e15, "float16": 36e15, "tf32": 18e15},
        gpus,
        fp4_dense=105e15,
        vector={"float32": 600e12 / gpus, "float64": 10e12 / gpus},
    )
    return Hardware(
        "b300",
        peak,
        bandwidth=64e12 / gpus,
        description="NVIDIA B300 (HGX B300, Blackwell Ultra, 288 GB HBM3e); FP8 OCP e4m3fn, FP4 nvfp4 / mxfp4",
        memory_bytes=275_040 * MIB,  # nvidia-smi on a B300 SXM6 AC
        interconnect=_HGX_B300,
        sparse=NVIDIA_2_4,
        power_w=1100,
    )


def _gb200_nvl72() -> Hardware:
    # NVIDIA GB200 NVL72 specifications, 72 GPUs: FP4 1,440*, FP8/FP6 720*, INT8 720* POPS, FP16/BF16 360*,
    # TF32 180* PFLOPS; 13.4 TB HBM3e at 576 TB/s; NVLink 130 TB/s (1.8 TB/s a GPU). FP32 and FP64: NVIDIA's
    # Blackwell datasheet, GB200 at 1,200 W a GPU: 90 and 45 TFLOPS.
    gpus = 72
    peak = _blackwell(
        {"float8_e4m3fn": 720e15, "int8": 720e15, "float16": 360e15, "tf32": 180e15},
        gpus,
        fp4_dense=1440e15 / 2,
        vector={"float32": 90e12, "float64": 45e12},
    )
    return Hardware(
        "gb200-nvl72",
        peak,
        bandwidth=576e12 / gpus,
        description=(
            "NVIDIA GB200 NVL72, one of its 72 Blackwell GPUs (186 GB HBM3e); FP8 OCP e4m3fn, FP4 nvfp4 / mxfp4"
        ),
        memory_bytes=189_471 * MIB,  # nvidia-smi on a GB200
        interconnect=_NVL72_GB200,
        sparse=NVIDIA_2_4,
        power_w=1200,
    )


def _gb300_nvl72() -> Hardware:
    # NVIDIA GB300 NVL72 specifications, 72 GPUs: FP4 1,440 | 1,080 PFLOPS (sparse | dense), FP8/FP6 720*,
    # INT8 24* POPS, FP16/BF16 360*, TF32 180* PFLOPS; 20 TB HBM3e at 576 TB/s. FP32 80 TFLOPS a GPU
    # (Verda's per-GPU table); no FP64 figure was found, so float64 runs at the FP32 rate.
    gpus = 72
    peak = _blackwell(
        {"float8_e4m3fn": 720e15, "int8": 24e15, "float16": 360e15, "tf32": 180e15},
        gpus,
        fp4_dense=1080e15,
        vector={"float32": 80e12},
    )
    return Hardware(
        "gb300-nvl72",
        peak,
        bandwidth=576e12 / gpus,
        description=(
            "NVIDIA GB300 NVL72, one of its 72 Blackwell Ultra GPUs (288 GB HBM3e); FP8 OCP e4m3fn, FP4 nvfp4 / mxfp4"
        ),
        memory_bytes=284_208 * MIB,  # nvidia-smi on a GB300 of an NVL72 compute tray
        interconnect=_NVL72_GB300,
        sparse=NVIDIA_2_4,
        power_w=1400,
    )


def _cdna(cus: int, clock: float, per_cu: dict[str, dict[str, int]]) -> Peaks:
    """FLOPs per clock per CU x CUs x clock, per unit and dtype."""
    return {unit: {dtype: n * cus * clock for dtype, n in table.items()} for unit, table in per_cu.items()}


def _mi325x() -> Hardware:
    # CDNA 3, the MI300X's chip (304 CUs, 2.1 GHz) with 256 GB HBM3E at 6 TB/s: the MI300X's per-CU rates
    # (ROCm, "AMD Instinct MI300 series microarchitecture"). FP8 is the fnuz encoding.
    clock = 2.1e9
    peak = _cdna(
        304,
        clock,
        {
            VECTOR: {"float64": 128, "float32": 256},
            TENSOR: {
                "float64": 256,
                "float32": 256,
                "tf32": 1024,
                "float16": 2048,
                "bfloat16": 2048,
                "float8_e4m3fnuz": 4096,
                "float8_e5m2fnuz": 4096,
                "int8": 4096,
            },
        },
    )
    return Hardware(
        "mi325x",
        peak,
        bandwidth=6e12,
        buffer_bytes=256 * MIB,
        clock_hz=clock,
        description="AMD Instinct MI325X 256 GB (HBM3E); FP8 fnuz (e4m3fnuz)",
        memory_bytes=256 * GIB,  # ROCm's table: the bytes the device reports were not found
        interconnect=_IF_CDNA3,
        sparse=SparseSupport(
            nm=((2, 4),),
            nm_precisions=frozenset({"float16", "bfloat16", "int8", "float8_e4m3fnuz", "float8_e5m2fnuz"}),
        ),
        power_w=1000,
    )


def _mi355x() -> Hardware:
    # CDNA 4: 256 CUs (ROCm GPU specifications) at 2.4 GHz; 8,192 FP8 FLOPs per clock per CU (twice CDNA 3's,
    # AMD at ISSCC 2026), FP16/BF16 half of it, MXFP4 twice it; no TF32 (ROCm Compute Profiler's data-type
    # table). FP8 is OCP's (e4m3fn, e5m2); no NVFP4: the FP4 matrix cores take OCP MX scales.
    clock = 2.4e9
    peak = _cdna(
        256,
        clock,
        {
            VECTOR: {"float64": 128, "float32": 256},
            TENSOR: {
                "float64": 128,
                "float32": 256,
                "float16": 4096,
                "bfloat16": 4096,
                "float8_e4m3fn": 8192,
                "float8_e5m2": 8192,
                "int8": 8192,
                "mxfp4": 16384,
            },
        },
    )
    return Hardware(
        "mi355x",
        peak,
        bandwidth=8e12,
        buffer_bytes=256 * MIB,
        clock_hz=clock,
        description="AMD Instinct MI355X 288 GB (HBM3E); FP8 OCP e4m3fn, FP4 mxfp4",
        memory_bytes=288 * GIB,  # ROCm's table: the bytes the device reports were not found
        interconnect=_IF_CDNA4,
        power_w=1400,
    )


def accelerators_2026() -> tuple[Hardware, ...]:
    """B300, GB200 NVL72, GB300 NVL72, MI325X and MI355X (sources in docs/hardware.md)."""
    return _b300(), _gb200_nvl72(), _gb300_nvl72(), _mi325x(), _mi355x()
