"""Installing next to the user's torch: the declared ranges, one version source, and torchvision
as an optional extra (the package imports and counts without it; the command line says how to get
it when a torchvision model name needs it)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

import opcount
from opcount.cli import main

pytestmark = pytest.mark.smoke  # also run on the oldest supported torch (scripts/smoke_torch213.sh)

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements(names: list[str]) -> dict[str, Requirement]:
    return {r.name: r for r in map(Requirement, names)}


def test_torch_is_a_range_that_holds_the_tested_releases() -> None:
    deps = _requirements(PROJECT["dependencies"])
    assert "torchvision" not in deps  # the `vision` extra
    assert "torchvision" in _requirements(PROJECT["optional-dependencies"]["vision"])
    torch = deps["torch"].specifier
    assert torch.contains("2.13.0") and torch.contains("2.14.1")
    assert "==" not in str(torch)  # exact versions live in scripts/constraints.txt only


def test_requires_python_excludes_what_the_code_cannot_run_on() -> None:
    # tomllib and typing.Self are Python 3.11's
    supported = SpecifierSet(PROJECT["requires-python"])
    assert not supported.contains("3.10") and supported.contains("3.11")


def test_one_version_source() -> None:
    pytest.importorskip("setuptools", minversion="77")  # the build backend pyproject names
    from setuptools.config.pyprojecttoml import read_configuration

    assert "version" not in PROJECT and "version" in PROJECT["dynamic"]
    assert read_configuration(ROOT / "pyproject.toml")["project"]["version"] == opcount.__version__


def _without_torchvision(code: str) -> subprocess.CompletedProcess:
    # None in sys.modules makes `import torchvision` raise ImportError, as when it is not installed.
    blocked = "import sys; sys.modules.update(dict.fromkeys(['torchvision', 'torchvision.models'], None))\n"
    return subprocess.run([sys.executable, "-c", blocked + code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_counts_without_torchvision() -> None:
    run = _without_torchvision(
        "import torch\n"
        "from opcount import FlopCountAnalysis\n"
        "import opcount.cli, opcount.handles.tv_ops\n"
        "print(FlopCountAnalysis(torch.nn.Linear(8, 4), torch.randn(2, 8)).total())\n"
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == [str(2 * 8 * 4)]  # batch x in x out multiply-adds


def test_torchvision_model_name_without_torchvision_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)
    monkeypatch.setitem(sys.modules, "torchvision.models", None)
    assert main(["resnet18"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opcount: error: ")
    assert "'resnet18'" in err and "pip install 'opcount[vision]'" in err
    # the torchvision built for the torch installed, so that pip keeps that torch
    minor = int(torch.__version__.split(".")[1])
    assert f"'torchvision=={_TORCHVISION_FOR_TORCH[minor]}.*'" in err


# torchvision's README, "Installation": the torchvision release built for each torch 2.x
_TORCHVISION_FOR_TORCH = {13: "0.28", 14: "0.29", 15: "0.30"}


@pytest.mark.parametrize(
    ("torch_version", "torchvision"), [("2.13.0", "0.28"), ("2.14.1+cu130", "0.29"), ("2.15.0", "0.30")]
)
def test_vision_hint_names_the_torchvision_of_the_installed_torch(torch_version: str, torchvision: str) -> None:
    from opcount.cli.models import vision_install_hint

    hint = vision_install_hint(torch_version)
    assert hint.startswith(f"pip install 'opcount[vision]' 'torchvision=={torchvision}.*'")
    assert f"torch {torch_version[:4]}" in hint


def test_vision_extra_allows_the_torchvision_of_every_supported_torch() -> None:
    # pyproject's bounds: torch>=2.13, and the vision extra must accept torchvision 0.28 (torch 2.13)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    (torch_req,) = [Requirement(r) for r in project["dependencies"] if r.startswith("torch")]
    (vision,) = [Requirement(r) for r in project["optional-dependencies"]["vision"]]
    for minor, release in _TORCHVISION_FOR_TORCH.items():
        assert torch_req.specifier.contains(f"2.{minor}.0")
        assert vision.specifier.contains(f"{release}.0"), (release, vision)


def test_torchvision_that_fails_to_load_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # What a torchvision build for another torch release does on import.
    (tmp_path / "torchvision").mkdir()
    (tmp_path / "torchvision" / "__init__.py").write_text(
        "raise RuntimeError('operator torchvision::nms does not exist')\n"
    )
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["resnet18"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("opcount: error: torchvision failed to load")
    assert "torchvision::nms does not exist" in err
