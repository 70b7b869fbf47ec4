"""Golden files: the table and the tree of a few models, byte for byte.

After an intended change, regenerate them and review the diff:

    pytest tests/report/test_report_golden.py --update-golden      (or OPCOUNT_UPDATE_GOLDEN=1 pytest ...)
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest
import torch

from opcount import FlopCountAnalysis
from opcount import report as R
from tests.fixtures.optional import torchvision
from tests.fixtures.report_models import Encoder, tiny

pytestmark = pytest.mark.smoke  # also run on the oldest supported torch (scripts/smoke_torch213.sh)

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture
def golden(request: pytest.FixtureRequest):
    update = (
        request.config.getoption("--update-golden", default=False) or os.environ.get("OPCOUNT_UPDATE_GOLDEN") == "1"
    )

    def check(name: str, text: str) -> None:
        path = GOLDEN / f"{name}.txt"
        if update:
            path.write_text(text + "\n", encoding="utf-8")
            return
        if not path.exists():
            pytest.fail(f"{path} is missing; create it with: pytest {__file__} --update-golden")
        expected = path.read_text(encoding="utf-8")
        if expected != text + "\n":
            diff = "\n".join(
                difflib.unified_diff(expected.splitlines(), text.splitlines(), "golden", "now", lineterm="")
            )
            pytest.fail(f"{path.name} differs (regenerate with --update-golden if intended):\n{diff}")

    return check


@pytest.fixture(scope="module")
def analyses() -> dict[str, FlopCountAnalysis]:
    torch.manual_seed(0)
    model, x = tiny()
    return {
        # The tiny model under the default preset; the others under fvcore's, whose set of
        # formulas is fixed, so these files change only when the report does.
        "tiny": FlopCountAnalysis(model, x),
        "encoder": FlopCountAnalysis(Encoder().eval(), torch.randn(2, 8, 16), preset="fvcore"),
        "resnet18": FlopCountAnalysis(
            torchvision.models.resnet18(weights=None).eval(),
            torch.randn(1, 3, 224, 224),
            preset="fvcore",
        ),
    }


@pytest.mark.parametrize("name", ["tiny", "encoder", "resnet18"])
def test_table(name: str, analyses: dict, golden) -> None:
    golden(f"{name}.table", R.flop_count_table(analyses[name]))


@pytest.mark.parametrize("name", ["tiny", "encoder", "resnet18"])
def test_tree(name: str, analyses: dict, golden) -> None:
    golden(f"{name}.tree", R.tree_str(analyses[name], columns=("params", "flops", "percent"), max_depth=4))


def test_model_string(analyses: dict, golden) -> None:
    golden("tiny.str", R.flop_count_str(analyses["tiny"]))


def test_operator_breakdown(analyses: dict, golden) -> None:
    golden("resnet18.operators", R.operator_table(analyses["resnet18"], max_depth=1))
