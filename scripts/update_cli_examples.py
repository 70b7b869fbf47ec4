"""Keep the command-line examples of README.md and docs/**/*.md what the command prints.

    .venv/bin/python scripts/update_cli_examples.py            # rewrite the stale outputs in place
    .venv/bin/python scripts/update_cli_examples.py --check    # exit 1 and print a diff if any is stale
    .venv/bin/python scripts/update_cli_examples.py docs/reports.md   # one page only

An example is a fenced block whose first line starts with ``$ opcount ``. It may hold several
commands, each a ``$ opcount ...`` line followed by what it prints, stdout and stderr in the order a
terminal shows them (``opcount: warning: ...`` before the report, ``opcount: error: ...`` alone).
Each command runs as ``python -m opcount`` from the repository root with ``PYTHONPATH`` set to it,
its words split as a shell would (``shlex``, a ``# comment`` after the command dropped).

A comment on the line before a block marks an example that cannot be reproduced here (a GPU, measured
times, another machine's files); it is kept as written:

    <!-- cli: no-check (why) -->

The package's and torch's versions in an export's metadata are compared as "some version": the
check does not fail on an upgrade, and rewriting the page still records the current ones.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "$ opcount "
FENCE = re.compile(r"^```[^\n`]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!--\s*cli:\s*(.*?)\s*-->\s*\Z")
NO_CHECK = re.compile(r"no-check \(\S[^()]*\)")
# "# torch: "2.14.1+cu130"" (CSV metadata) and ""torch": "2.14.1+cu130"" (JSON)
VOLATILE = re.compile(r'((?:^# |")(?:opcount|torch)"?: )"[^"]*"', re.MULTILINE)
TIMEOUT_S = 900

Runner = Callable[[list[str]], str]


@dataclass(frozen=True)
class Command:
    line: int  # 1-based line of the ``$ opcount`` line in its page
    text: str  # as written after the ``$ ``, comment included
    output: str  # as documented, without a final newline

    @property
    def argv(self) -> list[str]:
        """The arguments after ``opcount``, as a shell splits them (a ``# comment`` dropped)."""
        return shlex.split(self.text, comments=True)[1:]


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    start: int  # offsets of the body (between the fences) in the page's text
    end: int
    commands: tuple[Command, ...]
    marker: str  # the ``cli:`` comment before the block, "" when none

    @property
    def where(self) -> str:
        return f"{_name(self.page)}:{self.line}"

    @property
    def checked(self) -> bool:
        return not self.marker.startswith("no-check")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix() if page.is_relative_to(ROOT) else str(page)


def blocks(page: Path) -> list[Block]:
    """The page's command examples, in order."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        body = match.group(1)
        if not body.startswith(PROMPT):
            continue
        before = text[: match.start()].rstrip()
        marker = MARKER.search(before)
        fence_line = text.count("\n", 0, match.start()) + 1
        found.append(
            Block(
                page,
                fence_line,
                match.start(1),
                match.end(1),
                _commands(body, fence_line + 1),
                marker.group(1) if marker else "",
            )
        )
    return found


def _commands(body: str, first_line: int) -> tuple[Command, ...]:
    commands: list[Command] = []
    output: list[str]
    text, line, output = "", 0, []  # the command being read: its line, its output so far
    for number, row in enumerate(body.rstrip("\n").split("\n"), first_line):
        if row.startswith(PROMPT):
            if text:
                commands.append(Command(line, text, "\n".join(output)))
            text, line, output = row[2:], number, []
        else:
            output.append(row)
    commands.append(Command(line, text, "\n".join(output)))
    return tuple(commands)


def run_subprocess(argv: list[str]) -> str:
    """What ``opcount ARGV`` prints in a terminal: stdout and stderr interleaved, unbuffered."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "opcount", *argv],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    return done.stdout


def run_in_process(argv: list[str]) -> str:
    """The same through ``opcount.cli.main`` in this process: for quick commands (no torch import
    per command). The current directory must be the repository root."""
    from opcount.cli import main

    both = io.StringIO()
    with contextlib.redirect_stdout(both), contextlib.redirect_stderr(both):
        main(argv)
    return both.getvalue()


def _clean(output: str) -> str:
    """As a page shows it: no trailing spaces, no final newline."""
    return "\n".join(row.rstrip() for row in output.rstrip("\n").split("\n"))


def same(documented: str, printed: str) -> bool:
    def masked(text: str) -> str:
        return VOLATILE.sub(r'\1"..."', _clean(text))

    return masked(documented) == masked(printed)


def fresh_body(block: Block, outputs: list[str]) -> str:
    rows = []
    for command, output in zip(block.commands, outputs, strict=True):
        rows.append(f"$ {command.text}")
        if _clean(output):
            rows.append(_clean(output))
    return "\n".join(rows) + "\n"


def diff(block: Block, outputs: list[str]) -> str:
    old = block.page.read_text(encoding="utf-8")[block.start : block.end]
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        fresh_body(block, outputs).splitlines(keepends=True),
        f"{block.where} (documented)",
        f"{block.where} (printed now)",
    )
    return "".join(lines)


def outputs_of(block: Block, runner: Runner) -> list[str]:
    return [runner(command.argv) for command in block.commands]


def is_stale(block: Block, outputs: list[str]) -> bool:
    return not all(same(c.output, o) for c, o in zip(block.commands, outputs, strict=True))


def update(page: Path, runner: Runner, check: bool, log: Callable[[str], None]) -> int:
    """Run the page's checked examples; rewrite the stale ones unless ``check``. The number stale."""
    text = page.read_text(encoding="utf-8")
    stale = 0
    for block in reversed(blocks(page)):  # from the end: earlier offsets stay valid
        if not block.checked:
            log(f"{block.where}: skipped ({block.marker})")
            continue
        outputs = outputs_of(block, runner)
        if is_stale(block, outputs):
            stale += 1
            log(diff(block, outputs))
            text = text[: block.start] + fresh_body(block, outputs) + text[block.end :]
    if stale and not check:
        page.write_text(text, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("pages", nargs="*", type=Path, help="pages to update (default: README.md, docs/**/*.md)")
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if any example is stale")
    args = parser.parse_args(argv)
    chosen = [p.resolve() for p in args.pages] or pages()
    stale = sum(update(page, run_subprocess, args.check, print) for page in chosen)
    if stale:
        print(f"{stale} stale example(s)" + ("" if args.check else ": rewritten"))
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    raise SystemExit(main())
