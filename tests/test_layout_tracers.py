"""The tracers' layout: small modules, one job each, and the dispatch tracer's entry where
importers expect it."""

from __future__ import annotations

from pathlib import Path

import opcount.tracers

TRACERS = Path(opcount.tracers.__file__).parent
MAX_LINES = 500


def test_no_tracer_module_is_over_500_lines() -> None:
    lengths = {path.name: len(path.read_text().splitlines()) for path in sorted(TRACERS.glob("*.py"))}
    assert "dispatch.py" in lengths
    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}


def test_every_tracer_module_says_its_job() -> None:
    undocumented = [
        path.name for path in sorted(TRACERS.glob("*.py")) if not path.read_text().lstrip().startswith('"""')
    ]
    assert undocumented == []


def test_the_dispatch_entry_and_its_error_stay_importable_from_dispatch() -> None:
    from opcount.tracers.dispatch import MODES, TrainingError, trace_dispatch
    from opcount.tracers.training import TrainingError as defined

    assert trace_dispatch is opcount.tracers.trace_dispatch
    assert TrainingError is defined and issubclass(TrainingError, ValueError)
    assert MODES == ("eval", "train")
