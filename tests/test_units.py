"""One way to write numbers, byte sizes and times: the formatters at their boundaries, and the
reports that show times (roofline, sparsity, profile, the report's time column) all using them."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis
from opcount.hardware import Hardware
from opcount.report import module_table
from opcount.roofline import roofline
from opcount.units import MICROSECONDS, seconds, si, size, time_unit, unprefixed

# 100 GFLOP/s tensor, 10 GFLOP/s vector, 10 GB/s.
TOY = Hardware("toy", {"tensor": {"float32": 100e9}, "vector": {"float32": 10e9}}, bandwidth=10e9)


@pytest.mark.parametrize(
    ("s", "text"),
    [
        (None, ""),
        (0.0, "0 s"),
        (1e-9, "1 ns"),
        (4.2e-10, "0.42 ns"),
        (999e-9, "999 ns"),
        (999.9e-9, f"1 {MICROSECONDS}"),  # rounds to 1000 ns: written in the next unit, never "1e+03 ns"
        (1e-6, f"1 {MICROSECONDS}"),
        (6.36e-5, f"63.6 {MICROSECONDS}"),
        (999.96e-6, "1 ms"),
        (1e-3, "1 ms"),
        (0.25, "250 ms"),
        (0.99996, "1 s"),
        (1.0, "1 s"),
        (3600.0, "3600 s"),  # past the largest unit: whole seconds, no exponent
        (-1.5e-3, "-1.5 ms"),  # a difference of two times keeps its sign and picks its unit by size
        (-2e-7, "-200 ns"),
        (math.inf, "inf s"),
    ],
)
def test_seconds(s: float | None, text: str) -> None:
    assert seconds(s) == text


def test_microseconds_is_the_si_micro_sign() -> None:
    assert MICROSECONDS == "\u00b5s"
    assert MICROSECONDS.encode("latin-1") == b"\xb5s"  # prints on terminals that are not UTF-8
    assert MICROSECONDS.encode("cp437") == b"\xe6s"


@pytest.mark.parametrize(
    ("x", "text"),
    [(0, "0"), (0.5, "0.5"), (512, "512"), (999.6, "1K"), (1000, "1K"), (8.22e9, "8.22G"), (999.96e3, "1M")]
    + [(-2e6, "-2M"), (1.2e18, "1200P")],
)
def test_si(x: float, text: str) -> None:
    assert si(x) == text


def test_size_and_time_unit() -> None:
    assert size(213e6) == "213MB"
    assert size(64) == "64B"
    assert time_unit(2.5e-4) == (MICROSECONDS, 1e-6)
    assert time_unit(999.96e-6) == ("ms", 1e-3)
    assert time_unit(0.0) == ("s", 1.0)


# Linear(256 -> 512, no bias) on [64, 256], then ReLU, float32 on TOY:
# linear 2 * 64*256*512 = 16,777,216 FLOP on the tensor unit -> 167.77216 us (compute bound);
# relu 64*512*4 * 2 = 262,144 B -> 26.2144 us (memory bound). Total 193.98656 us -> "194 us".
def _model() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(256, 512, bias=False), nn.ReLU()), torch.randn(64, 256)


TOTAL = f"194 {MICROSECONDS}"


def test_roofline_text_uses_the_time_style() -> None:
    model, x = _model()
    report = roofline(model, x, TOY)
    assert f"{TOTAL} speed of light" in report.summary()
    assert f"168 {MICROSECONDS}" in report.table(by="layer")
    table = module_table(FlopCountAnalysis(model, x), columns=("flops", "time"), extra={"roofline": report})
    assert TOTAL in table and "us" not in table.replace(MICROSECONDS, "")


def test_sparsity_text_uses_the_time_style() -> None:
    from opcount.sparsity import sparsity_roofline

    model, x = _model()
    report = sparsity_roofline(model, (x,), TOY, "measured")
    assert f"{TOTAL} dense -> {TOTAL} sparse" in report.summary()
    assert f"168 {MICROSECONDS}" in report.table(by="layer")


def test_profile_text_uses_the_time_style() -> None:
    from opcount.profile import profile

    model, x = _model()
    report = profile(model, x, hardware=TOY, repeats=2, warmup=1)
    assert f"speed of light on toy (float32) {TOTAL}" in report.summary()
    measured = report.total.measured
    assert seconds(measured) in report.summary()


@pytest.mark.parametrize(
    ("x", "text"),
    [(12.345, "12.3"), (1234.56, "1235"), (0.5, "0.5"), (0.0012345, "0.00123"), (0, "0"), (-2.0, "-2")],
)
def test_unprefixed_keeps_three_significant_figures_without_a_prefix(x: float, text: str) -> None:
    # flops/byte cells: no K/M/G prefix, trailing zeros dropped.
    assert unprefixed(x) == text
