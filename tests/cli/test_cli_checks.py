"""The ``opcount`` command refuses mistakes before it builds anything: one line, exit status 2.

Cases that would allocate (or, before these checks, did allocate) run in subprocesses started
together, as tests/cli/test_cli.py does; the others run in process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from opcount import cli

ROOT = Path(__file__).resolve().parents[2]
TINY = "tests.fixtures.report_models:tiny_model"
SMALL_GPT2 = ["n_layer=1", "n_embd=32", "n_head=2", "vocab_size=100", "n_positions=64"]

# A user file named like a standard-library module, which itself uses that module.
JSON_PY = """
import json

import torch


def build():
    json.dumps({})  # the standard library's json, not this file
    return torch.nn.Linear(4, 2), torch.randn(1, 4)
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess]:
    user_file = tmp_path_factory.mktemp("user") / "json.py"
    user_file.write_text(JSON_PY)
    commands = {
        "huge_input": [TINY, "--input", "1,3,100000,100000"],
        "overflow_input": [TINY, "--input", "99999999999999999999,3,2,2"],
        "hf_huge_vocab": ["hf:GPT2Config", "--hf-config", "vocab_size=1000000000"],
        "stdlib_named_file": [f"{user_file}:build", "--format", "json"],
        "profile": [TINY, "--input", "1,3,8,8", "--profile", "--repeats", "1", "-q"],
    }
    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}  # kineto's default level
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", "opcount", *args],
            cwd=ROOT,
            env={**env, "PYTHONWARNINGS": "ignore"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, args in commands.items()
    }
    done = {}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        done[name] = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    return done


def _one_error(run: subprocess.CompletedProcess) -> str:
    assert run.returncode == 2, run.stderr
    assert run.stdout == "" and "Traceback" not in run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opcount: error: "), run.stderr
    return lines[0]


def test_an_input_over_the_budget_is_refused_with_its_size(runs) -> None:
    line = _one_error(runs["huge_input"])
    assert f"{1 * 3 * 100_000 * 100_000:,} elements" in line and "8 GiB" in line and "--meta" in line


def test_a_size_past_int64_is_refused(runs) -> None:
    assert "2**63 - 1" in _one_error(runs["overflow_input"])


def test_transformers_weights_over_the_budget_are_refused_with_the_count(runs) -> None:
    # GPT-2 small with a 10**9-token vocabulary: the embedding 10**9 x 768, position embedding
    # 1024 x 768, final norm 2 x 768, and 12 blocks of two norms (2 x 768 each), c_attn
    # 768 x 2304 + 2304, attn c_proj 768 x 768 + 768, c_fc 768 x 3072 + 3072, mlp c_proj 3072 x 768 + 768.
    block = 2 * 2 * 768 + (768 * 2304 + 2304) + (768 * 768 + 768) + (768 * 3072 + 3072) + (3072 * 768 + 768)
    params = 10**9 * 768 + 1024 * 768 + 2 * 768 + 12 * block
    line = _one_error(runs["hf_huge_vocab"])
    assert f"{params:,} parameters" in line and "--meta" in line


def test_a_user_file_named_like_a_stdlib_module_is_imported_privately(runs) -> None:
    run = runs["stdlib_named_file"]
    assert run.returncode == 0, run.stderr
    assert '"flops"' in run.stdout


def test_profile_keeps_the_profilers_c_lines_off_stderr(runs) -> None:
    run = runs["profile"]
    assert run.returncode == 0, run.stderr
    assert "USDT" not in run.stderr and "gpuGetDeviceCount" not in run.stderr, run.stderr


