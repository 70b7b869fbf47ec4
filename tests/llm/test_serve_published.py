"""``opcount simulate`` beside a published ``vllm bench serve`` run (docs/measured/simulate.csv): no measurement
beats the bound. Slow: it traces GPT-OSS-20B."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from tests.fixtures.command import run

pytest.importorskip("transformers")
ROWS = list(csv.DictReader((Path(__file__).parents[2] / "docs" / "measured" / "simulate.csv").open()))


@pytest.mark.slow
def test_the_bound_is_never_beaten_by_the_published_run(capsys: pytest.CaptureFixture[str]) -> None:
    row = ROWS[0]  # the smallest: 1,000 prompts of 128 tokens
    status, out, err = run(
        capsys, "simulate", f"llm:{row['model']}", "--hardware", row["hardware"], "--concurrency", row["concurrency"],
        "--requests", row["requests"], "--input-len", row["input"], "--output-len", row["output"], "--format", "json", "-q",
    )  # fmt: skip
    assert status == 0, err
    sim = json.loads(out)["simulation"]
    bound, estimate = sim["bound"], sim["metrics"]
    assert bound["median_ttft_ms"] <= float(row["measured_median_ttft_ms"])
    assert bound["mean_tpot_ms"] <= float(row["measured_mean_tpot_ms"])
    assert bound["duration"] <= float(row["measured_duration_s"])
    assert estimate["duration"] >= bound["duration"]


def test_every_row_names_its_source_and_workload() -> None:
    assert len(ROWS) >= 3
    for row in ROWS:
        assert "@" in row["source"] and row["engine"].startswith("vLLM")
        assert all(int(row[k]) >= 1 for k in ("concurrency", "requests", "input", "output"))
