"""Hardware presets for current accelerators: ridge points against the vendors' own figures."""

import pytest

from opcount.hardware.lookup import PRESETS, UnknownHardwareError, hardware
from opcount.sparsity import sparse_support

T, P = 1e12, 1e15
SPARSE = 2  # figures starred "with sparsity" (2:4) are twice the dense peak

# Where a datasheet prints "dense | sparse*" the dense figure is used as printed (L40S: 362.05 | 733*,
# not exactly half); where it prints only the starred figure (H200, B200), half of it.

# (preset, unit, dtype, datasheet FLOP/s dense, datasheet bytes/s), each figure as printed in its source.
DATASHEET = [
    # NVIDIA H200 Tensor Core GPU datasheet (2024), H200 SXM column: FP16 1,979* / TF32 989* / FP8 3,958*
    # / FP32 67 / FP64 Tensor 67 TFLOPS, 4.8 TB/s
    ("h200", "tensor", "float16", 1979 * T / SPARSE, 4.8e12),
    ("h200", "tensor", "bfloat16", 1979 * T / SPARSE, 4.8e12),
    ("h200", "tensor", "tf32", 989 * T / SPARSE, 4.8e12),
    ("h200", "tensor", "float8_e4m3fn", 3958 * T / SPARSE, 4.8e12),
    ("h200", "tensor", "float64", 67 * T, 4.8e12),
    ("h200", "vector", "float32", 67 * T, 4.8e12),
    # NVIDIA HGX B200 specifications (2025), per GPU: FP16/BF16 4.5* / TF32 2.2* / FP8 9* PFLOPS, INT8
    # 9* POPS, FP32 75 / FP64 37 TFLOPS, 7.7 TB/s
    ("b200", "tensor", "float16", 4.5 * P / SPARSE, 7.7e12),
    ("b200", "tensor", "bfloat16", 4.5 * P / SPARSE, 7.7e12),
    ("b200", "tensor", "tf32", 2.2 * P / SPARSE, 7.7e12),
    ("b200", "tensor", "float8_e4m3fn", 9 * P / SPARSE, 7.7e12),
    ("b200", "tensor", "int8", 9 * P / SPARSE, 7.7e12),
    ("b200", "vector", "float32", 75 * T, 7.7e12),
    ("b200", "vector", "float64", 37 * T, 7.7e12),
    # AMD ROCm docs, "AMD Instinct MI300 series microarchitecture" (dense): matrix FP16/BF16 1,307.4,
    # FP8 2,614.9, TF32 653.7, vector FP32 163.4, vector FP64 81.7 TFLOPS; 5.3 TB/s
    ("mi300x", "tensor", "float16", 1307.4 * T, 5.3e12),
    ("mi300x", "tensor", "bfloat16", 1307.4 * T, 5.3e12),
    ("mi300x", "tensor", "float8_e4m3fnuz", 2614.9 * T, 5.3e12),
    ("mi300x", "tensor", "int8", 2614.9 * T, 5.3e12),
    ("mi300x", "tensor", "tf32", 653.7 * T, 5.3e12),
    ("mi300x", "vector", "float32", 163.4 * T, 5.3e12),
    ("mi300x", "vector", "float64", 81.7 * T, 5.3e12),
    # NVIDIA A10 Tensor Core GPU datasheet (2021): FP32 31.2, TF32 62.5 | 125*, BF16/FP16 125 | 250*
    # TFLOPS, INT8 250 | 500* TOPS; 600 GB/s (the A10G's memory is the same)
    ("a10g", "tensor", "float16", 125 * T, 600e9),
    ("a10g", "tensor", "tf32", 62.5 * T, 600e9),
    ("a10g", "tensor", "int8", 250 * T, 600e9),
    ("a10g", "vector", "float32", 31.2 * T, 600e9),
    # NVIDIA L40S datasheet (2023): FP32 91.6, TF32 183 | 366*, BF16/FP16 362.05 | 733*, FP8 733 | 1,466*
    # TFLOPS; 864 GB/s
    ("l40s", "tensor", "float16", 362.05 * T, 864e9),
    ("l40s", "tensor", "tf32", 183 * T, 864e9),
    ("l40s", "tensor", "float8_e4m3fn", 733 * T, 864e9),
    ("l40s", "vector", "float32", 91.6 * T, 864e9),
    # NVIDIA A100 Tensor Core GPU datasheet (2021), 40 GB PCIe column: FP16 312 | 624*, TF32 156 | 312*,
    # FP32 19.5, FP64 Tensor 19.5 TFLOPS, INT8 624 | 1,248* TOPS; 1,555 GB/s
    ("a100-pcie-40gb", "tensor", "float16", 312 * T, 1555e9),
    ("a100-pcie-40gb", "tensor", "tf32", 156 * T, 1555e9),
    ("a100-pcie-40gb", "tensor", "int8", 624 * T, 1555e9),
    ("a100-pcie-40gb", "tensor", "float64", 19.5 * T, 1555e9),
    ("a100-pcie-40gb", "vector", "float32", 19.5 * T, 1555e9),
]