# ----- in process ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([TINY, "--meta", "--tracer", "jit"], "--meta needs the dispatch tracer: leave out --tracer jit"),
        ([TINY, "--mode", "train"], "--mode train needs --tracer dispatch"),
        ([TINY, "--meta", "--profile"], "--profile runs the model on real tensors: leave out --meta"),
        ([TINY, "--hardware", "h100-sxm", "--roofline-dtype", "int4"], "--roofline-dtype: invalid choice: 'int4'"),
        ([TINY, "--roofline-dtype", "float16"], "--roofline-dtype applies to the roofline: add --hardware"),
        ([TINY, "--fuse"], "--fuse applies to the roofline"),
        ([TINY, "--input", "0,3,8,8"], "--input 0,3,8,8: sizes must be positive"),
        (["hf:GPT2Config", "--seq-len", str(2 * 10**9)], f"--seq-len {2 * 10**9}: {2 * 10**9:,} elements"),
        ([TINY, "--columns", "flops,time"], "need --hardware"),
        ([TINY, "-o", "/no-such-folder/x.txt"], "-o /no-such-folder/x.txt: no folder '/no-such-folder'"),
        ([TINY, "--hardware", "t4", "--plot", "chart.xyz"], "--plot chart.xyz: name a chart file ending in .png"),
        ([TINY, "-q", "-v"], "argument -v/--verbose: not allowed with argument -q/--quiet"),
        (["compare", TINY, "--quiet", "--verbose"], "argument -v/--verbose: not allowed with argument -q/--quiet"),
    ],
)
def test_flag_mistakes_are_refused_before_building(
    nothing_built: None, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("n_layer=abc", "--hf-config n_layer=abc: GPT2Config.n_layer takes an integer (default 12)"),
        ("scale_attn_weights=maybe", "GPT2Config.scale_attn_weights takes true or false"),
        ("resid_pdrop=high", "GPT2Config.resid_pdrop takes a number"),
        ("n_layers=2", "GPT2Config has no field 'n_layers'; did you mean n_layer?"),
        ("nonsense_key=3", "GPT2Config has no field 'nonsense_key' (see GPT2Config's documentation"),
        (
            "n_embd=30",
            "hf:GPT2Config with --hf-config n_head=4, n_embd=30: invalid config: `embed_dim` must be divisible by num_heads",
        ),
        # a zero size is named with its lower bound before the constructor divides by it
        ("n_head=0", "--hf-config n_head=0: GPT2Config.n_head = 0: a size of at least 1 (the limit)"),
        ("vocab_size=-5", "--hf-config vocab_size=-5: GPT2Config.vocab_size takes a whole number >= 0 (default 50257)"),
    ],
)
def test_hf_config_mistakes(capsys: pytest.CaptureFixture[str], override: str, message: str) -> None:
    pytest.importorskip("transformers")
    assert cli.main(["hf:GPT2Config", "--hf-config", "n_head=4", "--hf-config", override]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_a_config_without_a_model_is_told_apart_from_an_invalid_one(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    assert cli.main(["hf:PretrainedConfig"]) == 2
    assert "transformers has no model for PretrainedConfig" in capsys.readouterr().err


def test_meta_implies_the_dispatch_tracer_and_builds_on_meta(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    # A 10**9-token vocabulary (3 TB of weights) is refused for real: this runs on meta only.
    small = [kv if not kv.startswith("vocab_size") else "vocab_size=1000000000" for kv in SMALL_GPT2]
    argv = ["hf:GPT2Config", "--seq-len", "16", "--format", "json", "-q", "--meta"]
    assert cli.main(argv + [a for kv in small for a in ("--hf-config", kv)]) == 0
    data = json.loads(capsys.readouterr().out)
    # the attention and MLP projections, as in test_cli: 16 tokens, width 32, MLP width 128
    linear = sum(r["flops"] for r in data["operators"] if r["module"] == "." and r["operator"] == "addmm")
    assert linear == 16 * 32 * 32 * 4 + 2 * 16 * 32 * 128


def test_meta_inputs_of_any_size_are_never_allocated(capsys: pytest.CaptureFixture[str]) -> None:
    # 3 * 10**10 elements: refused for real tensors, fine on meta. The stem's 3x3 convolution
    # (3 -> 8 channels, padding 1): 8 * 3 * 9 multiply-adds per output position, 10**10 positions.
    assert cli.main([TINY, "--input", "1,3,100000,100000", "--meta", "--format", "json", "-q"]) == 0
    data = json.loads(capsys.readouterr().out)
    conv = sum(r["flops"] for r in data["operators"] if r["module"] == "." and r["operator"] == "conv")
    assert conv == 8 * 3 * 9 * 100_000 * 100_000


def test_the_activation_convention_is_one_note_not_unsupported_operators(capsys: pytest.CaptureFixture[str]) -> None:
    # fvcore's ActivationCountAnalysis leaves batch_norm and pooling out by its convention (it
    # counts convolution and matrix-product outputs): the flop count prices them, so the command
    # says the convention once, naming them, and calls none of them unsupported.
    from fvcore.nn import ActivationCountAnalysis

    from tests.fixtures.report_models import tiny_model

    model = tiny_model().eval()
    reference = ActivationCountAnalysis(model, torch.randn(1, 3, 8, 8)).unsupported_ops_warnings(False)
    reference.uncalled_modules_warnings(False).total()
    expected = set(reference.unsupported_ops())
    assert expected  # fvcore's activation convention leaves batch_norm and pooling out

    assert cli.main([TINY, "--input", "1,3,8,8", "--columns", "flops,activations"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert not [line for line in err if "nsupported" in line]
    notes = [line for line in err if "fvcore's convention" in line]
    assert len(notes) == 1 and f"{len(expected)} other operator kind(s)" in notes[0]
    assert all(op in notes[0] for op in expected), notes

    assert cli.main([TINY, "--input", "1,3,8,8", "--columns", "flops"]) == 0
    assert "convention" not in capsys.readouterr().err  # no activations column, nothing to explain


def test_a_trace_error_hints_at_the_flag_not_the_keyword(capsys: pytest.CaptureFixture[str]) -> None:
    # The jit tracer's hint names the Python API's tracer='dispatch'; the command says the flag.
    assert cli.main([TINY, "--input", "1,5,8,8"]) == 2  # the stem convolution takes 3 channels
    err = capsys.readouterr().err
    assert "--tracer dispatch" in err and "tracer='dispatch'" not in err, err
