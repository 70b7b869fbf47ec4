"""``opcount simulate``'s outputs on the command line: goodput and the summary in the JSON, the files beside the
report (--per-request, --schedule-trace, --plot), --format csv, and the refusals of bad targets and file names."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from opcount.cli.simulate import _bar
from tests.fixtures.command import error_line, run

pytest.importorskip("transformers")

SMALL = {
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000,
}  # fmt: skip
BASE = ["simulate", "hf:LlamaConfig", *(f"--hf-config={k}={v}" for k, v in SMALL.items()), "--hardware", "h100-sxm"]
WORKLOAD = ["--rate", "50", "--requests", "20", "--input-len", "64", "--output-len", "4"]


def test_goodput_and_the_files_beside_the_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    files = {name: tmp_path / name for name in ("sim.json", "rows.csv", "schedule.json", "latency.png")}
    status, _, err = run(
        capsys, *BASE, *WORKLOAD, "--slo-ttft", "p90:10s", "--slo-tpot", "1ms", "-o", str(files["sim.json"]),
        "--per-request", str(files["rows.csv"]), "--schedule-trace", str(files["schedule.json"]),
        "--plot", str(files["latency.png"]), "-q",
    )  # fmt: skip
    assert status == 0, err
    sim = json.loads(files["sim.json"].read_text())["simulation"]
    assert sim["requests"] == 20
    assert sim["ttft"]["p50"] == pytest.approx(sim["metrics"]["p50_ttft_ms"] / 1000)
    assert sim["goodput"]["good_requests"] == 20  # a small model on an H100: every request far inside both
    assert sim["goodput"]["requests_per_s"] == pytest.approx(sim["metrics"]["request_throughput"])
    assert [t["metric"] for t in sim["goodput"]["targets"]] == ["ttft", "tpot"] and sim["goodput"]["met"]
    rows = list(csv.DictReader(files["rows.csv"].open()))
    assert len(rows) == 20 and {r["output_tokens"] for r in rows} == {"4"}
    trace = json.loads(files["schedule.json"].read_text())
    assert sum(e.get("cat") == "step" for e in trace["traceEvents"]) == sim["metrics"]["steps"]
    assert files["latency.png"].read_bytes()[:4] == b"\x89PNG"


def test_the_table_shows_goodput_met_and_missed(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *BASE, *WORKLOAD, "--slo-ttft", "p99:10s", "--slo-e2el", "0.01ms")
    assert status == 0, err
    assert "goodput: 0 requests/s: 0 of 20 requests (0.0%) met every target" in out
    assert "TTFT p99 " in out and "against 10 s: met" in out and "against 0.01 ms: missed" in out


def test_format_csv_writes_the_runs_row(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *BASE, *WORKLOAD, "--format", "csv")
    assert status == 0, err
    header, row = csv.reader(out.strip().splitlines())
    assert dict(zip(header, row, strict=True))["completed"] == "20"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--slo-ttft", "2"], "--slo-ttft 2: a ttft target is a duration with its unit"),
        (["--slo-tpot", "p200:1s"], "--slo-tpot p200:1s: a percentile is above 0 and at most 100"),
        (["--slo-e2el", "0s"], "--slo-e2el 0s: a e2el target must be above 0 s"),
        (["--slo-itl=-5ms"], "--slo-itl -5ms: a itl target is a duration"),
        (["--per-request", "/nonexistent/rows.csv"], "no folder '/nonexistent'"),
        (["--per-request", "same.json", "-o", "same.json"], "-o writes the same file"),
    ],
)
def test_bad_targets_and_files_are_one_line(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in error_line(capsys, *BASE, "--rate", "1", *extra)


def test_the_progress_bar_fills_with_the_requests_done() -> None:
    shown: list[str] = []
    show = _bar(shown.append)
    show(0, 10)
    show(5, 10)
    show(10, 10)
    assert shown[1] == f"simulating |{'#' * 12}{'.' * 12}| 5 of 10 requests done"
    assert shown[2].startswith(f"simulating |{'#' * 24}|")
