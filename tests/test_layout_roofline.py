"""Layout by concern (DESIGN.md): the roofline and the analyses are modules of one job each, none
over 500 lines, and the names users import from ``opcount.roofline`` and ``opcount.analysis``
still import from there."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

import opcount

PACKAGE = Path(__file__).resolve().parents[1] / "opcount"
MAX_LINES = 500

ROOFLINE_MODULES = sorted((PACKAGE / "roofline").glob("*.py"))
ANALYSIS_MODULES = [PACKAGE / name for name in ("analysis.py", "op_keys.py", "invoke.py")]

# Every public name opcount/roofline.py defined when it was one module, and where it lives now.
ROOFLINE_NAMES = {
    "BOUNDS": "report",
    "Layer": "report",
    "LayerTime": "report",
    "RooflineReport": "report",
    "Summary": "report",
    "CONV_TRANSPOSED": "model",
    "FLOPS_PER_MAC": "model",
    "Groups": "model",
    "Scale": "model",
    "ScaleFn": "model",
    "gemm_channels": "model",
    "mac_array_scale": "model",
    "nvdla_scale_ops": "model",
    "speed_of_light": "model",
    "Source": "build",
    "fuse_modules": "build",
    "roofline": "build",
}


def test_the_roofline_is_a_package_of_several_modules() -> None:
    assert not (PACKAGE / "roofline.py").exists()
    assert {p.name for p in ROOFLINE_MODULES} >= {"__init__.py", "report.py", "model.py", "build.py", "columns.py"}


@pytest.mark.parametrize("path", ROOFLINE_MODULES + ANALYSIS_MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_module_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"opcount/{path.relative_to(PACKAGE).as_posix()} has {lines} lines"


@pytest.mark.parametrize("path", ROOFLINE_MODULES + ANALYSIS_MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_every_module_says_its_job(path: Path) -> None:
    name = "opcount." + path.relative_to(PACKAGE).with_suffix("").as_posix().replace("/", ".")
    module = importlib.import_module(name.removesuffix(".__init__"))
    assert (module.__doc__ or "").strip(), f"{path.name} has no docstring"


@pytest.mark.parametrize("module", ["opcount.roofline", "opcount.roofline.model", "opcount.roofline.build"])
def test_the_formula_modules_cite_the_amaix_paper(module: str) -> None:
    assert "AMAIX" in (importlib.import_module(module).__doc__ or "")


@pytest.mark.parametrize(("name", "home"), sorted(ROOFLINE_NAMES.items()))
def test_the_roofline_names_import_as_before(name: str, home: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from opcount.roofline import {name}", namespace)
    assert namespace[name] is getattr(importlib.import_module(f"opcount.roofline.{home}"), name)


def test_opcount_roofline_is_still_the_function() -> None:
    """``opcount.roofline(...)`` is the function, ``sys.modules["opcount.roofline"]`` the code."""
    from opcount.roofline import roofline

    assert opcount.roofline is roofline and callable(opcount.roofline)
    assert sys.modules["opcount.roofline"].__name__ == "opcount.roofline"


def test_importing_the_roofline_registers_its_report_columns() -> None:
    from opcount.report import COLUMNS

    assert {"time", "time_share", "bound", "unit"} <= set(COLUMNS)


@pytest.mark.parametrize("name", ["op_key", "family", "fvcore_kind", "fvcore_op_key"])
def test_the_operator_keys_import_from_analysis_as_before(name: str) -> None:
    from opcount import analysis, op_keys

    assert getattr(analysis, name) is getattr(op_keys, name)
