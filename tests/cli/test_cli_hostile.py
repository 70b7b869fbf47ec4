"""Hostile input on the command line: each mistake one line, exit status 2, before a model is
built (sizes), with its first cause (a config that fails when traced), and nothing else on stderr."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from opcount.cli import main
from tests.fixtures.command import error_line

ONE_LAYER = ["--hf-config", "num_hidden_layers=1"]
HUGE = "99999999999999999999"  # past int64: torch's sizes overflow


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--batch", HUGE], f"--batch {HUGE}: more than 1,048,576 sequences (the limit)"),
        (["--seq-len", HUGE], f"--seq-len {HUGE}: more than 16,777,216 positions per sequence (the limit)"),
        (["--phase", "decode", "--kv-len", HUGE], f"--kv-len {HUGE}: more than 16,777,216"),
        (["--gen-len", HUGE], f"--gen-len {HUGE}: more than 16,777,216"),
        (["--seq-len", "16777216", "--gen-len", "1"], "16,777,217 positions per sequence, more than 16,777,216"),
        (["--sweep", f"batch=1,{HUGE}"], f"--sweep batch={HUGE}: more than 1,048,576 sequences"),
    ],
)
def test_llm_sizes_are_bounded(capsys: pytest.CaptureFixture[str], flags: list[str], message: str) -> None:
    assert message in error_line(capsys, "llm:llama-3-8b", *ONE_LAYER, *flags)


@pytest.mark.parametrize(
    ("model", "item", "message"),
    [
        ("hf:GPT2Config", "n_layer=1000000000", "GPT2Config.n_layer = 1,000,000,000: more than 1,024 layers"),
        ("llm:llama-3-8b", "num_hidden_layers=1000000000", "num_hidden_layers = 1,000,000,000: more than 1,024"),
        ("llm:llama-3-8b", "hidden_size=1000000000", "parameters from its sizes"),
    ],
)
@pytest.mark.parametrize("meta", [[], ["--meta"]])
def test_config_sizes_are_bounded_before_building(
    capsys: pytest.CaptureFixture[str], model: str, item: str, message: str, meta: list[str]
) -> None:
    if model.startswith("llm:") and meta:
        meta = []  # llm: is always on meta; --meta is for whole models
    line = error_line(capsys, model, "--hf-config", item, *meta)
    assert f"--hf-config {item}" in line and message in line and "limit" in line


def test_hf_seq_len_bounded_on_meta(capsys: pytest.CaptureFixture[str]) -> None:
    # 2**62 token ids fit int64 as a count, not as 8-byte elements: torch's storage size overflowed
    line = error_line(capsys, "hf:LlamaConfig", *ONE_LAYER, "--meta", "--seq-len", str(2**62))
    assert f"--seq-len {2**62}: 4.61e+18 elements of 8 bytes, more than torch can index (2**63 - 1 bytes)" in line
    line = error_line(capsys, "hf:LlamaConfig", *ONE_LAYER, "--meta", "--seq-len", str(2**40))
    assert f"--seq-len {2**40}: more than 16,777,216 positions (the limit)" in line


def test_input_bytes_past_int64(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "resnet18", "--meta", "--input", f"1,3,{2**60},2")
    assert "more than torch can index (2**63 - 1 bytes)" in line


@pytest.mark.parametrize(
    ("model", "items", "message"),
    [
        ("llm:mixtral-8x7b", ["num_experts_per_tok=9"], "k not in range"),
        ("hf:LlamaConfig", ["num_attention_heads=4", "num_key_value_heads=3"], "Number of heads in key and value"),
    ],
)
def test_a_config_failing_when_traced_keeps_its_cause(
    capsys: pytest.CaptureFixture[str], model: str, items: list[str], message: str
) -> None:
    flags = [f for item in items for f in ("--hf-config", item)]
    line = error_line(capsys, model, *ONE_LAYER, *flags, "--phase", "prefill")
    assert message in line and "index_copy" not in line


@pytest.mark.parametrize(
    ("item", "what"),
    [
        ("to_dict=1", "callable (a method)"),
        ("__init__=1", "callable (a method)"),
        ("__setattr__=1", "callable (a method)"),
        ("save_pretrained=x", "callable (a method)"),
        ("_commit_hash=x", "private"),
    ],
)
@pytest.mark.parametrize("model", ["hf:GPT2Config", "llm:llama-3-8b"])
def test_hf_config_takes_data_fields_only(capsys: pytest.CaptureFixture[str], model: str, item: str, what: str) -> None:
    line = error_line(capsys, model, "--hf-config", item)
    key = item.partition("=")[0]
    assert f"--hf-config {item}: " in line and f".{key} is {what}: --hf-config sets the config's data fields" in line


def test_hf_config_data_fields_still_taken(capsys: pytest.CaptureFixture[str]) -> None:
    # a field stored under a private name, a property with a setter, a constructor parameter
    items = ["n_layer=1", "n_embd=32", "n_head=2", "vocab_size=100", "attn_implementation=eager", "num_labels=3"]
    status = main(["hf:GPT2Config", "--meta", "--format", "json", *(f for i in items for f in ("--hf-config", i))])
    _, err = capsys.readouterr()
    assert status == 0, err


EXITS = """
import sys

