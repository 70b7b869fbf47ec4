"""The benchmark scripts run end to end on a small model (their timings are not checked here:
speed targets live in the scripts, measured side by side, never in unit tests)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def run(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_jit_floor_prints_a_row_per_model():
    out = run("jit_floor.py", "--models", "mlp20", "--runs", "1")
    cell = r"[0-9.]+ \([0-9]+%\)"
    # bare jit, then the three reads and opcount's analysis, each with its share of bare tracing
    assert re.search(rf"^\| mlp20 \| [0-9.]+ \| {cell} \| {cell} \| {cell} \| {cell} \|$", out, re.MULTILINE), out


def test_speed_machinery_times_each_piece_with_and_without():
    out = run("speed_machinery.py", "--models", "mlp20", "--runs", "1")
    row = r" \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$"
    for piece, tracers in {"garbage collector": ("jit", "meta"), "leaf-module replay": ("meta",)}.items():
        for tracer in tracers:
            assert re.search(rf"^\| {piece}[^|]* \| mlp20 {tracer}{row}", out, re.MULTILINE), out


@pytest.mark.slow  # four fresh interpreters importing transformers: ~20 s of CPU
def test_llm_sweep_times_the_api_and_the_cli():
    out = run("llm_sweep.py", "--layers", "1", "--batch", "1,2", "--kv-len", "8", "--runs", "1")
    assert re.search(r"API: imports [0-9.]+ s, built in [0-9.]+ s, 2 points in [0-9.]+ s", out), out
    assert re.search(r"CLI sweep: 2 rows in [0-9.]+ s wall, [0-9.]+ s CPU", out), out
    assert re.search(r"CLI sweep without --hardware: [0-9.]+ s wall, [0-9.]+ s CPU", out), out
    assert re.search(r"baseline \(import torch, transformers; .*\): [0-9.]+ s wall", out), out
    assert re.search(r"API grid: 1000 points in [0-9.]+ s", out), out
    assert "figures equal: True" in out
    assert re.search(r"CLI, one point \(llm:llama-3-70b --meta .*\): [0-9.]+ s wall, [0-9.]+ s CPU, peak RSS", out), out


@pytest.mark.slow  # two fresh interpreters importing transformers and a plan of one configuration: ~30 s of CPU
def test_plan_70b_reports_the_plan_against_its_floor():
    out = run(
        "plan_70b.py", "--model", "llm:llama-3-8b", "--hardware", "h100-sxm", "--prices", "h100-sxm=2",
        "--max-devices", "1",
    )  # fmt: skip
    assert re.search(r"floor \(import torch, transformers, LlamaForCausalLM\): [0-9.]+ s, [0-9]+ MB", out), out
    assert re.search(r"plan: [0-9.]+ s wall, [0-9.]+ s CPU .* 1 configurations searched, 1 simulated", out), out
    assert "cheapest meeting the targets: 1 x h100-sxm tp1" in out
    assert re.search(r"ratio to the target: [0-9.]+ x 60 s wall", out), out
