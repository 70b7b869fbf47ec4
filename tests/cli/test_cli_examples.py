"""Every ``$ opcount ...`` example of README.md and docs/**/*.md shows what the command prints.

The logic is scripts/update_cli_examples.py's ``--check`` (run the script without it to rewrite the
stale outputs). The default run checks the quick examples (mistakes, tests/fixtures/report_models.py's tiny
model) through ``opcount.cli.main`` in this process; ``pytest -m slow`` runs every example as the
script does, one ``python -m opcount`` per command (about 1.5 minutes on 2 cores).
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.scripts import load_script

cli_examples = load_script("update_cli_examples")
ROOT = cli_examples.ROOT
BLOCKS = [b for page in cli_examples.pages() for b in cli_examples.blocks(page)]


def _quick(command: Any) -> bool:
    """A mistake refused before or during a trace, or the tiny model (the fixture, docs/examples/tiny.py): well under a second."""
    return command.output.startswith("opcount: error:") or any(
        a.startswith(("tests.fixtures.report_models:", "docs/examples/tiny.py:")) for a in command.argv
    )


QUICK = [(b, c) for b in BLOCKS if b.checked for c in b.commands if _quick(c)]


def _where(item: tuple[Any, Any]) -> str:
    block, command = item
    return f"{cli_examples._name(block.page)}:{command.line}"


def test_examples_found() -> None:
    """The pages hold command examples, and each command is ``opcount`` with its arguments."""
    assert len(BLOCKS) >= 10
    assert QUICK
    for block in BLOCKS:
        for command in block.commands:
            assert command.text.split()[0] == "opcount", f"{block.where}: {command.text!r}"


def test_markers_are_recognised() -> None:
    """A misspelt marker would silently check (or skip) a block: each is ``no-check (reason)``."""
    for block in BLOCKS:
        if block.marker:
            assert cli_examples.NO_CHECK.fullmatch(block.marker), f"{block.where}: unknown marker {block.marker!r}"


@pytest.mark.parametrize("item", QUICK, ids=_where)
def test_quick_example_is_current(item: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    _, command = item
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))  # `opcount tests.fixtures.report_models:tiny`
    printed = cli_examples.run_in_process(command.argv)
    if not cli_examples.same(command.output, printed):
        shown = difflib.unified_diff(
            command.output.splitlines(), printed.splitlines(), "documented", "printed now", lineterm=""
        )
        pytest.fail(
            f"{_where(item)}: `{command.text}` is stale\n" + "\n".join(shown) + "\n"
            "(run scripts/update_cli_examples.py and review the diff)"
        )


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted({b.page for b in BLOCKS}), ids=cli_examples._name)
def test_every_example_is_current(page: Path) -> None:
    log: list[str] = []
    stale = cli_examples.update(page, cli_examples.run_subprocess, True, log.append)
    assert stale == 0, "\n".join(log) + "\n(run scripts/update_cli_examples.py and review the diff)"


# The script's own logic, on a page written here and a runner that prints what it is told.

PAGE = """# A page

```
$ opcount a --x 1   # a comment, dropped as a shell drops it
old output
$ opcount "b c"
```

<!-- cli: no-check (measured times) -->
```
$ opcount d
1.2 ms
```

```python
print("$ opcount e")
```
"""


def _runner(argv: list[str]) -> str:
    return f"ran {argv}  \n"  # trailing spaces and the final newline are not shown on a page


def test_commands_split_as_a_shell_does(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    first, second = cli_examples.blocks(page)
    assert [(c.line, c.argv, c.output) for c in first.commands] == [
        (4, ["a", "--x", "1"], "old output"),
        (6, ["b c"], ""),
    ]
    assert (first.line, first.checked) == (3, True)
    assert (second.line, second.checked, second.marker) == (10, False, "no-check (measured times)")


def test_check_reports_and_update_rewrites(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(PAGE, encoding="utf-8")
    log: list[str] = []
    assert cli_examples.update(page, _runner, True, log.append) == 1
    assert page.read_text(encoding="utf-8") == PAGE  # --check changes nothing
    assert "page.md:3 (documented)" in log[-1] and "-old output" in log[-1]
    assert cli_examples.update(page, _runner, False, log.append) == 1
    expected = PAGE.replace('old output\n$ opcount "b c"\n', "ran ['a', '--x', '1']\n$ opcount \"b c\"\nran ['b c']\n")
    assert page.read_text(encoding="utf-8") == expected  # the no-check block and the python block as they were
    assert cli_examples.update(page, _runner, True, log.append) == 0


def test_versions_are_not_a_difference() -> None:
    documented = '# opcount: "0.1.0"\n# torch: "2.14.1+cu130"\n{"torch": "2.14.1+cu130", "flops": 3}'
    assert cli_examples.same(documented, documented.replace("2.14.1+cu130", "2.15.0+cpu"))
    assert not cli_examples.same(documented, documented.replace('"flops": 3', '"flops": 4'))
