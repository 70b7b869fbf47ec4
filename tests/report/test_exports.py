"""Exports that say what they are: JSON's ``meta`` (and ``--csv-meta``), CSV that ``csv.DictReader``
and ``pandas.read_csv`` read with their defaults, units in CSV headers, one root name (``.``) everywhere.

Nested (tests/fixtures/models.py) on a [4, 10] input: 1260 flops (4*10*20 + 4*20*5 + 4*5*3), 355 parameters.
"""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pytest
import torch

import opcount
from opcount import FlopCountAnalysis, TensorShape
from opcount import report as R
from opcount.cli import main
from opcount.memory import MemoryTrafficAnalysis
from opcount.report.exports import FORMULA_STARTS
from opcount.report.provenance import input_specs
from opcount.roofline import roofline
from tests.fixtures.models import Nested
from tests.fixtures.report_models import tiny

NESTED = "tests.fixtures.models:nested"


@pytest.fixture(scope="module")
def nested() -> FlopCountAnalysis:
    return FlopCountAnalysis(Nested().eval(), torch.randn(4, 10), preset="macs", flops_per_mac=2)


def test_json_meta_names_versions_model_inputs_and_conventions(nested: FlopCountAnalysis) -> None:
    meta = json.loads(R.to_json(nested))["meta"]
    assert meta == {
        "opcount": opcount.__version__,
        "torch": torch.__version__,
        "model": "Nested",
        "model_class": "Nested",
        "inputs": [{"name": "args[0]", "shape": [4, 10], "dtype": "float32"}],
        "tracer": "jit",
        "mode": "eval",
        "device": None,
        "preset": "macs",
        "flops_per_mac": 2,
        "flops_unit": "FLOPs",
        "hardware": None,
        "roofline_dtype": None,
    }
    assert R.to_dict(nested)["total"]["flops"] == 2 * 1260


def test_meta_names_the_roofline_hardware_and_dtype() -> None:
    model, x = Nested().eval(), torch.randn(4, 10)
    report = roofline(MemoryTrafficAnalysis(model, x), hardware="h100-sxm", dtype="bfloat16")
    meta = R.to_dict(FlopCountAnalysis(model, x), columns=("flops", "time"), extra={"roofline": report})["meta"]
    assert (meta["hardware"], meta["roofline_dtype"]) == ("h100-sxm", "bfloat16")


def test_meta_of_the_dispatch_tracer_on_meta_tensors() -> None:
    analysis = FlopCountAnalysis(Nested(), TensorShape((4, 10)), tracer="dispatch", mode="train", device="meta")
    meta = R.to_dict(analysis)["meta"]
    assert (meta["tracer"], meta["mode"], meta["device"]) == ("dispatch", "train", "meta")
    assert meta["inputs"] == [{"name": "args[0]", "shape": [4, 10], "dtype": "float32"}]


def test_input_specs_name_every_tensor() -> None:
    ids = torch.zeros(1, 7, dtype=torch.int64)
    images = [torch.randn(3, 8, 8, dtype=torch.float16), torch.randn(3, 4, 4, dtype=torch.float16)]
    found = input_specs((images, 3), {"input_ids": ids, "extra": {"mask": torch.ones(7, dtype=torch.bool)}})
    assert found == [
        {"name": "args[0][0]", "shape": [3, 8, 8], "dtype": "float16"},
        {"name": "args[0][1]", "shape": [3, 4, 4], "dtype": "float16"},
        {"name": "input_ids", "shape": [1, 7], "dtype": "int64"},
        {"name": "extra.mask", "shape": [7], "dtype": "bool"},
    ]


def test_meta_can_be_replaced_or_left_out(nested: FlopCountAnalysis) -> None:
    assert "meta" not in R.to_dict(nested, meta=False)
    assert R.to_csv(nested, meta=False).startswith("name,type,parent,")
    assert R.to_dict(nested, meta={"model": "mine"})["meta"] == {"model": "mine"}


def test_csv_round_trips_through_pandas_and_dictreader(nested: FlopCountAnalysis) -> None:
    text = R.to_csv(nested)
    assert text.startswith("name,type,parent,depth,called,params,flops,")  # the header first, no metadata
    df = pd.read_csv(io.StringIO(text))  # pandas' defaults
    assert not df["name"].isna().any()  # the root row's name survives
    assert df["name"].iloc[0] == R.ROOT == "."
    by_name = df.set_index("name")
    # flops_per_mac=2: the column says flops; 2 flops per multiply-add of Nested's three linears
    assert by_name.loc[".", "flops"] == 2 * 1260 and by_name.loc[".", "params"] == 355
    assert by_name.loc["inner.fc1", "flops"] == 2 * 4 * 10 * 20
    assert by_name.loc["head", "parent"] == "." and by_name.loc["inner.fc2", "parent"] == "inner"
    assert pd.isna(by_name.loc[".", "parent"])  # the model has no parent
    assert by_name["called"].dtype == bool and not by_name.loc["unused", "called"]
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["name"] == "." and int(rows[0]["flops"]) == 2 * 1260


def test_json_names_the_root_as_csv_does(nested: FlopCountAnalysis) -> None:
    data = R.to_dict(nested)
    assert data["modules"][0]["name"] == "." and data["modules"][0]["parent"] is None
    assert {m["parent"] for m in data["modules"] if m["depth"] == 1} == {"."}
    assert {o["module"] for o in data["operators"]} >= {"."}


