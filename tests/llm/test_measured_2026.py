"""The published serving measurements of 2025-26 (docs/measured/serving_2026.csv): every row in the documented
schema, named by a catalogue model and a hardware preset, with its source. Nothing here prices a row."""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from pathlib import Path

import pytest

from opcount.hardware import PRESETS
from opcount.llm.models import catalogue
from opcount.llm.precision.dtypes import Precision

TABLE = Path(__file__).parents[2] / "docs" / "measured" / "serving_2026.csv"
COLUMNS = (
    "case,source,engine,version,model,hardware,devices,tp,ep,dp_attention,weight,act,kv,concurrency,rate,"
    "requests,input,output,lengths,max_model_len,kv_tokens,metric,stat,measured,note"
).split(",")
ENGINES = {"vLLM", "SGLang", "TensorRT-LLM"}
LATENCIES = {"tpot_ms", "itl_ms", "ttft_ms", "e2el_ms"}
THROUGHPUTS = {"out_tok_s_per_gpu", "total_tok_s_per_gpu", "out_tok_s", "req_s"}
STATS = {"mean", "p50", "p90", "p99"}
COMMIT = re.compile(r"@ [0-9a-f]{40}\b")  # a repository file at its commit
URL = re.compile(r"https://\S+")  # or a page, which the row dates


def rows() -> list[dict[str, str]]:
    with TABLE.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS
        return list(reader)


ROWS = rows()


def number(text: str) -> float:
    """A positive finite number; ``inf`` only where the column allows it (the request rate)."""
    value = float(text)
    assert value > 0 and not math.isnan(value), text
    return value


def test_the_set_is_large_enough_and_every_case_is_unique() -> None:
    assert len(ROWS) >= 40
    repeated = [case for case, n in Counter(r["case"] for r in ROWS).items() if n > 1]
    assert not repeated, repeated


@pytest.mark.parametrize("row", ROWS, ids=[r["case"] for r in ROWS])
def test_a_row_names_what_opcount_knows(row: dict[str, str]) -> None:
    assert all(row[c] is not None for c in COLUMNS), "a row with fewer fields than the header"
    assert re.fullmatch(r"[a-z0-9][a-z0-9.-]*", row["case"])
    assert row["engine"] in ENGINES and row["version"].strip()
    assert row["model"] in catalogue.names()
    assert row["hardware"] in PRESETS
    precision = Precision(weight=row["weight"], act=row["act"], kv=row["kv"])
    assert (precision.weight, precision.act, precision.kv) == (row["weight"], row["act"], row["kv"])  # canonical


@pytest.mark.parametrize("row", ROWS, ids=[r["case"] for r in ROWS])
def test_a_row_states_its_layout_and_workload(row: dict[str, str]) -> None:
    devices, tp, ep, dp = (int(row[c]) for c in ("devices", "tp", "ep", "dp_attention"))
    assert min(devices, tp, ep, dp) >= 1
    assert tp <= devices and ep <= devices and dp <= devices
    assert row["concurrency"] or row["rate"], "a closed loop's concurrency or an open loop's rate"
    if row["concurrency"]:
        assert float(row["concurrency"]).is_integer() and number(row["concurrency"]) >= 1
    if row["rate"]:
        assert row["rate"] == "inf" or math.isfinite(number(row["rate"]))
    if row["requests"]:
        assert float(row["requests"]).is_integer() and number(row["requests"]) >= 1
    number(row["input"])
    number(row["output"])
    assert row["lengths"] == "fixed" or row["lengths"].strip()


@pytest.mark.parametrize("row", ROWS, ids=[r["case"] for r in ROWS])
def test_a_row_says_what_was_measured_and_where(row: dict[str, str]) -> None:
    assert row["metric"] in LATENCIES | THROUGHPUTS
    assert row["stat"] in (STATS if row["metric"] in LATENCIES else STATS | {"total"})
    assert math.isfinite(number(row["measured"]))
    assert COMMIT.search(row["source"]) or URL.search(row["source"]), row["source"]


@pytest.mark.parametrize("row", [r for r in ROWS if r["kv_tokens"]], ids=lambda r: r["case"])
def test_a_logged_kv_cache_says_whose_log_it_is(row: dict[str, str]) -> None:
    # the cache decides who queues: a row carrying one names the engine log it was read from, in its note
    assert int(row["kv_tokens"]) >= 1
    assert f"kv_tokens {row['kv_tokens']}:" in row["note"]
