"""One FP8 on every preset, each vendor's encoding named; block-scaled FP4 where the tensor unit runs it.

An 8-bit float request runs in the device's own encoding: OCP e4m3fn on NVIDIA Hopper/Blackwell and
AMD CDNA 4 (MI355X), fnuz on AMD CDNA 3 (MI300X, MI325X). Bounds are worked by hand: the MI300X's FP8
peak is 4,096 FLOPs per clock per CU x 304 CUs x 2.1 GHz = 2,614.9 TFLOP/s (AMD ROCm, "AMD Instinct
MI300 series microarchitecture"), 5.3 TB/s.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from opcount.errors import OpcountValueError
from opcount.hardware.lookup import PRESETS, Hardware
from opcount.roofline import roofline

T = 1e12
MI300X_FP8, MI300X_BF16, MI300X_BANDWIDTH = 2614.9 * T, 1307.4 * T, 5.3e12


def test_every_preset_with_fp8_names_its_encoding() -> None:
    fnuz = {"mi300x", "mi325x"}
    without = {"a100-sxm", "a100-pcie-40gb", "a10g", "t4", "xeon-8480-2s", "m2-max", "nvdla-full"}
    for name, hw in PRESETS.items():
        if name in without:
            assert hw.fp8 is None, name
            continue
        assert hw.fp8 == ("float8_e4m3fnuz" if name in fnuz else "float8_e4m3fn"), name
        # either encoding's request finds the device's peak, under the device's own key
        for asked in ("float8_e4m3fn", "float8_e4m3fnuz"):
            assert hw.precision_of("tensor", asked) == hw.fp8
            assert hw.peak_of("tensor", asked) == hw.peak["tensor"][hw.fp8]
        e5m2 = hw.precision_of("tensor", "float8_e5m2")
        assert e5m2 == ("float8_e5m2fnuz" if name in fnuz else "float8_e5m2"), name


def test_an_fp8_gemm_on_mi300x_runs_on_the_tensor_unit_at_its_fp8_peak() -> None:
    # [4096, 4096] = [4096, 4096] @ [4096, 4096]: 4096^3 multiply-adds = 2 x 4096^3 FLOPs at 2,614.9 TFLOP/s
    # = 52.6 us; x, W and the output at 1 byte each, 3 x 4096^2 bytes at 5.3 TB/s = 9.5 us: compute-bound.
    n = 4096
    gemm, x = nn.Linear(n, n, bias=False, device="meta"), torch.empty(n, n, device="meta")  # shapes only
    report = roofline(gemm, x, "mi300x", dtype="float8_e4m3fn")
    (layer,) = report.layers
    assert (layer.layer.unit, layer.layer.precision) == ("tensor", "float8_e4m3fnuz")
    assert layer.compute_time == pytest.approx(2 * n**3 / MI300X_FP8, rel=1e-5)
    assert layer.memory_time == pytest.approx(3 * n * n / MI300X_BANDWIDTH, rel=1e-5)
    assert report.total_time == pytest.approx(2 * n**3 / MI300X_FP8, rel=1e-5)


def test_fp4_runs_only_where_the_tensor_unit_has_it() -> None:
    x, model = torch.randn(64, 256), nn.Linear(256, 256, bias=False)
    (layer,) = roofline(model, x, "b200", dtype="nvfp4").layers
    assert (layer.layer.unit, layer.layer.precision) == ("tensor", "nvfp4")
    # 64 x 256 x 256 multiply-adds at the B200's 9 PFLOP/s (HGX B200: FP4 18 PFLOPS with sparsity)
    assert layer.compute_time == pytest.approx(2 * 64 * 256 * 256 / 9e15)
    # an E2M1 value and a 16th of an E4M3 scale: 0.5625 bytes an element (NVFP4)
    assert layer.layer.weight_bytes == pytest.approx(256 * 256 * (0.5 + 1 / 16))
    with pytest.raises(OpcountValueError, match=r"^h100-sxm runs no nvfp4 matrix products \(its tensor unit runs "):
        roofline(model, x, "h100-sxm", dtype="nvfp4")
    with pytest.raises(OpcountValueError, match=r"mi355x runs no nvfp4 .* runs float8_e4m3fn, float8_e5m2, mxfp4\)"):
        roofline(model, x, "mi355x", dtype="nvfp4")
    with pytest.raises(OpcountValueError, match=r"a100-sxm runs no float8_e4m3fn .*no 8- or 4-bit float"):
        roofline(model, x, "a100-sxm", dtype="float8_e4m3fn")


def test_a_hardware_file_may_key_peaks_by_fp4_format() -> None:
    hw = Hardware.from_dict({"name": "npu", "bandwidth": 1e12, "peak": {"tensor": {"mxfp4": 4e15}}, "power_w": 300})
    assert hw.peak_of("tensor", "mxfp4") == 4e15 and hw.power_w == 300
    assert Hardware.from_dict(hw.to_dict()) == hw
    with pytest.raises(OpcountValueError, match=r"power_w must be a number of W from 0.001 to 1e\+06, got -1"):
        Hardware.from_dict({**hw.to_dict(), "power_w": -1})


# ----- the LLM path: Llama-3-8B, 32k-token prefill ---------------------------------------------
transformers = pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.models.catalogue import config  # noqa: E402
from opcount.llm.phases import PhaseCost  # noqa: E402
from opcount.llm.precision.dtypes import Precision  # noqa: E402

# meta-llama/Meta-Llama-3-8B's config.json: d 4096, f 14336, n 32, h 32, g 8, e 128, V 128256.
D, F, N, H, G, E, V, S = 4096, 14336, 32, 32, 8, 128, 128256, 32768
LINEAR = N * S * (2 * D * D + 2 * D * G * E + 3 * D * F)  # q, o, k, v, SwiGLU: 2.287e14 multiply-adds
ATTENTION = N * H * E * S * (S + 1)  # q.k and p.v over the kept (causal) pairs: 1.407e14
MATMUL_FLOPS = 2 * (LINEAR + ATTENTION + D * V)  # the output projection on the last token: 7.389e14


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecation notices
        yield


def prefill(hw: str, act: str, weight: str = "bfloat16") -> PhaseCost:
    return CausalLM(config("llama-3-8b"), Precision(weight=weight, act=act)).phase("prefill", seq_len=S, hardware=hw)


def test_llama_3_8b_prefill_in_fp8_on_mi300x_is_bound_by_its_fp8_peak() -> None:
    # 7.389e14 FLOPs: 283 ms at the FP8 peak, 565 ms at the BF16 peak; both compute-bound (16 GB of
    # weights read once take 3 ms). Before FP8 found the fnuz peak the GEMMs fell to the vector unit and
    # the bound read 1.72 s.
    fp8, bf16 = prefill("mi300x", "fp8"), prefill("mi300x", "bf16")
    assert fp8.schedule.matmul_flops == bf16.schedule.matmul_flops == MATMUL_FLOPS
    assert fp8.time_bound == pytest.approx(MATMUL_FLOPS / MI300X_FP8, rel=1e-4)
    assert bf16.time_bound == pytest.approx(MATMUL_FLOPS / MI300X_BF16, rel=1e-4)
    assert fp8.time_bound < bf16.time_bound
    assert fp8.schedule.limited_by == "compute"


def test_llama_3_8b_in_nvfp4_on_b200_runs_at_its_fp4_peak() -> None:
    # W4A4 NVFP4: 7.389e14 FLOPs at 9 PFLOP/s = 82.1 ms (weights of 6 GB take 0.8 ms at 7.7 TB/s)
    b200 = prefill("b200", "nvfp4", "nvfp4")
    assert b200.precision.label() == "w4a4 (nvfp4), KV bfloat16"  # the cache stays 16-bit unless asked
    assert b200.time_bound == pytest.approx(MATMUL_FLOPS / 9e15, rel=1e-4)
    mi355x = prefill("mi355x", "mxfp4", "mxfp4")  # OCP MXFP4 on CDNA 4: 16,384 FLOPs/clock/CU x 256 x 2.4 GHz
    assert mi355x.time_bound == pytest.approx(MATMUL_FLOPS / (16384 * 256 * 2.4e9), rel=1e-4)


def test_fp4_activations_are_refused_in_one_line_where_no_tensor_unit_runs_them() -> None:
    small = config("llama-3-8b", num_hidden_layers=1)
    for hw, message in (
        ("h100-sxm", "h100-sxm runs no nvfp4 matrix products (its tensor unit runs float8_e4m3fn, float8_e5m2)"),
        ("mi300x", "mi300x runs no mxfp4 matrix products (its tensor unit runs float8_e4m3fnuz, float8_e5m2fnuz)"),
    ):
        act = message.split(" runs no ")[1].split()[0]
        with pytest.raises(OpcountValueError) as e:
            CausalLM(small, Precision(act=act)).phase("decode", kv_len=16, hardware=hw)
        assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_the_command_line_refuses_a_float_its_hardware_cannot_multiply_naming_the_flag(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked with the flags, before a model is built: nothing is traced for a dtype the device cannot run."""
    from opcount.cli import main
    from opcount.llm import decoder

    def no_build(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was built")

    monkeypatch.setattr(decoder, "build_on_meta", no_build)
    status = main(["llm:llama-3-8b", "--phase", "decode", "--hardware", "a100-sxm", "--act-dtype", "fp8"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert err == (
        "opcount: error: --act-dtype fp8: a100-sxm runs no float8_e4m3fn matrix products (its tensor unit runs "
        "no 8- or 4-bit float); choose another --act-dtype or --hardware"
    )