import torch


def exits():
    sys.exit(0)


class Exits(torch.nn.Module):
    def forward(self, x):
        sys.exit(3)


def exits_in_forward():
    return Exits(), torch.randn(1, 4)
"""


@pytest.mark.parametrize(
    ("factory", "flags", "message"),
    [
        ("builtins:exit", [], "builtins:exit() failed: SystemExit: exited (sys.exit)"),
        ("{file}:exits", [], "{file}:exits() failed: SystemExit: exited with code 0 (sys.exit)"),
        ("{exits_on_import}:build", [], "importing {exits_on_import} failed: SystemExit: exited with code 0"),
        ("{file}:exits_in_forward", [], "could not trace the model (Exits): SystemExit: exited with code 3"),
        ("{file}:exits_in_forward", ["--tracer", "dispatch"], "(Exits) with the dispatch tracer: SystemExit"),
        ("{file}:exits_in_forward", ["--meta"], "(Exits) with the dispatch tracer: SystemExit"),
    ],
)
def test_user_code_that_exits_is_its_error(
    capsys: pytest.CaptureFixture[str], tmp_path, factory: str, flags: list[str], message: str
) -> None:
    paths = {"file": tmp_path / "exits.py", "exits_on_import": tmp_path / "exits_on_import.py"}
    paths["file"].write_text(EXITS)
    paths["exits_on_import"].write_text("import sys\n\nsys.exit(0)\n")
    line = error_line(capsys, factory.format(**paths), *flags)
    assert message.format(**paths) in line


# transformers logs through its own stderr handler, made when it is first imported: only a fresh
# process shows what reaches stderr, so these run as subprocesses, started together.
ROOT = Path(__file__).resolve().parents[2]
YARN = ["--hf-config", 'rope_scaling={"rope_type": "yarn", "factor": 4.0}', "--seq-len", "8"]
BAD_ROPE = ["--hf-config", 'rope_scaling={"rope_type": "yarn", "factor": "x"}']
QUIET_RUNS = {
    "bad_rope_quiet": [*BAD_ROPE, "-q"],
    "bad_rope": BAD_ROPE,
    "yarn_quiet": [*YARN, "-q"],
    "yarn": YARN,
}


@pytest.fixture(scope="module")
def quiet_runs() -> dict[str, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = {
        name: subprocess.Popen(
            [sys.executable, "-m", "opcount", "llm:llama-3-8b", *ONE_LAYER, *flags],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, flags in QUIET_RUNS.items()
    }
    done = {}
    for name, process in started.items():
        out, err = process.communicate(timeout=300)
        done[name] = subprocess.CompletedProcess(process.args, process.returncode, out, err)
    return done


def test_quiet_leaves_only_the_error_line(quiet_runs: dict[str, subprocess.CompletedProcess]) -> None:
    run = quiet_runs["bad_rope_quiet"]
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opcount: error: llm:llama-3-8b with --hf-config"), run.stderr


def test_without_quiet_transformers_says_why_before_the_error(
    quiet_runs: dict[str, subprocess.CompletedProcess],
) -> None:
    run = quiet_runs["bad_rope"]
    assert run.returncode == 2
    *warnings, error = run.stderr.strip().splitlines()
    assert error.startswith("opcount: error: "), run.stderr
    # transformers 5 names the field rope_parameters (rope_scaling is its old name) and takes ints too
    said = r"opcount: warning: transformers: `rope_(scaling|parameters)`'s factor field must be a float (or int )?>= 1"
    assert any(re.fullmatch(said + ", got x", line) for line in warnings), run.stderr
    assert all(line.startswith("opcount: warning: transformers: ") for line in warnings), run.stderr


def test_a_valid_config_warns_once_attributed_or_not_at_all(
    quiet_runs: dict[str, subprocess.CompletedProcess],
) -> None:
    quiet, loud = quiet_runs["yarn_quiet"], quiet_runs["yarn"]
    assert quiet.returncode == 0 and loud.returncode == 0, loud.stderr
    assert quiet.stderr == ""
    lines = loud.stderr.strip().splitlines()
    # transformers 4.x warns that yarn lacks original_max_position_embeddings; 5.x takes the default silently
    expected = ["opcount: warning: transformers: config.rope_scaling['original_max_position_embeddings']"]
    assert [line[: len(expected[0])] for line in lines] == (expected if transformers_major() < 5 else []), loud.stderr


def transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--sig-figs", "99999999999"], "--sig-figs 99999999999: more than 100 (the limit)"),
        (["--decimals", "101"], "--decimals 101: more than 100 (the limit)"),
        (["--profile", "--repeats", "10001"], "--repeats 10001: more than 10,000 (the limit)"),
    ],
)
@pytest.mark.parametrize(
    "command",
    [["tests.fixtures.report_models:tiny"], ["compare", "tests.fixtures.report_models:tiny", "resnet18"]],
)
def test_digits_and_passes_are_bounded(
    capsys: pytest.CaptureFixture[str], command: list[str], flags: list[str], message: str
) -> None:
    if command[0] == "compare" and "--profile" in flags:
        flags = ["--decimals", "101"]  # compare refuses --profile for its own reason
        message = "--decimals 101: more than 100 (the limit)"
    assert message in error_line(capsys, *command, *flags)


def test_llm_digits_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    line = error_line(capsys, "llm:llama-3-8b", *ONE_LAYER, "--sig-figs", "99999999999")
    assert "--sig-figs 99999999999: more than 100 (the limit)" in line


def test_buffers_count_toward_the_real_weights_budget(capsys: pytest.CaptureFixture[str]) -> None:
    # GPT-Neo's global attention holds a causal mask of positions^2 booleans: 1e10 bytes for
    # 100,000 positions; with the 32-wide model's parameters (50257 + 100000 rows of 32 and one
    # layer, 4,820,896 float32) 10,019,283,584 bytes = 9.33 GiB; the parameters alone are 18 MiB
    items = ["max_position_embeddings=100000", "num_layers=1", 'attention_types=[[["global"],1]]', "hidden_size=32"]
    line = error_line(capsys, "hf:GPTNeoConfig", *(f for i in items for f in ("--hf-config", i)), "--seq-len", "8")
    assert "4,820,896 parameters, with the buffers 9.33 GiB, over the 8 GiB budget" in line


def test_sweep_points_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    batches, lengths = ",".join(map(str, range(1, 41))), ",".join(map(str, range(1, 27)))  # 40 x 26 = 1,040
    line = error_line(
        capsys, "llm:llama-3-8b", *ONE_LAYER, "--sweep", f"batch={batches}", "--sweep", f"seq-len={lengths}"
    )
    assert "--sweep: 1,040 points, more than 1,000 (the limit)" in line
