"""Files the command writes (issue 42): an existing ``-o``, ``--csv-meta`` or ``--plot`` file survives a
write that fails part way byte-identical; a name Python decoded from bytes that are not UTF-8 is written
as its escape in every format; CSV cells that a spreadsheet would run as formulas are defused unless
``--csv-raw``; ``$`` in a name is text in the charts; ``-o`` through a symlink writes its target."""

from __future__ import annotations

import csv
import errno
import io
import json
import os
from pathlib import Path

import pytest
import torch
from torch import nn

from opcount.cli import main
from opcount.files import write as write_module

SURROGATE = os.fsdecode(b"bad\xffname")  # a file name that is not UTF-8, as Python decodes it: "bad\udcffname"
FORMULAS = ["=HYPERLINK(1)", "+cmd", "-2", "@SUM(A1)", "\tx", "\rx"]
MATH = ["price$5", "$\\foo{x}$"]
OLD = b"the report as it was\n"


def odd_names(names: tuple[str, ...] = (*FORMULAS, *MATH)) -> tuple[nn.Module, tuple[torch.Tensor]]:
    """A stack of linear layers named ``names``: 4 x 4 weights, 16 multiply-adds each."""
    model = nn.Sequential()
    for name in names:
        model.add_module(name, nn.Linear(4, 4))
    return model, (torch.randn(1, 4),)


def surrogate_name() -> tuple[nn.Module, tuple[torch.Tensor]]:
    return odd_names((SURROGATE,))


ODD = "tests.cli.test_cli_files:odd_names"


def _no_space(*args: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize(
    ("written", "flags"),
    [
        ("out.json", ["-o", "FILE"]),
        ("meta.json", ["--format", "csv", "--csv-meta", "FILE"]),
        ("chart.png", ["--hardware", "h100-sxm", "--plot", "FILE"]),
    ],
)
def test_a_failed_write_leaves_the_file_byte_identical(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, written: str, flags: list[str]
) -> None:
    if written.endswith(".png"):
        pytest.importorskip("matplotlib")
    target = tmp_path / written
    target.write_bytes(OLD)
    flags = [str(target) if f == "FILE" else f for f in flags]
    monkeypatch.setattr(write_module.os, "fsync", _no_space)  # a full disk, found as the file is flushed
    assert main([ODD, "-q", *flags]) == 2
    monkeypatch.undo()
    err = capsys.readouterr().err.strip().splitlines()
    flag = flags[flags.index(str(target)) - 1]
    assert err == [f"opcount: error: {flag} {target}: cannot write it (No space left on device)"]
    assert target.read_bytes() == OLD
    assert [p.name for p in tmp_path.iterdir()] == [written]  # no temporary file left beside it


@pytest.mark.parametrize("ending", [".csv", ".md", ".txt", ".html", ".json"])
def test_a_name_that_is_not_utf8_is_written_as_its_escape(tmp_path: Path, ending: str) -> None:
    out = tmp_path / f"report{ending}"
    out.write_bytes(OLD)
    assert main(["tests.cli.test_cli_files:surrogate_name", "-q", "-o", str(out)]) == 0
    text = out.read_text(encoding="utf-8")  # valid UTF-8, whole
    if ending == ".json":
        assert [m["name"] for m in json.loads(text)["modules"]] == [".", SURROGATE]  # read back as the name
    else:
        assert "bad\\udcffname" in text


def test_the_tree_on_stdout_escapes_it_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tests.cli.test_cli_files:surrogate_name", "-q", "--format", "tree"]) == 0
    assert "bad\\udcffname (Linear)" in capsys.readouterr().out


def _cells(text: str) -> list[str]:
    return [row["name"] for row in csv.DictReader(io.StringIO(text, newline=""))][1:]  # the model's own row left out


def test_csv_cells_that_spreadsheets_run_are_defused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([ODD, "-q", "--format", "csv"]) == 0
    assert _cells(capsys.readouterr().out) == [*("'" + f for f in FORMULAS), *MATH]  # OWASP: a leading '


def test_csv_raw_writes_the_names_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([ODD, "-q", "--format", "csv", "--csv-raw"]) == 0
    assert _cells(capsys.readouterr().out) == [*FORMULAS, *MATH]  # the exact round trip
    assert main([ODD, "-q", "--csv-raw"]) == 2
    assert "--csv-raw writes CSV cells as they are: add --format csv (not table)" in capsys.readouterr().err


def test_compare_and_numbers_are_left_as_they_are(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", ODD, "tests.fixtures.models:nested", "-q", "--format", "csv", "--by-operator"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert {r["model"] for r in rows} == {ODD, "tests.fixtures.models:nested"}
    assert all(not r["macs"].startswith("'") for r in rows)


def test_dollars_in_names_are_text_in_the_charts(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    chart, page = tmp_path / "chart.svg", tmp_path / "report.html"
    # \foo is no TeX command: drawn as math, the chart failed ("ValueError: \foo{x}")
    assert main([ODD, "-q", "--hardware", "h100-sxm", "--plot", str(chart), "-o", str(page)]) == 0
    assert "<!-- price$5 -->" in (tmp_path / "chart.time.svg").read_text()
    html = page.read_text()  # its charts keep text as text: each name one <text>, as it reads
    assert ">price$5<" in html and ">$\\foo{x}$<" in html


def test_an_llm_chart_names_its_model_as_text(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("transformers")
    folder = tmp_path / "$\\foo{x}$"
    folder.mkdir()
    sizes = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2}
    (folder / "config.json").write_text(
        json.dumps({"model_type": "llama", "num_hidden_layers": 1, "vocab_size": 100, **sizes})
    )
    chart = tmp_path / "sweep.png"
    flags = ["--phase", "decode", "--sweep", "batch=1,2", "--hardware", "h100-sxm", "--plot", str(chart), "-q"]
    assert main([f"hf:{folder}", *flags]) == 0
    assert chart.read_bytes().startswith(b"\x89PNG")


def test_o_through_a_symlink_writes_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_bytes(OLD)
    real.chmod(0o640)
    link = tmp_path / "link.json"
    link.symlink_to(real.name)
    assert main([ODD, "-q", "-o", str(link)]) == 0
    assert link.is_symlink() and json.loads(real.read_text())["total"]["flops"] == 16 * len(FORMULAS + MATH)
    assert real.stat().st_mode & 0o777 == 0o640


def test_o_through_a_dangling_symlink(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    made = tmp_path / "made.json"
    link = tmp_path / "link.json"
    link.symlink_to(made.name)
    assert main([ODD, "-q", "-o", str(link)]) == 0  # written through, as a shell's > would
    assert link.is_symlink() and made.is_file()
    lost = tmp_path / "lost.json"
    lost.symlink_to("missing/x.json")
    assert main([ODD, "-q", "-o", str(lost)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"opcount: error: -o {lost}: a link to missing/x.json, whose folder '{tmp_path / 'missing'}' does not exist"
    )


def test_o_to_a_device_is_written_in_place() -> None:
    assert main([ODD, "-q", "-o", os.devnull]) == 0
