"""Rendering flags (``--columns``, ``--format`` with ``--depth``, ``--by-operator``, ``--units``) are
checked with the other flags, before a model is built: one line naming the flag, exit status 2."""

from __future__ import annotations

import pytest

from opcount import cli

TINY = "tests.fixtures.report_models:tiny"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([TINY, "--columns", "params,params"], "--columns: column params named twice in 'params,params'"),
        ([TINY, "--columns", "flops,acts,activations"], "column activations named twice"),
        ([TINY, "--format", "repr", "--depth", "1"], "--by-operator and --depth do not apply to --format repr"),
        ([TINY, "--format", "repr", "--by-operator"], "--by-operator and --depth do not apply to --format repr"),
        ([TINY, "--format", "tree", "--by-operator"], "--by-operator applies to table, csv and md"),
        ([TINY, "--format", "json", "--units", "K"], "--units, --decimals and --sig-figs apply to text formats"),
        ([TINY, "--format", "csv", "--decimals", "2"], "--units, --decimals and --sig-figs apply to text formats"),
    ],
)
def test_rendering_mistakes_are_refused_before_building(
    nothing_built: None, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_rendering_flags_a_format_uses_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([TINY, "--format", "tree", "--depth", "1", "--columns", "flops,acts"]) == 0
    assert cli.main([TINY, "--format", "md", "--by-operator", "--units", "K"]) == 0
    assert capsys.readouterr().out
