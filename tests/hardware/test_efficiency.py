"""The estimate's efficiency factors: the GEMM's per dtype class, read from a hardware file, and
what a fused GEMM kernel takes with them (worked by hand on a tiny Llama)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
from transformers import LlamaConfig

from opcount.errors import OpcountValueError
from opcount.hardware.efficiency import Efficiency
from opcount.hardware.spec import Hardware
from opcount.llm.causal_lm import CausalLM
from opcount.llm.precision.dtypes import Precision

H, FFN, TOKENS = 64, 128, 128
PEAKS = {
    "tensor": {"bfloat16": 1e15, "float8_e4m3fn": 2e15},
    "vector": {"bfloat16": 1e13, "float32": 1e13},
}


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' deprecation notices on the cache argument
        yield


@pytest.mark.parametrize("precision", ["float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"])
def test_an_8_bit_float_gemm_takes_the_fp8_factor(precision: str) -> None:
    assert Efficiency(gemm=0.5, gemm_fp8=0.25).gemm_at(precision) == 0.25


@pytest.mark.parametrize("precision", ["bfloat16", "float16", "tf32", "float32", "int8"])
def test_any_other_gemm_takes_the_gemm_factor(precision: str) -> None:
    assert Efficiency(gemm=0.5, gemm_fp8=0.25).gemm_at(precision) == 0.5


def test_a_hardware_file_sets_the_fp8_factor_apart() -> None:
    base = {"name": "x", "peak": PEAKS, "bandwidth": 1e12}
    hw = Hardware.from_dict({**base, "efficiency": {"gemm": 0.75}})
    assert (hw.efficiency.gemm, hw.efficiency.gemm_fp8) == (0.75, Efficiency().gemm_fp8)  # gemm leaves FP8 alone
    hw = Hardware.from_dict({**base, "efficiency": {"gemm_fp8": 0.5}})
    assert (hw.efficiency.gemm, hw.efficiency.gemm_fp8) == (Efficiency().gemm, 0.5)
    assert Hardware.from_dict(hw.to_dict()) == hw
    with pytest.raises(OpcountValueError, match=r"efficiency.gemm_fp8 must be a number from 0.001 to 1, got 0"):
        Hardware.from_dict({**base, "efficiency": {"gemm_fp8": 0}})


@pytest.mark.parametrize(("dtype", "peak", "factor"), [("bfloat16", 1e15, 0.5), ("float8_e4m3fn", 2e15, 0.25)])
def test_a_gemm_kernel_at_its_dtypes_factor(dtype: str, peak: float, factor: float) -> None:
    llm = CausalLM(
        LlamaConfig(
            hidden_size=H,
            intermediate_size=FFN,
            num_hidden_layers=1,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=1000,
        ),
        Precision(dtype, dtype),
    )
    hw = Hardware("x", PEAKS, bandwidth=1e15, efficiency={"gemm": 0.5, "gemm_fp8": 0.25})
    schedule = llm.phase("prefill", seq_len=TOKENS, hardware=hw).schedule
    assert schedule is not None
    k = next(i for i, kernel in enumerate(schedule.kernels) if kernel.name == "model.layers.0.mlp.gate_proj")
    # the gate and up projections read the same input: one kernel of 2 x 128 tokens x 64 in x 128
    # out multiply-adds, 2 FLOPs each; its 128 x 128 outputs fill whole 64 x 128 tiles
    flops = 2 * 2 * TOKENS * H * FFN
    assert schedule.tensor_s[k] == pytest.approx(flops / peak, rel=1e-12)
    assert schedule.tensor_eff_s[k] == pytest.approx(flops / peak / factor, rel=1e-12)
