"""docs/architecture.md is the map of the package: every module on it, none over 500 lines."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "opcount"
PAGE = (ROOT / "docs" / "architecture.md").read_text()
MODULES = sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py"))


def _named(module: str) -> bool:
    """A module is named by its path, by its package folder (a family of modules, described
    together), or, inside a package whose modules the page lists by file name, by its file name."""
    folder, name = module.rsplit("/", 1)
    if f"`{module}`" in PAGE or f"`{folder}/`" in PAGE and folder != "opcount":
        return True
    return name != "__init__.py" and f"`{name}`" in PAGE


@pytest.mark.parametrize("module", MODULES)
def test_every_module_is_on_the_map(module: str) -> None:
    assert _named(module), f"{module} is not named in docs/architecture.md"


@pytest.mark.parametrize("module", MODULES)
def test_no_module_is_over_500_lines(module: str) -> None:
    lines = len((ROOT / module).read_text().splitlines())
    assert lines <= 500, f"{module}: {lines} lines"


def test_every_path_on_the_map_exists() -> None:
    paths = set(re.findall(r"`(opcount/[\w/]+(?:\.py|/))`", PAGE))
    assert paths, "the page names no path"
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, missing