def test_csv_headers_say_macs_under_fvcores_convention() -> None:
    analysis = FlopCountAnalysis(Nested().eval(), torch.randn(4, 10), preset="macs")
    df = pd.read_csv(io.StringIO(R.to_csv(analysis)))
    assert "flops" not in df.columns
    assert df.set_index("name").loc[".", "macs"] == 1260 and "self_macs" in df.columns


def test_csv_times_in_seconds_without_float_residue() -> None:
    model, x = tiny()
    flops = FlopCountAnalysis(model, x)
    report = roofline(MemoryTrafficAnalysis(model, x), hardware="h100-sxm")
    text = R.to_csv(flops, columns=("flops", "time", "time_share", "bound"), extra={"roofline": report})
    df = pd.read_csv(io.StringIO(text)).set_index("name")
    assert {"macs", "time_s", "time_percent", "bound", "self_time_s"} <= set(df.columns)
    assert df.loc[".", "time_s"] == pytest.approx(report.total_time, rel=1e-11)
    assert df.loc[".", "time_percent"] == 100
    assert (df["self_time_s"] >= 0).all()  # a container's own time is 0, not a -1e-19 residue
    assert df.loc["stem", "self_time_s"] == 0
    assert df.loc["unused", "called"] == False  # noqa: E712
    assert pd.isna(df.loc["unused", "bound"])  # undefined: an empty cell


def test_operator_csv_round_trips_through_pandas(nested: FlopCountAnalysis) -> None:
    df = pd.read_csv(io.StringIO(R.to_csv(nested, level="operators")))
    root = df[df["module"] == "."]
    assert root[["operator", "flops"]].values.tolist() == [["linear", 2 * 1260]]


def test_markdown_escapes_a_pipe_in_a_module_name() -> None:
    model = torch.nn.Sequential()
    model.add_module("a|b", torch.nn.Linear(3, 2))
    analysis = FlopCountAnalysis(model, torch.randn(1, 3))
    for level in ("modules", "operators"):
        lines = R.to_markdown(analysis, level=level, columns=("flops",)).splitlines()
        assert all(line.replace("\\|", "").count("|") == lines[0].count("|") for line in lines)
        assert any("a\\|b" in line for line in lines)


def test_a_model_that_does_no_work_has_an_undefined_bound_in_total_and_row() -> None:
    model = torch.nn.Identity()
    x = torch.randn(2, 3)
    report = roofline(MemoryTrafficAnalysis(model, x), hardware="h100-sxm")
    data = R.to_dict(
        FlopCountAnalysis(model, x), columns=("flops", "time", "time_share", "bound"), extra={"roofline": report}
    )
    row = data["modules"][0]
    for key in ("bound", "time_share"):
        assert data["total"][key] is None and row[key] is None
    assert data["total"]["time"] == row["time"] == 0


def test_cli_exports_name_the_model_as_given(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    argv = [NESTED, "--hardware", "t4", "--roofline-dtype", "float16", "--flops-per-mac", "2", "-q"]
    assert main([*argv, "--format", "json"]) == 0
    meta = json.loads(capsys.readouterr().out)["meta"]
    assert (meta["model"], meta["model_class"], meta["flops_per_mac"]) == (NESTED, "Nested", 2)
    assert (meta["hardware"], meta["roofline_dtype"]) == ("t4", "float16")
    sidecar = tmp_path / "meta.json"
    assert main([*argv, "--format", "csv", "--input", "2,10", "--csv-meta", str(sidecar)]) == 0
    out = capsys.readouterr().out
    meta = json.loads(sidecar.read_text())
    assert meta["inputs"] == [{"name": "args[0]", "shape": [2, 10], "dtype": "float32"}]
    assert (meta["model"], meta["flops_per_mac"]) == (NESTED, 2)
    df = pd.read_csv(io.StringIO(out)).set_index("name")
    assert df.loc[".", "flops"] == 2 * 2 * (10 * 20 + 20 * 5 + 5 * 3)


def test_csv_meta_needs_the_csv_format(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert main([NESTED, "--csv-meta", str(tmp_path / "m.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--csv-meta" in err and "Traceback" not in err


@pytest.mark.parametrize("start", ["=", "+", "-", "@", "\t", "\r"])
def test_csv_text_cells_a_spreadsheet_would_run_are_defused(start: str) -> None:
    # OWASP's advice against CSV injection: a leading ' makes the cell text; numbers are never touched
    rows = [{"name": f"{start}cmd", "n": -3, "x": -2.5}]
    text = R.csv_rows(["name", "n", "x"], rows)
    assert list(csv.reader(io.StringIO(text, newline=""))) == [["name", "n", "x"], [f"'{start}cmd", "-3", "-2.5"]]
    raw = R.csv_rows(["name", "n", "x"], rows, raw=True)  # the exact round trip
    assert list(csv.DictReader(io.StringIO(raw, newline=""))) == [{"name": f"{start}cmd", "n": "-3", "x": "-2.5"}]


def test_a_carriage_return_in_a_cell_is_quoted() -> None:
    # with "\n" as the writer's line end a lone "\r" went unquoted, and readers took it for a line's end
    text = R.csv_rows(["name"], [{"name": "a\rb"}, {"name": "c\nd"}])
    assert text == 'name\n"a\rb"\n"c\nd"\n'
    assert FORMULA_STARTS == ("=", "+", "-", "@", "\t", "\r")
