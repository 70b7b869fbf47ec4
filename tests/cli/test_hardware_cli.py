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


@pytest.mark.parametrize(
    ("name", "said"), [("missing.toml", "no hardware file 'missing.toml'"), ("npu.toml", "is a folder")]
)
def test_a_file_that_is_not_there_is_one_line(
    tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, said: str
) -> None:
    # the missing file printed Python's class name ("FileNotFoundError: ..."), the folder was called missing
    monkeypatch.chdir(tmp_path)
    (tmp_path / "npu.toml").mkdir()
    assert main(["hardware", name]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opcount: error: ") and err.count("\n") == 1
    assert said in err and "Error:" not in err


def test_an_empty_output_name_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # -o "" printed the table to the terminal, as if no -o were given
    assert main(["hardware", "h100", "-o", ""]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "opcount: error: -o needs a file name, got ''\n"
