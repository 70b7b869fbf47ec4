"""The bound and the estimate against published serving measurements (docs/measured/serving.csv)."""

from __future__ import annotations

import math
import warnings
from functools import cache
from pathlib import Path

import pytest

from opcount.llm.validation import Case, evaluate, load

TABLE = Path(__file__).parents[2] / "docs" / "measured" / "serving.csv"
ROWS = load(TABLE)


@cache
def case(name: str) -> Case:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return evaluate(next(r for r in ROWS if r["case"] == name))


@pytest.mark.parametrize("name", [r["case"] for r in ROWS])
def test_no_measured_run_beats_the_bound(name: str) -> None:
    c = case(name)
    assert c.bound <= c.measured
    assert c.bound <= c.estimate


def test_every_case_says_what_was_measured() -> None:
    for row in ROWS:
        for key in ("source", "engine", "model", "weight", "act", "hardware", "tp", "batch", "input", "output"):
            assert row[key], (row["case"], key)


def test_the_estimate_is_within_15_percent_geometric_mean() -> None:
    kept = [case(r["case"]) for r in ROWS if not r["missed"]]
    assert len(kept) >= 6
    geomean = math.exp(sum(abs(math.log(c.estimate / c.measured)) for c in kept) / len(kept)) - 1
    assert geomean <= 0.15
