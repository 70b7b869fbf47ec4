"""``opcount --help`` and ``opcount compare --help``: the usage names every form of the command,
compare's help lists only the flags compare takes, the guides are named by title (a pip install
has no docs/ folder: they ship in the source distribution), and the hf extra is said up front."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from opcount.cli import main
from opcount.cli.parser import NOT_FOR_COMPARE

ROOT = Path(__file__).resolve().parents[2]


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main([*argv, "--help"]) == 0
    return capsys.readouterr().out


def test_usage_names_every_form_of_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    usage = _help(capsys).split("\n\n")[0]
    assert "opcount [options] MODEL" in usage
    assert "opcount compare [options] MODEL [MODEL ...]" in usage
    assert "opcount hardware [NAME]" in usage


def test_compare_help_lists_only_the_flags_compare_takes(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, "compare")
    flags = set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text))
    refused = {f"--{dest.replace('_', '-')}" for dest in NOT_FOR_COMPARE}
    assert not flags & refused, flags & refused
    assert {"--hardware", "--columns", "--by-operator", "--format", "--verbose"} <= flags
    assert "tree" not in text.split("--format")[1].split("\n")[0]  # table, md, json, csv only
    assert "llm:" not in text  # compare refuses LLM phases
    for flag in sorted(refused):  # still parsed, so that the refusal says why
        argv = ["compare", "a", "b", flag, *([] if flag in ("--no-param-shapes", "--profile") else ["1"])]
        assert main(argv) == 2
        assert "error:" in capsys.readouterr().err


def test_help_names_guides_by_title_and_they_ship_in_the_sdist(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    assert "docs/llm.md" not in text and "docs/dispatch.md" not in text  # paths a pip user does not have
    for guide in ("tutorial.md", "glossary.md", "llm.md", "roofline.md"):
        assert guide in text and (ROOT / "docs" / guide).is_file()
    assert "graft docs" in (ROOT / "MANIFEST.in").read_text(encoding="utf-8").splitlines()


def test_help_says_llm_needs_the_hf_extra(capsys: pytest.CaptureFixture[str]) -> None:
    assert "llm: need the hf extra (pip install 'opcount[hf]')" in " ".join(_help(capsys).split())


def test_llm_without_transformers_says_so_before_any_flag_check(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)
    # --profile would be refused for LLM phases: the missing extra is what the user must hear first
    assert main(["llm:gpt2", "--phase", "decode", "--profile"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("opcount: error: llm:gpt2: ") and "pip install 'opcount[hf]'" in err
