"""The HTML report's content, read as text: the numbers it shows, names escaped, nothing fetched,
the charts (or the note saying matplotlib is missing), and ``--format html`` on the command line.
How it behaves in a browser is tests/report/test_html_browser.py.

Tiny (tests/fixtures/report_models.py) on a [2, 3, 16, 16] input, 1 flop per multiply-add:
stem.0 = 2 * 8*16*16 * 3*3*3 = 110592, blocks.0 = 2 * 8 * 16 = 256, blocks.1 = 2 * 16 * 4 = 128;
parameters 8*3*3*3 + 8 = 224 (conv), 16 (batch norm), 8*16 + 16 = 144, 16*4 + 4 = 68, 4*4 + 4 = 20.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis
from opcount import report as R
from opcount.cli import main
from opcount.errors import OpcountTypeError
from opcount.memory import MemoryTrafficAnalysis
from opcount.roofline import roofline
from tests.analysis.test_warnings import Warned  # a custom operator opcount has no formula for
from tests.fixtures.report_models import tiny

TINY = "tests.fixtures.report_models:tiny"
EVIL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def analyses() -> tuple[FlopCountAnalysis, MemoryTrafficAnalysis, object]:
    model, x = tiny()
    memory = MemoryTrafficAnalysis(model, x)
    return FlopCountAnalysis(model, x), memory, roofline(memory, hardware="h100-sxm", dtype="float32")


def _row_titles(page: str, module: str) -> list[str]:
    """The exact values (cell tooltips) of one module's row in the tree."""
    found = re.search(rf'data-module="{re.escape(module)}"[^>]*>(?:<summary[^>]*>)?(.*?)</(?:div|summary)>', page)
    assert found, module
    return re.findall(r'<span class="num[^"]*" title="([^"]*?)(?: \(|")', found.group(1))


def test_tree_rows_hold_the_closed_form_counts(analyses) -> None:
    flops, _, _ = analyses
    page = R.html_report(flops, charts=False)
    assert _row_titles(page, "stem.0") == ["224", "110592"]  # params, flops
    assert _row_titles(page, "blocks.0") == ["144", "256"]
    assert _row_titles(page, "blocks.1") == ["68", "128"]
    assert 'class="row leaf uncalled" data-module="unused"' in page


def test_summary_bars_and_operator_table_with_a_roofline(analyses) -> None:
    flops, memory, rl = analyses
    page = R.html_report(flops, rl, memory=memory, charts=False)
    total = flops.total()
    summary = page[page.index('id="summary"') : page.index('id="modules"')]
    cards = dict(re.findall(r'<div class="label">([^<]+)</div><div class="value" title="([^"]*)"', summary))
    assert cards == {
        "MACs": str(total),  # the analysis counts 1 per multiply-add: the card says MACs
        "parameters": str(224 + 16 + 144 + 68 + 20),
        "bytes moved": str(memory.total()),
        "roofline time": repr(rl.total_time),
        "bound": "",
    }
    assert "h100-sxm" in summary
    # bars are scaled to the model: the root's are full, stem.0's is its share of the flops
    assert re.search(r'data-module="\."[^>]*open><summary', page)  # the model: "." as in every export
    stem_share = 100 * 110592 / total
    assert (
        f'title="110592 ({stem_share:.1f}% of the model)"><span class="fill" style="width: {stem_share:.2f}%"' in page
    )
    headers = re.findall(r'<th data-key="([^"]+)"', page)
    assert headers == ["operator", "flops", "flops%", "bytes", "bytes%", "time", "time%", "bound"]
    rows = re.findall(r'<tr><td data-v="([^"]+)"><code>', page)
    assert sorted(rows) == sorted(flops.by_operator())
    # the conv row's share of the flops, worked from the totals
    conv = re.search(r'<tr><td data-v="conv">.*?</tr>', page)
    assert conv and f"{100 * 110592 / total:.1f}%" in conv.group(0)