@pytest.mark.parametrize("name, unit, dtype, flops, bandwidth", DATASHEET)
def test_ridge_point_is_the_datasheet_ratio(name: str, unit: str, dtype: str, flops: float, bandwidth: float) -> None:
    # Datasheets print 3-4 significant digits (H200's 1,979 is the H100 whitepaper's 1,978.9 x 2,
    # MI300X's 163.4 is 256 x 304 CUs x 2.1 GHz): equal to within the printed rounding.
    assert hardware(name).ridge(unit, dtype) == pytest.approx(flops / bandwidth, rel=2e-3)


def test_short_names_and_the_units_each_device_lacks() -> None:
    assert {hardware(n).name for n in ("h200", "b200", "mi300x", "a10g", "l40s")} == {
        "h200-sxm",
        "b200",
        "mi300x",
        "a10g",
        "l40s",
    }
    assert hardware("H200_SXM") is PRESETS["h200-sxm"]
    # Ampere has no FP8; CDNA 3 runs an FP8 request in its fnuz encoding (test_fp8_formats.py)
    assert hardware("a10g").peak_of("tensor", "float8_e4m3fn") is None
    assert hardware("a100-pcie-40gb").peak_of("tensor", "float8_e4m3fn") is None
    assert hardware("mi300x").precision_of("tensor", "float8_e4m3fn") == "float8_e4m3fnuz"
    # same chip as the A100 SXM4, slower memory: the same peaks, a higher ridge
    assert hardware("a100-pcie-40gb").peak == PRESETS["a100-sxm"].peak
    assert hardware("a100-pcie-40gb").ridge("tensor", "float16") > PRESETS["a100-sxm"].ridge("tensor", "float16")


def test_new_presets_run_two_to_four_sparsity_where_the_vendor_says() -> None:
    for name in ("h200-sxm", "b200", "l40s", "a10g", "a100-pcie-40gb"):
        assert sparse_support(PRESETS[name]).fit_nm(2, 4, "float16") == (2, 4)
    mi300x = sparse_support(PRESETS["mi300x"])
    assert mi300x.fit_nm(2, 4, "bfloat16") == (2, 4) and mi300x.fit_nm(2, 4, "tf32") is None


def test_cpu_is_no_longer_a_name_and_the_error_says_what_to_use() -> None:
    assert "cpu" not in PRESETS
    with pytest.raises(UnknownHardwareError, match=r"xeon-8480-2s.*local"):
        hardware("cpu")
    with pytest.raises(UnknownHardwareError, match="did you mean mi300x"):
        hardware("mi300")


def test_cli_hardware_cpu_is_a_one_line_error(capsys) -> None:
    from opcount.cli import main

    assert main(["tests.fixtures.report_models:tiny", "--hardware", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "xeon-8480-2s" in err and "local" in err


@pytest.mark.parametrize(
    ("name", "reported"),
    [
        # nvidia-smi --query-gpu=memory.total (MiB), as logged on each device: what an engine's
        # gpu_memory_utilization takes a share of (sources in docs/hardware.md)
        ("h100-sxm", 81_559 * 2**20),
        ("h100-pcie", 81_559 * 2**20),
        ("h200-sxm", 143_771 * 2**20),
        ("b200", 183_359 * 2**20),
        ("a100-sxm", 81_920 * 2**20),
        ("a100-pcie-40gb", 40_960 * 2**20),
        ("l40s", 46_068 * 2**20),
        ("l4", 23_034 * 2**20),
        ("a10g", 23_028 * 2**20),
        ("t4", 15_360 * 2**20),
        ("rtx-4090", 24_564 * 2**20),
        ("mi300x", 205_822_885_888),  # rocm-smi --showmeminfo vram, in bytes
    ],
)
def test_memory_is_what_the_device_reports(name: str, reported: int) -> None:
    assert PRESETS[name].memory_bytes == reported
