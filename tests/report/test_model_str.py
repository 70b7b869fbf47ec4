"""The model printed with its costs: ``flop_count_str(..., columns=...)`` and ``--format repr``.

Nested (tests/fixtures/models.py) on a [4, 10] input: inner 1200 flops and 325 parameters (fc1 4*10*20
and 10*20+20, fc2 4*20*5 and 20*5+5), head 60 and 18, unused never called, 12 parameters; the
model 1260 flops, 355 parameters.
"""

from __future__ import annotations

import pytest
import torch

from opcount import ActivationCountAnalysis, FlopCountAnalysis
from opcount import report as R
from opcount.cli import main
from tests.fixtures.models import Nested

NESTED = "tests.fixtures.models:nested"


@pytest.fixture(scope="module")
def model_and_flops() -> tuple[Nested, FlopCountAnalysis]:
    model = Nested().eval()
    return model, FlopCountAnalysis(model, torch.randn(4, 10))


def _annotations(text: str) -> dict[str, str]:
    """Each annotated module's line, keyed by the line of repr() it follows."""
    lines = text.splitlines()
    return {lines[i - 1].strip(): line.strip() for i, line in enumerate(lines) if line.strip().startswith("#params")}


def test_columns_inline_with_their_shares(model_and_flops) -> None:
    _, flops = model_and_flops
    text = R.flop_count_str(flops, columns=("params", "flops"), number_format=R.EXACT)
    found = _annotations(text)
    # counts under fvcore's convention (1 per multiply-add) say their unit: MACs
    assert found["Nested("] == "#params: 355 (100.0%), #MACs: 1260 (100.0%)"
    assert found["(inner): Inner("] == "#params: 325 (91.5%), #MACs: 1200 (95.2%)"
    assert found["in_features=5, out_features=3, bias=True"] == "#params: 18 (5.1%), #MACs: 60 (4.8%)"
    assert found["in_features=3, out_features=3, bias=True"] == "#params: 12 (3.4%), #MACs: N/A"
    assert text.startswith("N/A indicates")


def _fvcore_str(model: Nested) -> str:
    fvcore_nn = pytest.importorskip("fvcore.nn")
    analysis = fvcore_nn.FlopCountAnalysis(model, torch.randn(4, 10))
    analysis.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    return fvcore_nn.flop_count_str(analysis)


def test_the_model_is_laid_out_as_fvcore_lays_it_out(model_and_flops) -> None:
    model, flops = model_and_flops
    ours = R.flop_count_str(flops, columns=("percent", "params", "flops"))
    assert "% MACs: 95.2%, #params: 0.33K (91.5%), #MACs: 1.2K (95.2%)" in ours  # fvcore's 2 decimals

    def layout(text: str) -> list[str]:
        return [line for line in text.splitlines() if not line.strip().startswith(("#params", "% MACs"))]

    assert layout(ours) == layout(_fvcore_str(model))


def test_activations_keep_fvcores_label(model_and_flops) -> None:
    model, flops = model_and_flops
    acts = ActivationCountAnalysis(model, torch.randn(4, 10))
    text = R.flop_count_str(flops, acts, columns=("flops", "activations"), number_format=R.EXACT)
    # fvcore's activations of a linear layer: its output elements, 4*20 for fc1
    assert "#MACs: 800 (63.5%), #acts: 80 (" in text


def test_without_columns_the_text_is_fvcores(model_and_flops) -> None:
    model, flops = model_and_flops
    assert R.flop_count_str(flops) == _fvcore_str(model)


def test_format_repr_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([NESTED, "--format", "repr", "--units", "exact", "-q"]) == 0
    out = capsys.readouterr().out
    assert "    #params: 220 (62.0%), #MACs: 800 (63.5%)" in out
    assert main([NESTED, "--format", "repr", "--hardware", "h100-sxm", "-q"]) == 0
    out = capsys.readouterr().out
    root = out.splitlines()[2]
    assert root.startswith("  #params: 355 (100.0%), #MACs: 1.26K (100.0%), time: ") and root.endswith("bound: memory")
    assert "% time" not in out  # the share is inline
    assert "h100-sxm (float32):" in out  # the roofline summary, as with the other text formats


@pytest.mark.parametrize("flag", [["--by-operator"], ["--depth", "1"]])
def test_format_repr_refuses_what_does_not_apply(capsys: pytest.CaptureFixture[str], flag: list[str]) -> None:
    assert main([NESTED, "--format", "repr", *flag]) == 2
    assert "do not apply to --format repr" in capsys.readouterr().err
