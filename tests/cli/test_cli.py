"""The ``opcount`` command, run as users run it: in a subprocess (``python -m opcount``).

The subprocesses start together (each pays torch's import once) so the module stays quick.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from opcount import FlopCountAnalysis
from opcount import report as R
from opcount.cli import main
from opcount.cli.parser import parse_shape
from tests.fixtures.optional import HAS_TORCHVISION
from tests.fixtures.report_models import tiny

pytestmark = pytest.mark.smoke  # also run on the oldest supported torch (scripts/smoke_torch213.sh)

ROOT = Path(__file__).resolve().parents[2]
TINY = "tests.fixtures.report_models:tiny"

# Each format, and the mistakes users make most; the other options are checked in process below.
COMMANDS: dict[str, list[str]] = {
    "table": [TINY],
    "tree": [TINY, "--format", "tree", "--columns", "params,flops,percent"],
    "json": [TINY, "--format", "json"],
    "csv": [TINY, "--format", "csv"],
    "md": [TINY, "--format", "md", "--units", "exact"],
    "unknown_model": ["resnet5O"],
    "malformed_shape": [TINY, "--input", "1,3,x"],
    "fails_on_input": ["tests.fixtures.report_models:tiny_model", "--input", "1,5,8,8"],
}
MISTAKES = ["unknown_model", "malformed_shape", "fails_on_input"]


@pytest.fixture(scope="module")
def runs() -> dict[str, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "opcount", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in COMMANDS.items()
    }
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


@pytest.fixture(scope="module")
def api() -> FlopCountAnalysis:
    torch.manual_seed(0)
    model, x = tiny()
    return FlopCountAnalysis(model, x)


def _ok(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    return run.stdout


def test_table_is_the_python_table(runs, api) -> None:
    assert _ok(runs["table"]) == R.module_table(api) + "\n"
    # fvcore's table but for its count's header, which says its unit (1 flop per multiply-add: MACs)
    assert _ok(runs["table"]).replace("#MACs ", "#flops") == R.flop_count_table(api) + "\n"


def test_tree(runs, api) -> None:
    assert _ok(runs["tree"]) == R.tree_str(api, columns=("params", "flops", "percent")) + "\n"


def test_json_total_is_the_python_total(runs, api) -> None:
    data = json.loads(_ok(runs["json"]))
    assert data["total"]["flops"] == api.total()
    assert data.pop("meta")["model"] == TINY  # the model as named on the command line
    assert data == json.loads(R.to_json(api, meta=False))


def test_csv_parses_and_totals_match(runs, api) -> None:
    rows = list(csv.DictReader(io.StringIO(_ok(runs["csv"]))))
    assert rows[0]["name"] == "." and int(rows[0]["macs"]) == api.total()  # the model's row: "."; 1 flop per MAC
    assert {r["name"]: int(r["macs"]) for r in rows} == {n or ".": v for n, v in api.by_module().items()}


def test_markdown_parses_and_total_matches(runs, api) -> None:
    lines = _ok(runs["md"]).splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    model_row = [c.strip() for c in lines[2].strip("|").split("|")]
    assert header == ["module", "type", "#parameters", "#MACs"]  # the default: 1 flop per multiply-add
    assert model_row == ["`.`", "Tiny", "472", str(api.total())]  # the model is "." in every export


@pytest.mark.parametrize("name", MISTAKES)
def test_mistakes_print_one_line_and_exit_2(runs, name: str) -> None:
    run = runs[name]
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opcount: error: "), run.stderr


def test_mistake_messages_name_the_problem(runs) -> None:
    # the suggestion; without torchvision, how to install it
    assert ("resnet50" if HAS_TORCHVISION else "opcount[vision]") in runs["unknown_model"].stderr
    assert "'1,3,x'" in runs["malformed_shape"].stderr
    assert "'stem.0'" in runs["fails_on_input"].stderr and "channels" in runs["fails_on_input"].stderr


# ----- in process: quick checks of options ------------------------------------------------------
def test_parse_shape() -> None:
    assert parse_shape("1,3,224,224") == (1, 3, 224, 224)
    assert parse_shape("1x3x8x8") == (1, 3, 8, 8)
    assert parse_shape("(2, 5)") == (2, 5)
    assert parse_shape("(5,)") == (5,)


@pytest.mark.parametrize("text", ["1,3,,4", ",3,4", "1x3xx4", "1,3,4,,"])
def test_parse_shape_refuses_an_empty_size(text: str) -> None:
    # a missing size is a typo: dropping it ran the model on a 3-d input the user never asked for
    with pytest.raises(argparse.ArgumentTypeError, match="malformed shape"):
        parse_shape(text)


def test_units_and_figures(capsys: pytest.CaptureFixture[str], api) -> None:
    assert main([TINY, "--format", "tree", "--units", "K", "--sig-figs", "2", "--depth", "0", "-q"]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[-2:] == ["0.47K", "130K"]
    assert main([TINY, "--by-operator", "--units", "exact", "--depth", "0", "-q"]) == 0
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in capsys.readouterr().out.splitlines()[2:]]
    assert {op: int(n) for _, op, n in rows} == dict(api.by_operator())


def test_json_refuses_rounding(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([TINY, "--format", "json", "--units", "M"]) == 2
    assert "exact" in capsys.readouterr().err


def test_transformers_model_from_its_config(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    small = ["n_layer=1", "n_embd=32", "n_head=2", "vocab_size=100", "n_positions=64"]
    argv = ["hf:GPT2Config", "--seq-len", "16", "--format", "json", "-q"]
    assert main(argv + [a for kv in small for a in ("--hf-config", kv)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "GPT2Model"
    # the attention and MLP projections: 4 * 16 tokens * 32 * 32 (c_attn 3x, c_proj 1x) + 2 * 16 * 32 * 128
    linear = sum(r["flops"] for r in data["operators"] if r["module"] == "." and r["operator"] == "addmm")
    assert linear == 16 * 32 * 32 * 4 + 2 * 16 * 32 * 128
    assert main(["hf:NoSuchConfig"]) == 2
    assert "unknown transformers class" in capsys.readouterr().err


def test_inputs_preset_and_flops_per_mac(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [
        "tests.fixtures.report_models:tiny_model",
        "--input",
        "1,3,8,8",
        "--format",
        "json",
        "--preset",
        "macs",
        "--flops-per-mac",
        "2",
    ]
    assert main(argv) == 0
    model, _ = tiny()
    expected = FlopCountAnalysis(model, torch.randn(1, 3, 8, 8), preset="macs", flops_per_mac=2).total()
    assert json.loads(capsys.readouterr().out)["total"]["flops"] == expected


def test_factory_from_a_file_and_output_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, api) -> None:
    out = tmp_path / "out.csv"
    assert (
        main(
            [
                f"{ROOT / 'tests' / 'fixtures' / 'report_models.py'}:tiny",
                "--format",
                "csv",
                "--by-operator",
                "-o",
                str(out),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == ""
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert sum(int(r["macs"]) for r in rows if r["module"] == ".") == api.total()


def test_torchvision_model_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    torchvision = pytest.importorskip("torchvision")

    assert main(["resnet18", "--input", "1,3,64,64", "--format", "json", "--depth", "1"]) == 0
    data = json.loads(capsys.readouterr().out)
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    assert data["total"]["flops"] == FlopCountAnalysis(model, torch.randn(1, 3, 64, 64)).total()
    assert max(m["depth"] for m in data["modules"]) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["tests.fixtures.report_models:tiny_model"], "--input"),
        (["tests.fixtures.report_models:not_a_model"], "returned int"),
        (["tests.fixtures.report_models:nope"], "no attribute 'nope'"),
        (["no.such.module:f"], "cannot import 'no.such.module'"),
        (["missing_file.py:f"], "no such file"),
        ([TINY, "--columns", "flops,speed"], "unknown column 'speed'"),
        ([TINY, "--columns", "flops", "--format", "tree", "--by-operator"], "--by-operator"),
        ([TINY, "--depth", "-1"], "non-negative"),
        ([TINY, "--hf-config", "x"], "--hf-config applies to hf: and llm: models"),
    ],
)
def test_more_mistakes_in_process(capsys: pytest.CaptureFixture[str], argv: list[str], message: str | None) -> None:
    status = main(argv)
    err = capsys.readouterr().err
    if message is None:
        assert status == 0
        return
    assert status == 2
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1 and message in err, err


def test_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tests.fixtures.report_models:tiny_model", "--input", "1,5,8,8", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("opcount: error: ")
