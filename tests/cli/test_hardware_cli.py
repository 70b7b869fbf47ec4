"""``opcount hardware [NAME]``: every preset listed, one device's peaks with ridge points (the
H100 SXM datasheet: 989.4 TFLOP/s dense float16 on tensor cores, 3.35 TB/s HBM3, so
989.4 / 3.35 = 295 FLOP/B), and a wrong name refused in one line."""

from __future__ import annotations

import pytest

from opcount.cli import main
from opcount.hardware.lookup import PRESETS


def test_lists_every_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hardware"]) == 0
    rows = [
        line.split("|")[1].strip().split()[0]
        for line in capsys.readouterr().out.splitlines()[2:]
        if line.startswith("|")
    ]
    assert rows == sorted(PRESETS)


def test_one_device_with_its_ridge_points(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hardware", "h100"]) == 0  # an alias
    out = capsys.readouterr().out
    assert out.startswith("h100-sxm: NVIDIA H100 SXM5")
    assert "memory bandwidth 3.35 TB/s" in out
    assert "| tensor | float16       | 989 TFLOP/s  | 295" in out


def test_unknown_hardware_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hardware", "h100x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opcount: error: unknown hardware 'h100x': did you mean h100")
