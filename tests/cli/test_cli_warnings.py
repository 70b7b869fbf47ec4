"""The command's warnings: one line per kind with a count, once per run whatever the number of
analyses, the whole lists behind ``--verbose``, and ``opcount compare`` giving the same lines,
each naming its model.

vit_h_14 (torchvision): 32 encoder layers, each a MultiheadAttention whose ``out_proj`` Linear
is never called as a module (the fused ``_native_multi_head_attention`` reads its weights), so 32
uncalled modules, all named ``...self_attention.out_proj``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from opcount.cli import main

VIT_H = "vit_h_14"
UNCALLED = [f"encoder.layers.encoder_layer_{i}.self_attention.out_proj" for i in range(32)]


@torch.library.custom_op("opcount_cli_warnings::smudge", mutates_args=())
def smudge(x: torch.Tensor) -> torch.Tensor:
    """An operator no handle knows."""
    return x + 1


@smudge.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


@torch.library.custom_op("opcount_cli_warnings::blot", mutates_args=())
def blot(x: torch.Tensor) -> torch.Tensor:
    """A second operator no handle knows."""
    return x * 3


@blot.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class TwoUnknown(nn.Module):
    """smudge three times, blot once, a Linear(4, 4) and ``spare``, never called."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.spare = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return blot(smudge(smudge(smudge(self.fc(x)))))


def two_unknown() -> tuple[nn.Module, torch.Tensor]:
    return TwoUnknown().eval(), torch.randn(2, 4)


TWO = "tests.cli.test_cli_warnings:two_unknown"


@pytest.fixture(autouse=True)
def _logging_on() -> Iterator[None]:
    logging.disable(logging.NOTSET)  # tests/conftest.py silences opcount's log; these tests read it
    yield


def _warnings(capsys: pytest.CaptureFixture[str], *argv: str) -> list[str]:
    assert main(list(argv)) == 0
    err = capsys.readouterr().err.splitlines()
    return [line for line in err if line.startswith("opcount: warning: ")]


def test_vit_h_14_warns_in_a_few_short_lines(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: one 1,995-character line naming all 32 out_proj modules. Four analyses here (flops,
    # activations, bytes, the roofline) each find the same uncalled modules: said once.
    pytest.importorskip("torchvision")
    argv = [
        VIT_H,
        "--meta",
        "--depth",
        "1",
        "--columns",
        "params,flops,activations,bytes,time",
        "--hardware",
        "h100-sxm",
    ]
    lines = _warnings(capsys, *argv)
    assert 1 <= len(lines) <= 5, lines
    assert max(len(line) for line in lines) <= 300, lines
    uncalled = [line for line in lines if "never called" in line]
    assert len(uncalled) == 1
    assert "32 submodules never called" in uncalled[0] and "out_proj x32" in uncalled[0]
    assert "--verbose lists them" in uncalled[0]

    verbose = _warnings(capsys, *argv, "--verbose")
    (whole,) = [line for line in verbose if "never called" in line]
    assert all(name in whole for name in UNCALLED)


def test_several_unsupported_operators_are_one_line_with_counts(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _warnings(capsys, TWO, "--columns", "params,flops,bytes")
    unsupported = [line for line in lines if "unsupported" in line]
    assert unsupported == [
        "opcount: warning: 2 unsupported operators, not counted in the columns named: "
        "opcount_cli_warnings::blot x1 (flops, bytes), opcount_cli_warnings::smudge x3 (flops, bytes)"
    ]
    assert sum("never called during the trace: spare (" in line for line in lines) == 1
    assert len(lines) == 2


def test_compare_gives_the_same_warnings_naming_the_model(capsys: pytest.CaptureFixture[str]) -> None:
    alone = _warnings(capsys, TWO, "--columns", "params,flops,bytes")
    compared = _warnings(capsys, "compare", TWO, "tests.fixtures.models:nested", "--columns", "params,flops,bytes")
    prefix = "opcount: warning: "
    ours = [line for line in compared if line.startswith(f"{prefix}{TWO}: ")]
    assert [line.replace(f"{TWO}: ", "", 1) for line in ours] == alone


def test_quiet_prints_none(capsys: pytest.CaptureFixture[str]) -> None:
    assert _warnings(capsys, TWO, "-q") == []
    assert _warnings(capsys, "compare", TWO, "tests.fixtures.models:nested", "-q") == []
