"""Hostile config files and config flags on the command line (issue 42): each failure of reading
``hf:path/config.json`` or a hardware file one line naming the file, exit status 2; fields that select
code refused in ``--hf-config``; zero sizes named with their bound; empty dtypes refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from opcount.cli import main
from tests.fixtures.command import error_line

SMALL = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 1,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
}
ONE_LAYER = ["--hf-config", "num_hidden_layers=1"]


def error_message(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """The one line of a refusal, without its ``opcount: error:`` prefix."""
    return error_line(capsys, *args).removeprefix("opcount: error: ")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "not valid JSON: nested too deep to read"),
        (b'{"model_type": "llama", "vocab_size": ' + b"9" * 5000 + b"}", "an integer of more than 4,300 digits"),
        (b"\xff\xfe{}", "not a text file (invalid start byte at byte 0)"),
        (b'{"model_type": }', "not valid JSON: Expecting value at line 1 column 16"),
    ],
)
@pytest.mark.parametrize("flags", [["--phase", "decode"], ["--meta"]])
def test_an_unreadable_config_file_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, message: str, flags: list[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    line = error_message(capsys, f"hf:{path}", *flags)
    assert line.startswith(f"{path}: ") and message in line


def test_a_huge_config_file_is_refused_before_it_is_read(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(4 * 2**30)  # sparse: no disk used; read whole it was a MemoryError, exit 1
    line = error_message(capsys, f"hf:{path}", "--phase", "decode")
    assert line == f"{path}: 4,294,967,296 bytes, more than the 16 MiB a config file may hold (the limit)"


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_an_unreadable_hardware_file_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, suffix: str
) -> None:
    path = tmp_path / f"npu{suffix}"
    path.write_text(("a = " if suffix == ".toml" else "") + "[" * 100_000 + "]" * 100_000)
    line = error_message(capsys, "tests.fixtures.models:nested", "--hardware", str(path))
    assert f"--hardware: {path}: not valid {suffix[1:].upper()}: nested too deep to read" in line


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("attn_implementation=kernels-community/flash-attn", "is a Hub repository's kernel: opcount downloads and"),
        ("experts_implementation=kernels-community/moe", "is a Hub repository's kernel"),
        ('auto_map={"AutoModelForCausalLM": "x--m.M"}', "LlamaConfig.auto_map names a repository's own code"),
        ("trust_remote_code=true", "LlamaConfig.trust_remote_code would allow running a repository's own code"),
        ('quantization_config={"quant_method": "fp8"}', "opcount prices the formats of --weight-dtype"),
    ],
)
@pytest.mark.parametrize("model", ["llm:llama-3-8b", "hf:LlamaConfig"])
def test_hf_config_refuses_fields_that_select_code(
    capsys: pytest.CaptureFixture[str], model: str, item: str, message: str
) -> None:
    line = error_message(capsys, model, *ONE_LAYER, "--hf-config", item, "--meta" if model.startswith("hf:") else "-q")
    assert line.startswith(f"--hf-config {item}: ") and message in line


def test_a_config_file_runs_without_the_fields_that_select_code(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:  # caplog: warnings logged, as on the command line
    path = tmp_path / "config.json"
    code = {"attn_implementation": "kernels-community/flash-attn", "auto_map": {"AutoModelForCausalLM": "a--b.C"}}
    path.write_text(json.dumps({**SMALL, **code}))
    assert main([f"hf:{path}", "--phase", "decode", "--format", "json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["llm"]["phase"] == "decode"
    assert f"{path}: left out attn_implementation, auto_map: fields that select code or reach the network" in err


@pytest.mark.parametrize(
    ("model", "item", "message"),
    [
        ("llm:llama-3-8b", "vocab_size=0", "LlamaConfig.vocab_size = 0: a size of at least 1 (the limit)"),
        ("llm:llama-3-8b", "intermediate_size=0", "LlamaConfig.intermediate_size = 0: a size of at least 1"),
        ("llm:llama-3-8b", "hidden_size=0", "LlamaConfig.hidden_size = 0: a size of at least 1"),
        ("llm:mixtral-8x7b", "num_local_experts=0", "MixtralConfig.num_local_experts = 0: a size of at least 1"),
        ("llm:mixtral-8x7b", "num_experts_per_tok=0", "MixtralConfig.num_experts_per_tok = 0: a size of at least 1"),
        ("llm:mistral-7b", "sliding_window=0", "MistralConfig.sliding_window = 0: a size of at least 1"),
        ("hf:GPT2Config", "n_embd=0", "GPT2Config.n_embd = 0: a size of at least 1"),
    ],
)
def test_a_zero_size_is_refused_naming_the_field(
    capsys: pytest.CaptureFixture[str], model: str, item: str, message: str
) -> None:
    extra = ["--meta"] if model.startswith("hf:") else ONE_LAYER
    line = error_message(capsys, model, *extra, "--hf-config", item)
    assert line.startswith(f"--hf-config {item}: {message}") and line.endswith("(the limit)")


def test_a_negative_size_in_a_file_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**SMALL, "model_type": "mistral", "sliding_window": -5}))  # was a raw RuntimeError
    line = error_message(capsys, f"hf:{path}", "--phase", "decode")
    assert line == f"{path}: MistralConfig.sliding_window = -5: a size of at least 1 (the limit)"


@pytest.mark.parametrize(
    ("flag", "role", "choices"),
    [
        ("--act-dtype", "activation", "float32, bfloat16, float16, float8_e4m3fn, int8, mxfp4, nvfp4"),
        ("--kv-dtype", "KV cache", "float32, bfloat16, float16, float8_e4m3fn, int8"),
    ],
)
def test_an_empty_dtype_is_refused_as_weight_dtype_is(
    capsys: pytest.CaptureFixture[str], flag: str, role: str, choices: str
) -> None:
    line = error_message(capsys, "llm:llama-3-8b", *ONE_LAYER, flag, "")
    assert line == f"{flag}: unknown {role} dtype ''; choose one of {choices} (or bf16, fp16, fp8)"
    assert error_message(capsys, "llm:llama-3-8b", *ONE_LAYER, "--weight-dtype", "").startswith("--weight-dtype: ")
