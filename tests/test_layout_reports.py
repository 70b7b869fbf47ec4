"""The reports are laid out by concern: each module of opcount.report says its job in its
docstring and stays under 500 lines, and opcount.report still offers every name it always has."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import opcount
from opcount import report

PACKAGE = Path(opcount.__file__).parent
# report*.py too: a flat module beside the package would be one of them.
REPORT_MODULES = sorted([*PACKAGE.glob("report*.py"), *(PACKAGE / "report").glob("*.py"), PACKAGE / "units.py"])
MAX_LINES = 500

# What `from opcount.report import ...` has always offered (fvcore-compatible code imports these).
PUBLIC = (
    "COLUMNS COMPACT EXACT FVCORE_STR FVCORE_TABLE Column NumberFormat Sources check_max_depth csv_rows "
    "exact flop_count_str flop_count_table format_number module_table operator_table parameter_count "
    "parameter_count_table register_column resolve_columns to_csv to_dict to_json to_markdown tree_str"
).split()


def test_the_report_is_a_package_of_several_modules() -> None:
    assert (PACKAGE / "report" / "__init__.py").is_file()
    assert not (PACKAGE / "report.py").exists()
    assert len(REPORT_MODULES) >= 6


@pytest.mark.parametrize("path", REPORT_MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_each_report_module_is_short_and_says_its_job(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: {len(text.splitlines())} lines"
    assert ast.get_docstring(ast.parse(text)), f"{path.name} has no module docstring"


@pytest.mark.parametrize("name", PUBLIC)
def test_opcount_report_keeps_its_public_names(name: str) -> None:
    assert hasattr(report, name)


def test_fvcore_printers_stay_at_the_top_level() -> None:
    from opcount import flop_count_str, flop_count_table, parameter_count, parameter_count_table

    assert flop_count_table is report.flop_count_table
    assert flop_count_str is report.flop_count_str
    assert parameter_count is report.parameter_count
    assert parameter_count_table is report.parameter_count_table
