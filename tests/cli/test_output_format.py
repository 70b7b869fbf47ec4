"""``-o FILE`` picks the format by the file's ending unless ``--format`` says otherwise; a pair
that contradicts itself is one line and status 2; CSV files read back with tools' defaults."""

from __future__ import annotations

import csv
import json

import pandas as pd
import pytest

from opcount.cli import main

NESTED = "tests.fixtures.models:nested"  # Nested on [4, 10]: 1260 multiply-adds, 355 parameters


@pytest.mark.parametrize(
    ("ending", "check"),
    [
        (".json", lambda text: json.loads(text)["total"]["flops"] == 1260),
        (".csv", lambda text: text.startswith("name,type,parent,")),
        (".md", lambda text: text.startswith("| module ") and "| `.` " in text),
        (".html", lambda text: text.lstrip().lower().startswith("<!doctype html")),
        (".txt", lambda text: text.startswith("| module ") and "| model " in text),
        (".out", lambda text: text.startswith("| module ") and "| model " in text),  # unknown: the table
    ],
)
def test_the_ending_picks_the_format(tmp_path, ending: str, check) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / f"report{ending}"
    assert main([NESTED, "-q", "-o", str(path)]) == 0
    assert check(path.read_text())


def test_format_overrides_a_compatible_ending(tmp_path) -> None:
    path = tmp_path / "report.txt"
    assert main([NESTED, "-q", "--format", "tree", "-o", str(path)]) == 0
    assert path.read_text().startswith("module ")


@pytest.mark.parametrize(("fmt", "name"), [("csv", "x.json"), ("json", "x.csv"), ("md", "x.txt"), ("table", "x.md")])
def test_a_conflicting_pair_is_refused_in_one_line(
    tmp_path, capsys: pytest.CaptureFixture[str], fmt: str, name: str
) -> None:
    assert main([NESTED, "--format", fmt, "-o", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--format {fmt}" in err and "Traceback" not in err
    assert not (tmp_path / name).exists()


def test_compare_csv_reads_with_defaults(tmp_path) -> None:
    path, meta = tmp_path / "both.csv", tmp_path / "both.meta.json"
    tiny = "tests.fixtures.report_models:tiny"
    assert main(["compare", NESTED, tiny, "-q", "-o", str(path), "--csv-meta", str(meta)]) == 0
    df = pd.read_csv(path).set_index("model")
    assert list(df.columns) == ["params", "macs"]  # 1 flop per multiply-add: the column says macs
    assert df.loc[NESTED, "macs"] == 1260 and df.loc[NESTED, "params"] == 355
    with path.open() as f:
        assert [row["model"] for row in csv.DictReader(f)] == [NESTED, tiny]
    assert set(json.loads(meta.read_text())["models"]) == {NESTED, tiny}
