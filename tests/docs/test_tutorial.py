"""docs/tutorial.md runs as written: every command of its ```console blocks, in order, in one
scratch folder (the page's files, such as resnet18.json, are read by later commands), each
exiting 0 and printing what the page shows. docs/glossary.md has an entry for every term the
docs rely on, and every link into it names an entry.

``opcount`` commands run in this process (no torch import per command); ``pip install`` runs as
``pip install --dry-run --no-index`` from the repository root, which must resolve against the
installed packages and install opcount alone (an extra that would replace torch fails it);
anything else runs in bash with this interpreter first on the PATH.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from opcount.cli import main
from tests.fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TUTORIAL = DOCS / "tutorial.md"
GLOSSARY = DOCS / "glossary.md"
FENCE = re.compile(r"^```(console|bash|shell|sh)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
cli_examples = load_script("update_cli_examples")


@dataclass(frozen=True)
class Command:
    line: int
    text: str  # after the "$ "
    output: str  # as shown, "" when nothing is shown


def commands(page: Path) -> list[Command]:
    """The page's shell commands, in order, each with the output shown under it."""
    text = page.read_text(encoding="utf-8")
    found: list[Command] = []
    for match in FENCE.finditer(text):
        first = text.count("\n", 0, match.start(2)) + 1
        rows = list(enumerate(match.group(2).rstrip("\n").split("\n"), first))
        starts = [i for i, (_, row) in enumerate(rows) if row.startswith("$ ")]
        assert starts and starts[0] == 0, f"{page.name}:{first}: a block starts with its command"
        for start, end in zip(starts, [*starts[1:], len(rows)], strict=True):
            number, row = rows[start]
            found.append(Command(number, row[2:], "\n".join(r for _, r in rows[start + 1 : end])))
    return found


def _pip(argv: list[str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *argv[:1], "--dry-run", "--no-index", "--no-build-isolation", *argv[1:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    would = [line for line in done.stdout.splitlines() if line.startswith("Would install")]
    # opcount itself and nothing else: the extras' bounds accept what is installed, torch included
    assert [w.split()[2:] for w in would] in ([], [[f"opcount-{_version()}"]]), would
    return ""


def _version() -> str:
    from opcount import __version__

    return __version__


def _shell(text: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(ROOT),
    }
    done = subprocess.run(
        ["bash", "-c", text], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout
    return done.stdout


def run(command: Command, cwd: Path) -> str:
    argv = shlex.split(command.text, comments=True)
    if argv[0] == "opcount":
        # stdout and stderr in one, as a terminal shows them (scripts/update_cli_examples.py), and the status
        both = io.StringIO()
        with contextlib.redirect_stdout(both), contextlib.redirect_stderr(both):
            status = main(argv[1:])
        assert status == 0, both.getvalue()
        return both.getvalue()
    if argv[:2] == ["pip", "install"]:
        return _pip(argv[1:])
    return _shell(command.text, cwd)


def test_the_tutorial_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torchvision")
    pytest.importorskip("transformers")
    pytest.importorskip("matplotlib")
    found = commands(TUTORIAL)
    assert {c.text.split()[0] for c in found} >= {"pip", "opcount", "python"}
    asked = " ".join(c.text for c in found)
    for part in ("--hardware h100-sxm", "llm:", "opcount compare", "--format json", "--plot"):
        assert part in asked, part  # what the page promises to show
    monkeypatch.chdir(tmp_path)
    stale = []
    for command in found:
        printed = run(command, tmp_path)
        if command.output and not cli_examples.same(command.output, printed):
            stale.append(f"docs/tutorial.md:{command.line}: $ {command.text}\n{printed}")
    assert not stale, "\n\n".join(stale)
    assert (tmp_path / "resnet18.png").stat().st_size > 0 and (tmp_path / "resnet18.time.png").stat().st_size > 0


def test_the_tutorial_is_linked_first_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    first = re.search(r"\]\((docs/[^)#]+\.md)", readme)
    assert first is not None and first.group(1) == "docs/tutorial.md"
    assert "(docs/glossary.md)" in readme
    assert "(glossary.md)" in TUTORIAL.read_text(encoding="utf-8")


# The terms the pages use before, or without, defining them: each needs a glossary entry.
TERMS = [
    "speed of light",
    "AMAIX",
    "ridge point",
    "arithmetic intensity",
    "w16a16",
    "midmean",
    "MAC vs FLOP",
    "limited by",
    "bound",
    "layout",
    "tensor-parallel plan",
    "kernel schedule",
    "point",
    "layer type",
    "roofline",
    "prefill",
    "decode",
    "KV cache",
    "activation",
    "fvcore preset",
    "flop preset",
    "hardware preset",
    "meta tensors",
    "dispatch tracer",
    "jit tracer",
    "trace",
    "operator",
    "handle",
    "unsupported operator",
    "uncalled module",
    "bytes read and written",
    "tensor unit and vector unit",
    "calibration",
    "fusion",
    "sparsity roofline",
    "expected routing",
    "owner and caller",
    "profile",
]


def _slug(title: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")


def _entries() -> dict[str, str]:
    text = GLOSSARY.read_text(encoding="utf-8")
    parts = re.split(r"^### (.+)$", text, flags=re.MULTILINE)
    return {title.strip(): body.strip() for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_listed_term_has_an_entry() -> None:
    entries = {title.lower(): body for title, body in _entries().items()}
    missing = [t for t in TERMS if t.lower() not in entries]
    assert not missing, missing
    short = [t for t in TERMS if len(entries[t.lower()].split()) < 15]
    assert not short, f"entries of a few words do not define: {short}"


def test_every_link_into_the_glossary_names_an_entry() -> None:
    anchors = {_slug(title) for title in _entries()}
    broken = []
    for page in [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]:
        for anchor in re.findall(r"glossary\.md#([\w-]+)", page.read_text(encoding="utf-8")):
            if anchor not in anchors:
                broken.append(f"{page.name}#{anchor}")
    assert not broken, broken
