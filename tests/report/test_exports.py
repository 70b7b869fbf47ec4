"""Exports that say what they are: JSON's ``meta``, CSV's ``#`` lines, and a root row that
survives ``pandas.read_csv``.

Nested (tests/fixtures/models.py) on a [4, 10] input: 1260 flops (4*10*20 + 4*20*5 + 4*5*3), 355 parameters.
"""

from __future__ import annotations

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
from opcount.report.provenance import CSV_ROOT, input_specs, read_csv_meta
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


def test_csv_round_trips_through_pandas(nested: FlopCountAnalysis) -> None:
    text = R.to_csv(nested)
    df = pd.read_csv(io.StringIO(text), comment="#")
    assert not df["name"].isna().any()  # the root row's name survives
    assert df["name"].iloc[0] == CSV_ROOT == "."
    by_name = df.set_index("name")
    assert by_name.loc[".", "flops"] == 2 * 1260 and by_name.loc[".", "params"] == 355
    assert by_name.loc["inner.fc1", "flops"] == 2 * 4 * 10 * 20
    assert by_name.loc["head", "parent"] == "." and by_name.loc["inner.fc2", "parent"] == "inner"
    assert pd.isna(by_name.loc[".", "parent"])  # the model has no parent
    assert by_name["called"].dtype == bool and not by_name.loc["unused", "called"]
    assert read_csv_meta(text) == R.to_dict(nested)["meta"]


def test_operator_csv_round_trips_through_pandas(nested: FlopCountAnalysis) -> None:
    df = pd.read_csv(io.StringIO(R.to_csv(nested, level="operators")), comment="#")
    root = df[df["module"] == "."]
    assert root[["operator", "flops"]].values.tolist() == [["linear", 2 * 1260]]


def test_read_csv_meta_reads_a_file(tmp_path) -> None:
    path = tmp_path / "tiny.csv"
    path.write_text(R.to_csv(FlopCountAnalysis(*tiny())))
    assert read_csv_meta(path)["inputs"][0]["shape"] == [2, 3, 16, 16]
    with pytest.raises(ValueError, match="malformed CSV metadata line"):
        read_csv_meta("# no separator\nname\n")


def test_cli_exports_name_the_model_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [NESTED, "--hardware", "t4", "--roofline-dtype", "float16", "--flops-per-mac", "2", "-q"]
    assert main([*argv, "--format", "json"]) == 0
    meta = json.loads(capsys.readouterr().out)["meta"]
    assert (meta["model"], meta["model_class"], meta["flops_per_mac"]) == (NESTED, "Nested", 2)
    assert (meta["hardware"], meta["roofline_dtype"]) == ("t4", "float16")
    assert main([*argv, "--format", "csv", "--input", "2,10"]) == 0
    out = capsys.readouterr().out
    assert read_csv_meta(out)["inputs"] == [{"name": "args[0]", "shape": [2, 10], "dtype": "float32"}]
    df = pd.read_csv(io.StringIO(out), comment="#").set_index("name")
    assert df.loc[".", "flops"] == 2 * 2 * (10 * 20 + 20 * 5 + 5 * 3)
