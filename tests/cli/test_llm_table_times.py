"""The LLM path's module table, JSON and CSV show the estimate of the chosen kernels by module,
headed by the mode, and their whole model's time is the summary's; the non-LLM path keeps the
per-operator roofline."""

from __future__ import annotations

import csv
import io
import json

import pytest

pytest.importorskip("transformers")

from opcount.cli import main
from opcount.units import seconds

TINY = [
    "--hf-config", "hidden_size=64", "--hf-config", "intermediate_size=128",
    "--hf-config", "num_hidden_layers=2", "--hf-config", "num_attention_heads=4",
    "--hf-config", "num_key_value_heads=2", "--hf-config", "vocab_size=1000",
]  # fmt: skip
MOE = [
    "llm:mixtral-8x7b", *TINY, "--hf-config", "num_local_experts=4", "--hf-config", "num_experts_per_tok=2",
]  # fmt: skip


def run(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    status = main(list(args))
    out, err = capsys.readouterr()
    assert status == 0, err
    return out


@pytest.mark.parametrize("mode", ["fused", "eager"])
@pytest.mark.parametrize(
    "point",
    [
        ["llm:llama-3-8b", *TINY, "--phase", "decode", "--kv-len", "64"],
        ["llm:llama-3-8b", *TINY, "--seq-len", "32", "--batch", "2"],
        [*MOE, "--phase", "decode", "--kv-len", "16", "--batch", "4"],
    ],
    ids=["dense decode", "dense prefill", "moe decode"],
)
def test_the_whole_model_row_is_the_summary_time(
    capsys: pytest.CaptureFixture[str], point: list[str], mode: str
) -> None:
    args = [*point, "--hardware", "h100-sxm", "--kernels", mode]
    every = "params,flops,time,time_share,bound"  # JSON gives the exact statistics unless asked for more
    data = json.loads(run(capsys, *args, "--format", "json", "--columns", every))
    llm = data["llm"]
    # 12 significant digits in exports
    assert data["total"][f"time_{mode}"] == pytest.approx(llm["time"], rel=1e-11)
    assert data["total"][f"time_share_{mode}"] == 100
    assert data["total"][f"bound_{mode}"] in ("compute", "memory")
    assert sum(r["time_fused" if mode == "fused" else "time_eager"] for r in data["modules"] if r["depth"] == 1) == (
        pytest.approx(llm["time"], rel=1e-9)
    )
    table = run(capsys, *args, "--depth", "1")
    header, _, root = table.splitlines()[:3]
    assert f"| time ({mode}) " in header and f"| % time ({mode}) " in header and f"| bound ({mode}) " in header
    cells = [c.strip() for c in root.split("|")]
    assert cells[1] == "whole model" and cells[4] == seconds(llm["time"]) and cells[5] == "100.0%"
    # the summary prints the same figure
    assert f"{mode} kernels: " in table and seconds(llm["time"]) in table.split("\n\n")[-1]
    rows = list(csv.DictReader(io.StringIO(run(capsys, *args, "--format", "csv"))))
    assert {f"time_{mode}_s", f"time_{mode}_percent", f"bound_{mode}", f"self_time_{mode}_s"} <= set(rows[0])
    assert float(rows[0][f"time_{mode}_s"]) == pytest.approx(llm["time"], rel=1e-11)


def test_columns_named_by_the_user_are_the_estimates(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["llm:llama-3-8b", *TINY, "--phase", "decode", "--hardware", "h100-sxm"]
    out = run(capsys, *args, "--columns", "flops,time,bound", "--depth", "0")
    assert out.splitlines()[0].split("|")[2:5] == [" #MACs   ", " time (fused)   ", " bound (fused)   "]
    data = json.loads(run(capsys, *args, "--columns", "time,unit", "--format", "json"))
    assert data["columns"] == ["time_fused", "unit"]  # the unit column stays the roofline's


def test_a_generation_table_is_its_prefill(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["llm:llama-3-8b", *TINY, "--seq-len", "16", "--gen-len", "4", "--hardware", "h100-sxm"]
    data = json.loads(run(capsys, *args, "--format", "json", "--columns", "time"))
    assert data["total"]["time_fused"] == pytest.approx(data["llm"]["time_to_first_token"], rel=1e-11)


def test_by_operator_rows_sum_to_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    for mode in ("fused", "eager"):
        args = [*MOE, "--phase", "decode", "--kv-len", "8", "--hardware", "h100-sxm", "--kernels", mode]
        llm = json.loads(run(capsys, *args, "--by-operator", "--format", "json"))["llm"]
        rows = llm["by_operator"]
        assert sum(r[f"time_{mode}"] for r in rows) == pytest.approx(llm["time"], rel=1e-12)
        assert {r[f"bound_{mode}"] for r in rows} <= {"compute", "memory"}


def test_the_whole_model_path_keeps_the_roofline(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torchvision")
    out = run(capsys, "resnet18", "--hardware", "h100-sxm", "--depth", "0", "-q")
    header = [c.strip() for c in out.splitlines()[0].split("|")]
    assert header == ["", "module", "#parameters or shape", "#MACs", "time", "% time", "bound", ""]
