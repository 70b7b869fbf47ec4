"""One way to write numbers, byte sizes and times: the formatters at their boundaries, and the
reports that show times (roofline, sparsity, profile, the report's time column) all using them."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from opcount import FlopCountAnalysis
from opcount.hardware.lookup import Hardware
from opcount.report import module_table
from opcount.roofline import roofline
from opcount.units import (
    COMPACT,
    FVCORE_STR,
    FVCORE_TABLE,
    MICROSECONDS,
    NumberFormat,
    format_number,
    seconds,
    si,
    size,
    time_unit,
    unprefixed,
)

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
    [
        (0, "0"),
        (0.5, "0.5"),
        (512, "512"),
        (999.6, "1K"),
        (1000, "1K"),
        (8.22e9, "8.22G"),
        (999.96e3, "1M"),
        (-2e6, "-2M"),
        (1.2e18, "1200P"),
    ],
)
def test_si(x: float, text: str) -> None:
    assert si(x) == text


# Ties to three significant figures, rounded half up in decimal: 4165 -> 4.17K, 9705 -> 9.71K,
# 4125 -> 4.13K, 1.2255e18 -> 1.23e18 = 1230P (three figures past the largest prefix too).
TIES = [(4165, "4.17K"), (9705, "9.71K"), (4125, "4.13K"), (1_225_500_000_000_000_000, "1230P"), (-4165, "-4.17K")]


@pytest.mark.parametrize(("x", "text"), TIES)
def test_significant_figures_round_ties_half_up(x: int, text: str) -> None:
    assert si(x) == text
    assert format_number(x, COMPACT) == text


def test_a_float_rounds_as_written_not_as_its_nearest_double() -> None:
    # The double nearest 0.001235 is 0.0012349999...; the text reads 1.235 ms, which rounds up.
    assert seconds(0.001235) == "1.24 ms"
    assert unprefixed(2.675) == "2.68"  # the double is 2.67499999...
    assert si(1.665e-1) == "0.167"


@settings(max_examples=300)
@given(st.one_of(st.integers(-(10**21), 10**21), st.floats(-1e21, 1e21, allow_nan=False)))
def test_compact_cells_and_si_are_one_formatter(x: float) -> None:
    assert format_number(x, COMPACT) == si(x)


def test_fvcore_layouts_keep_fvcore_s_rounding_on_ties() -> None:
    from fvcore.nn.print_model_statistics import _format_size

    # fvcore scales as a float and keeps 2 decimals: 4.125 is exact in binary and rounds to even.
    assert format_number(4125, FVCORE_STR) == _format_size(4125, sig_figs=2) == "4.12K"
    assert format_number(1_234_500, FVCORE_TABLE) == _format_size(1_234_500) == "1.234M"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (size(213e6), "213 MB"),
        (size(64), "64 B"),
        (size(10_900), "10.9 KB"),
        (size(141e9), "141 GB"),  # decimal prefixes: 1 GB = 1e9 B
        (si(18_100, unit="FLOP"), "18.1 KFLOP"),
        (si(512, unit="FLOP"), "512 FLOP"),
        (si(3.35e12, unit="B/s"), "3.35 TB/s"),
        (si(math.inf, unit="FLOP"), "inf FLOP"),
    ],
)
def test_a_number_and_its_unit_are_spaced(text: str, expected: str) -> None:
    assert text == expected


@pytest.mark.parametrize(
    ("x", "fmt", "text"),
    [
        # 472 / 1000 is 0.47199999999999997513... as a double: digits past 15 are written as zeros.
        (472, NumberFormat("K", 30), "0.472" + "0" * 27 + "K"),
        (472, NumberFormat("K", 20, significant=True), "0.472" + "0" * 17 + "K"),
        (1_234_567, NumberFormat("", 3), "1234567"),  # no prefix: a whole count has no decimals
        (472, NumberFormat("", 3), "472"),
        (0.5, NumberFormat("", 3), "0.500"),
        (1000, NumberFormat("K", 3, significant=True), "1.00K"),  # a fixed unit keeps its zeros
    ],
)
def test_fixed_units(x: float, fmt: NumberFormat, text: str) -> None:
    assert format_number(x, fmt) == text


def test_size_and_time_unit() -> None:
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
    # 2 * 64*256*512 = 16,777,216 FLOP (ReLU's 32,768 beside it); bytes: x 65,536 + W 524,288 +
    # y 131,072, then ReLU 262,144 = 983,040 B; 16.8e6 / 983,040 = 17.1 FLOP/B.
    assert "16.8 MFLOP (2 per multiply-add), 983 KB moved, 17.1 FLOP/B" in report.summary()
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
    from opcount.profiling import profile

    model, x = _model()
    report = profile(model, x, hardware=TOY, repeats=2, warmup=1)
    assert f"speed of light on toy (float32) {TOTAL}" in report.summary()
    measured = report.total.measured
    assert seconds(measured) in report.summary()
    # then the end, or the note a row measured faster than the toy device's bound adds (timing decides)
    pattern = r"achieved [\d.]+ [KMGTP]?FLOP/s, [\d.]+ [KMGTP]?B/s(?:$|\. Measured faster than the speed of light)"
    assert re.search(pattern, report.summary()), report.summary()


@pytest.mark.parametrize(
    ("x", "text"),
    [(12.345, "12.3"), (1234.56, "1235"), (0.5, "0.5"), (0.0012345, "0.00123"), (0, "0"), (-2.0, "-2")],
)
def test_unprefixed_keeps_three_significant_figures_without_a_prefix(x: float, text: str) -> None:
    # flops/byte cells: no K/M/G prefix, trailing zeros dropped.
    assert unprefixed(x) == text


def test_llm_summary_spaces_its_sizes(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    from opcount.cli import main

    d, f, n, h, g, v = 256, 512, 2, 8, 2, 1000
    config = [f"hidden_size={d}", f"intermediate_size={f}", f"num_hidden_layers={n}"]
    config += [f"num_attention_heads={h}", f"num_key_value_heads={g}", f"vocab_size={v}"]
    flags = [x for kv in config for x in ("--hf-config", kv)]
    assert main(["llm:llama-3-8b", *flags, "--phase", "decode", "--kv-len", "16", "--depth", "0", "-q"]) == 0
    # Parameters: embedding and lm_head 2 * 1000*256, per layer q, o 2 * 256*256, k, v 2 * 256*64,
    # MLP 3 * 256*512, two norms 2 * 256; a final norm 256: 1,627,392, at 2 bytes 3,254,784 B.
    # KV cache: 17 tokens * (K, V) * 2 layers * 2 KV heads * 32 dims * 2 bytes = 8,704 B.
    assert "memory: weights 3.25 MB, KV cache 8.7 KB, " in capsys.readouterr().out


def test_roofline_chart_labels_space_their_units() -> None:
    pytest.importorskip("matplotlib")
    from opcount.roofline.plot import roofline_chart

    model, x = _model()
    ax = roofline_chart(roofline(model, x, TOY)).axes[0]
    assert ax.get_title().endswith(f"{TOTAL} speed of light (10 GB/s)")
    labels = sorted(text.get_text() for text in ax.get_legend().get_texts())
    # Ridge points: 100 GFLOP/s / 10 GB/s = 10 FLOP/B, 10 GFLOP/s / 10 GB/s = 1 FLOP/B.
    assert labels == ["tensor float32: 100 GFLOP/s, ridge 10 FLOP/B", "vector float32: 10 GFLOP/s, ridge 1 FLOP/B"]
