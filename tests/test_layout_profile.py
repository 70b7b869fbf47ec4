"""The profiler's layout: modules of one concern each, none over 500 lines, and the old import
path ``opcount.profile`` still serving the same objects, with ``opcount.profile`` the function."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import opcount

PACKAGE = Path(opcount.__file__).parent
MODULES = [PACKAGE / "profile.py", *sorted((PACKAGE / "profiling").glob("*.py"))]
MAX_LINES = 500


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_profiler_module_is_small_and_says_its_job(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= MAX_LINES, f"{path.name}: {len(text.splitlines())} lines"
    assert ast.get_docstring(ast.parse(text)), f"{path.name} has no module docstring"


def test_the_profiler_is_split_into_its_concerns() -> None:
    names = {p.stem for p in MODULES}
    assert {"measure", "runner", "events", "aggregate", "report"} <= names


# Run in a fresh interpreter: which of opcount.profile / opcount.profiling is loaded first, and
# when, decides what the attribute opcount.profile is bound to.
FRESH_IMPORTS = """
from opcount.profile import (
    MODULE_RANGE, PASS_RANGE, PYTHON, SELF, STATISTICS, ProfileError, ProfileReport, ProfileRow, profile,
)
import inspect
import sys
import opcount
import opcount.profile
import opcount.profiling
import opcount.profiling.report
from opcount.profiling import events, runner

assert opcount.profile is profile and inspect.isfunction(profile), opcount.profile
assert opcount.profiling.profile is profile
assert (opcount.ProfileError, opcount.ProfileReport, opcount.ProfileRow) == (ProfileError, ProfileReport, ProfileRow)
assert ProfileReport is opcount.profiling.report.ProfileReport and issubclass(ProfileError, opcount.OpcountError)
assert (PYTHON, SELF, STATISTICS) == ("(python)", "(self)", ("midmean", "median", "mean"))
assert (MODULE_RANGE, PASS_RANGE) == (runner.MODULE_RANGE, runner.PASS_RANGE) and events.PYTHON == PYTHON
assert sorted(sys.modules["opcount.profile"].__all__) == [
    "ProfileError", "ProfileReport", "ProfileRow", "STATISTICS", "profile",
]
print("ok")
"""


def test_old_import_path_serves_the_same_objects_and_opcount_profile_stays_the_function() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FRESH_IMPORTS], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
