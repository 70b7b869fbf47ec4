"""``opcount compare``: several models side by side, every format, on models with closed-form costs.

tests.fixtures.report_models:tiny on 2x3x16x16: 472 parameters, 127360 flops (conv 2*8*16*16 outputs x
27 = 110592, batch norm 2 per element = 8192, relu and pooling 4096 each, linears 2*8*16 + 2*16*4
= 384). tests.fixtures.models:nested on 4x10: 355 parameters, 1260 flops (linears 4*10*20 + 4*20*5 + 4*5*3).
"""

from __future__ import annotations

import io
import json
import logging

import pandas as pd
import pytest

from opcount.cli import main

TINY = "tests.fixtures.report_models:tiny"
NESTED = "tests.fixtures.models:nested"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["compare", TINY, NESTED, *argv]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def _pipe_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines() if line.startswith("|")]


def test_one_row_per_model(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _pipe_rows(_run(capsys, "--units", "exact", "-q"))
    assert rows[0] == ["model", "#parameters", "#MACs"]
    assert rows[2:] == [[TINY, "472", "127360"], [NESTED, "355", "1260"]]


def test_markdown_right_aligns_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "--format", "md", "-q")
    lines = out.splitlines()
    assert lines[1].startswith("|:-") and lines[1].endswith("-:|")
    assert _pipe_rows(out)[3] == [NESTED, "355", "1.26K"]


def test_csv_reads_back_with_pandas_and_says_what_it_is(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    sidecar = tmp_path / "meta.json"
    out = _run(capsys, "--format", "csv", "--flops-per-mac", "2", "-q", "--csv-meta", str(sidecar))
    df = pd.read_csv(io.StringIO(out)).set_index("model")  # pandas' defaults: the header is the first line
    assert df.loc[NESTED, "params"] == 355 and df.loc[NESTED, "flops"] == 2 * 1260  # only linears: all MACs
    meta = json.loads(sidecar.read_text())
    assert meta["flops_per_mac"] == 2 and meta["preset"] == "default" and meta["tracer"] == "jit"
    assert meta["models"][NESTED]["inputs"] == [{"name": "args[0]", "shape": [4, 10], "dtype": "float32"}]
    assert meta["models"][TINY]["model_class"] == "Tiny"


def test_json_totals(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_run(capsys, "--format", "json", "--columns", "flops,percent", "-q"))
    assert data["columns"] == ["flops", "percent"]
    assert [(m["model"], m["total"]["flops"]) for m in data["models"]] == [(TINY, 127360), (NESTED, 1260)]
    assert data["models"][0]["inputs"][0]["shape"] == [2, 3, 16, 16]
    assert "operators" not in data


def test_meta_traces_every_model_with_the_dispatch_tracer(capsys: pytest.CaptureFixture[str]) -> None:
    # --meta implies --tracer dispatch, as for one model; compare used to trace with jit and fail on the first
    data = json.loads(_run(capsys, "--meta", "--format", "json", "-q"))
    assert [(m["model"], m["total"]["flops"]) for m in data["models"]] == [(TINY, 127360), (NESTED, 1260)]
    assert data["meta"]["tracer"] == "dispatch"


def test_by_operator_puts_models_in_columns(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _pipe_rows(_run(capsys, "--by-operator", "--units", "exact", "-q"))
    assert rows[0] == ["operator", TINY, NESTED]
    by_op = {row[0]: row[1:] for row in rows[2:]}
    assert by_op["conv"] == ["110592", ""]
    assert by_op["linear"] == ["384", "1260"]
    assert by_op["batch_norm"] == ["8192", ""]
    assert [row[0] for row in rows[2:4]] == ["conv", "batch_norm"]  # heaviest first, by the largest value


def test_by_operator_csv_is_long(capsys: pytest.CaptureFixture[str]) -> None:
    out = _run(capsys, "--by-operator", "--format", "csv", "--columns", "flops,percent", "-q")
    df = pd.read_csv(io.StringIO(out))
    assert list(df.columns) == ["model", "operator", "macs", "macs_percent"]  # 1 flop per multiply-add
    nested = df[df.model == NESTED]
    assert nested[["operator", "macs", "macs_percent"]].values.tolist() == [["linear", 1260, 100.0]]
    assert df[df.model == TINY].macs.sum() == 127360
    wide = df.pivot(index="operator", columns="model", values="macs")
    assert wide.loc["linear", TINY] == 384


def test_hardware_adds_time_and_bound_as_the_single_model_command_does(capsys: pytest.CaptureFixture[str]) -> None:
    data = json.loads(_run(capsys, "--format", "json", "--hardware", "h100-sxm", "-q"))
    assert data["columns"] == ["params", "flops", "time", "bound"]
    assert data["meta"]["hardware"] == "h100-sxm"
    assert data["models"][1]["roofline_dtype"] == "float32"
    assert main([NESTED, "--format", "json", "--hardware", "h100-sxm", "-q"]) == 0
    alone = json.loads(capsys.readouterr().out)["total"]
    assert data["models"][1]["total"]["time"] == alone["time"] and data["models"][1]["total"]["bound"] == alone["bound"]
    text = _run(capsys, "--hardware", "h100-sxm", "-q")
    assert _pipe_rows(text)[0] == ["model", "#parameters", "#MACs", "time", "bound"]
    assert text.rstrip().endswith("(roofline; docs/roofline.md)")


def test_warnings_name_their_model(capsys: pytest.CaptureFixture[str]) -> None:
    logging.disable(logging.NOTSET)  # tests/conftest.py silences opcount's log; this test reads it
    assert main(["compare", TINY, NESTED]) == 0
    err = capsys.readouterr().err.splitlines()
    assert f"opcount: warning: {TINY}: 1 submodule never called during the trace: unused (" in "\n".join(err)
    assert any(line.startswith(f"opcount: warning: {NESTED}: ") and "unused" in line for line in err)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([TINY, "resnet5O"], "unknown model 'resnet5O'"),
        ([TINY, TINY], f"model {TINY} named twice"),
        ([TINY, NESTED, "--format", "tree"], "not tree"),
        ([TINY, NESTED, "--depth", "1"], "--depth applies to one model's report"),
        ([TINY, NESTED, "--format", "csv", "--units", "K"], "json and csv are exact"),
        ([TINY, NESTED, "--columns", "time"], "need --hardware"),
        ([TINY, NESTED, "--recalibrate"], "--recalibrate applies to --hardware local"),
        ([TINY, NESTED, "--by-operator", "--columns", "params"], "no per-operator breakdown"),
        (
            [NESTED, "tests.fixtures.report_models:tiny_model", "--input", "4,10"],
            "tests.fixtures.report_models:tiny_model: could not trace",
        ),
        ([], "MODEL"),
    ],
)
def test_mistakes_exit_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert main(["compare", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opcount: error: ") and message in lines[0], captured.err