def test_columns_follow_the_analyses_given(analyses) -> None:
    flops, _, _ = analyses
    page = R.html_report(flops, charts=False)
    assert re.findall(r'<th data-key="([^"]+)"', page) == ["operator", "flops", "flops%"]
    assert "bytes moved" not in page and 'id="charts"' not in page
    page = R.html_report(flops, columns=["flops", "percent"], max_depth=1, charts=False)
    assert 'data-module="stem"' in page and 'data-module="stem.0"' not in page
    # stem: the conv, batch norm in eval (2 per element, fvcore's) and relu (1 per element) on 2*8*16*16
    stem = 110592 + 2 * 4096 + 4096
    # exports keep 12 significant digits of a float (past them is the residue of float sums)
    assert _row_titles(page, "stem") == [str(stem), repr(float(f"{100 * stem / flops.total():.12g}"))]


def test_names_are_escaped_never_run() -> None:
    model = nn.Sequential()
    model.add_module(EVIL, nn.Linear(4, 4))
    page = R.html_report(FlopCountAnalysis(model, torch.randn(1, 4)), model=EVIL, charts=False)
    assert EVIL not in page
    assert html.escape(EVIL) in page
    assert page.count("<script>") == 1  # the page's own


def test_the_page_fetches_nothing(analyses) -> None:
    pytest.importorskip("matplotlib")
    flops, memory, rl = analyses
    page = R.html_report(flops, rl, memory=memory)
    assert page.count("<svg") == 2  # the roofline chart and the time chart, inline
    assert not re.search(r"<(link|img|iframe)\b|<script[^>]+src=|url\((?!#)|@import", page)
    assert not re.search(r'(href|src)="(https?:)?//', page)
    assert "<?xml" not in page and "<!DOCTYPE svg" not in page
    assert R.html_report(flops, rl, memory=memory) == page  # the same model gives the same file


def test_without_matplotlib_the_page_says_so(analyses, monkeypatch: pytest.MonkeyPatch) -> None:
    flops, memory, rl = analyses
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    page = R.html_report(flops, rl, memory=memory)
    assert "<svg" not in page
    assert "The roofline and time charts need matplotlib" in page


def test_unsupported_operators_are_named() -> None:
    analysis = FlopCountAnalysis(Warned(), torch.randn(2, 4)).tracer_warnings("none").unsupported_ops_warnings(False)
    page = R.html_report(analysis, charts=False)
    assert "<code>opcount_warnings_test::blur</code> (2&times;)" in page


def test_cli_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.html"
    assert main([TINY, "--format", "html", "-o", str(out), "--quiet"]) == 0
    page = out.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "bytes moved" in page  # the page asks for the bytes without --columns
    assert "<td>tests.fixtures.report_models:tiny</td>" in page  # the model as given, in the metadata
    assert _row_titles(page, "stem.0")[:2] == ["224", "110592"]


@pytest.mark.parametrize(
    "flags",
    [["--by-operator"], ["--units", "K"], ["--profile"]],
)
def test_cli_refuses_flags_the_page_ignores(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([TINY, "--format", "html", *flags]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "--format html" in err


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"analysis": None}, "analysis must be a FlopCountAnalysis, got NoneType"),
        ({"analysis": "resnet18"}, "analysis must be a FlopCountAnalysis, got str"),
        ({"roofline": "h100-sxm"}, "roofline must be a RooflineReport"),
        ({"memory": "flops"}, "memory must be a MemoryTrafficAnalysis, got FlopCountAnalysis"),
        ({"activations": 3}, "activations must be an ActivationCountAnalysis, got int"),
        ({"meta": 5}, "meta must be a mapping or a bool, got int"),
        ({"columns": "flops"}, "columns must be a list of column names, got the string 'flops'"),
    ],
)
def test_a_wrong_argument_is_named(analyses, given: dict, named: str) -> None:  # type: ignore[no-untyped-def]
    # each failed deep inside: an AttributeError about 'model' or 'hardware', or "unknown column 'f'"
    flops, _, _ = analyses
    kwargs = {"analysis": flops, "charts": False, **given}
    if given.get("memory") == "flops":
        kwargs["memory"] = flops  # a FlopCountAnalysis where the bytes' analysis belongs
    with pytest.raises(OpcountTypeError, match=re.escape(named)):
        R.html_report(**kwargs)
