"""The command line's modules stay small and talk through public names: each has one job (parser,
model loaders, analyses, rendering, warnings, orchestration), none is over 500 lines, and none
imports another's underscore names (what two commands share is public where it is defined)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "opcount"
MAX_LINES = 500
# The modules of the `opcount` and `opcount compare` commands and the LLM flags.
CLI_MODULES = sorted({*PACKAGE.glob("cli*.py"), PACKAGE / "compare.py", PACKAGE / "llm" / "command.py"})


def _private_imports(path: Path) -> list[str]:
    """``from .x import _y`` and ``x._y`` on a module imported from opcount, as ``line: text``."""
    tree = ast.parse(path.read_text())
    found: list[str] = []
    modules: set[str] = set()  # names bound to opcount modules: `from . import cli`
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("opcount")):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}")
                modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_cli_module_is_under_the_line_limit(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"opcount/{path.relative_to(PACKAGE)} has {lines} lines: split it by job"


@pytest.mark.parametrize("path", CLI_MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_cli_module_imports_no_private_name(path: Path) -> None:
    assert _private_imports(path) == [], f"opcount/{path.relative_to(PACKAGE)} reaches into another module"


def test_cli_module_says_its_job() -> None:
    missing = [p.name for p in CLI_MODULES if not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []


def test_the_private_import_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from . import cli, report\n"
        "from .cli import _number_format, main\n"
        "from opcount.cli_models import _random\n"
        "from os import _exit\n"  # not opcount's
        "cli._captured_warnings(True)\n"
        "report.COLUMNS, cli.__name__\n"
    )
    assert _private_imports(sample) == [
        "2: from .cli import _number_format",
        "3: from opcount.cli_models import _random",
        "5: cli._captured_warnings",
    ]
