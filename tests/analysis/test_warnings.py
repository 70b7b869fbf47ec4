"""The warnings an analysis gives, as fvcore gives them: unsupported operators (once per
analysis, with counts), modules never called, the tracer's warnings by ``tracer_warnings``
mode, each switch that silences them, and the command's ``opcount: warning:`` lines."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis

ROOT = Path(__file__).resolve().parents[2]


@torch.library.custom_op("opcount_warnings_test::blur", mutates_args=())
def blur(x: torch.Tensor) -> torch.Tensor:
    """An operator no handle knows: unsupported under every preset."""
    return x * 0.5


@blur.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class Warned(nn.Module):
    """blur twice (unsupported), fc (counted: 2*4*3 = 24), ``spare`` never called and an
    Identity and a ModuleList that have nothing to run (left out of the warning); the forward
    warns (UserWarning) and branches on a tensor's value (a TracerWarning under jit)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.spare = nn.Linear(3, 3)
        self.skip = nn.Identity()
        self.blocks = nn.ModuleList()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        warnings.warn("the model's own warning", UserWarning, stacklevel=1)
        y = self.fc(blur(blur(x)))
        return y * 2 if bool(y.sum() > -1e9) else y


def warned() -> tuple[nn.Module, torch.Tensor]:
    """The model and input for ``opcount tests.analysis.test_warnings:warned``."""
    return Warned().eval(), torch.randn(2, 4)


def _messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith("opcount") and r.levelno == logging.WARNING]


@pytest.mark.parametrize("tracer", ["jit", "dispatch"])
def test_unsupported_operators_warned_once_per_analysis_with_counts(
    caplog: pytest.LogCaptureFixture, tracer: str
) -> None:
    a = FlopCountAnalysis(Warned(), torch.randn(2, 4), tracer=tracer).tracer_warnings("none")
    with caplog.at_level(logging.WARNING):
        assert a.by_operator()["linear"] == 24
        a.by_module()
        a.total("fc")
    unsupported = [m for m in _messages(caplog) if m.startswith("Unsupported operator")]
    assert unsupported == ["Unsupported operator opcount_warnings_test::blur encountered 2 time(s)"]


def test_uncalled_modules_warned_without_containers(caplog: pytest.LogCaptureFixture) -> None:
    a = FlopCountAnalysis(Warned(), torch.randn(2, 4)).tracer_warnings("none")
    with caplog.at_level(logging.WARNING):
        assert a.uncalled_modules() == {"spare", "skip", "blocks"}
    uncalled = [m for m in _messages(caplog) if "never called" in m]
    assert len(uncalled) == 1 and "during the trace: spare." in uncalled[0]


def test_each_warning_has_its_switch(caplog: pytest.LogCaptureFixture) -> None:
    a = FlopCountAnalysis(Warned(), torch.randn(2, 4)).tracer_warnings("none")
    with caplog.at_level(logging.WARNING):
        a.unsupported_ops_warnings(False).uncalled_modules_warnings(False).total()
    assert _messages(caplog) == []
    b = FlopCountAnalysis(Warned(), torch.randn(2, 4)).tracer_warnings("none").uncalled_modules_warnings(False)
    with caplog.at_level(logging.WARNING):
        b.total()
    assert [m.split(" encountered")[0] for m in _messages(caplog)] == [
        "Unsupported operator opcount_warnings_test::blur"
    ]


def _python_warnings(mode: str | None, tracer: str = "jit") -> list[type[Warning]]:
    a = FlopCountAnalysis(Warned(), torch.randn(2, 4), tracer=tracer)
    if mode is not None:
        a.tracer_warnings(mode)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a.total()
    return [w.category for w in caught if w.category in (UserWarning, torch.jit.TracerWarning)]


@pytest.mark.parametrize(
    "mode, shown",
    [
        ("all", {UserWarning, torch.jit.TracerWarning}),
        ("no_tracer_warning", {UserWarning}),
        (None, {UserWarning}),  # fvcore's default
        ("none", set()),
    ],
)
def test_tracer_warnings_modes(mode: str | None, shown: set[type[Warning]]) -> None:
    assert set(_python_warnings(mode)) == shown


def test_tracer_warnings_none_also_quiets_the_dispatch_tracer() -> None:
    assert set(_python_warnings("all", "dispatch")) == {UserWarning}  # no TracerWarning: no jit
    assert _python_warnings("none", "dispatch") == []


def test_tracer_warnings_rejects_an_unknown_mode() -> None:
    with pytest.raises(ValueError, match="unknown tracer warning mode 'some'"):
        FlopCountAnalysis(Warned(), torch.randn(2, 4)).tracer_warnings("some")


# ----- the command -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def command() -> dict[str, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    runs = {"plain": [], "quiet": ["--quiet"]}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "opcount", "tests.analysis.test_warnings:warned", *extra],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, extra in runs.items()
    }
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def test_command_prints_each_warning_on_one_line(command: dict[str, subprocess.CompletedProcess]) -> None:
    run = command["plain"]
    assert run.returncode == 0, run.stderr
    lines = [line for line in run.stderr.splitlines() if line.startswith("opcount: warning: ")]
    assert len(lines) == 2
    assert any(line.startswith("opcount: warning: Unsupported operator opcount_warnings_test::blur") for line in lines)
    assert any("1 submodule never called during the trace: spare (unused" in line for line in lines)
    assert "Traceback" not in run.stderr and "the model's own warning" not in run.stderr
    assert "| model " in run.stdout


def test_command_quiet_prints_no_warning(command: dict[str, subprocess.CompletedProcess]) -> None:
    run = command["quiet"]
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr.lower()
    assert run.stdout == command["plain"].stdout


class ManyUnused(nn.Module):
    """fc runs; 40 blocks each hold an ``out_proj`` Linear that never runs (as MultiheadAttention's
    fast path leaves its out_proj): the warning groups them by name instead of listing 40 paths."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.blocks = nn.ModuleList(nn.ModuleDict({"out_proj": nn.Linear(4, 4)}) for _ in range(40))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


def test_a_long_uncalled_list_is_grouped_by_name(caplog: pytest.LogCaptureFixture) -> None:
    a = FlopCountAnalysis(ManyUnused(), torch.randn(2, 4)).tracer_warnings("none")
    with caplog.at_level(logging.WARNING):
        a.total()
    (message,) = [m for m in _messages(caplog) if "never called" in m]
    assert "out_proj x40" in message and "(40 in all; uncalled_modules() names them)" in message
    assert len(message) < 400
    assert {f"blocks.{i}.out_proj" for i in range(40)} <= a.uncalled_modules()
