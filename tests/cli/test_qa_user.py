"""Mistakes a careful user makes, from the command line and from Python: each is refused in one
line naming the flag (exit status 2) or gives the number worked out by hand or by fvcore."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, Hardware, OpcountError, cli
from opcount.cli import llm as llm_command

TINY = "tests.fixtures.report_models:tiny_model"


@pytest.fixture
def no_llm_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building an LLM fails the test: its flags must be refused before it is built."""

    def refuse(*args: object) -> None:
        raise AssertionError("an LLM was built")

    monkeypatch.setattr(llm_command, "run", refuse)


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


# ----- flags a model ignores ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        ([TINY, "--input", "1,3,8,8", "--seq-len", "7"], "--seq-len"),
        ([TINY, "--input", "1,3,8,8", "--hf-config", "n_layer=2"], "--hf-config"),
    ],
)
def test_transformers_flags_are_refused_for_other_models(
    nothing_built: None, capsys: pytest.CaptureFixture[str], argv: list[str], flag: str
) -> None:
    # Before: exit 0, the flag silently ignored (a factory's own sequence length counted instead).
    err = _one_line_error(capsys, argv)
    assert f"{flag} applies to hf: and llm: models" in err and TINY in err, err


# ----- counts ------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv", [[TINY, "--sig-figs", "-3"], [TINY, "--repeats", "-1"], ["llm:gpt2", "--batch", "-2"]])
def test_a_positive_flag_says_positive_for_negative_values(
    nothing_built: None, no_llm_built: None, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # Before: "expected a non-negative integer, got '-3'", though 0 is refused too.
    err = _one_line_error(capsys, argv)
    assert f"{argv[1]}: expected a positive integer, got '{argv[2]}'" in err, err


# ----- LLM columns -------------------------------------------------------------------------------
def test_llm_roofline_columns_need_hardware(no_llm_built: None, capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "ValueError: column 'time' needs the roofline analysis; pass extra={'roofline': ...}",
    # the Python API's words, after the model was built and traced.
    err = _one_line_error(capsys, ["llm:gpt2", "--columns", "flops,time"])
    assert "columns time need --hardware" in err, err


def test_llm_sparsity_columns_are_refused(no_llm_built: None, capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line_error(capsys, ["llm:gpt2", "--hardware", "h100-sxm", "--columns", "flops,sparse_time"])
    assert "columns sparse_time do not apply to LLM phases" in err, err


@pytest.mark.parametrize("layout", [["--columns", "flops"], ["--depth", "1"], ["--no-param-shapes"]])
def test_llm_sweep_refuses_table_layout_flags(
    no_llm_built: None, capsys: pytest.CaptureFixture[str], layout: list[str]
) -> None:
    # Before: exit 0, the flag silently ignored (a sweep prints one row per point).
    err = _one_line_error(capsys, ["llm:gpt2", "--sweep", "batch=1,2", *layout])
    assert "not a --sweep's rows" in err, err


# ----- hardware files ----------------------------------------------------------------------------
HARDWARE_TOML = 'name = "npu"\nbandwidth = 1e9\n[peak.tensor]\n{key} = 1e12\n'


@pytest.mark.parametrize("key", ["float33", "fp16", "half"])
def test_hardware_file_with_an_unknown_dtype_is_refused_when_read(tmp_path: Path, key: str) -> None:
    # Before: read without complaint; the roofline then failed on the first layer, naming the
    # operator but not the file's key ("npu has no unit for aten::_convolution in float32").
    path = tmp_path / "npu.toml"
    path.write_text(HARDWARE_TOML.format(key=key))
    with pytest.raises(ValueError, match=f"npu.toml: npu: peak\\['tensor'\\] has unknown dtype '{key}'"):
        Hardware.from_file(path)


def test_hardware_file_with_an_unknown_dtype_on_the_command_line(
    nothing_built: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "npu.toml"
    path.write_text(HARDWARE_TOML.format(key="float33"))
    err = _one_line_error(capsys, [TINY, "--input", "1,3,8,8", "--hardware", str(path)])
    assert "argument --hardware" in err and "unknown dtype 'float33'" in err, err


def test_hardware_dtype_names_are_torchs_and_tf32() -> None:
    peaks = {"tensor": {"tf32": 1e12, "float8_e4m3fn": 4e12, "int4": 8e12}, "vector": {"float32": 1e11}}
    assert Hardware("npu", peaks, bandwidth=1e9).peak_of("tensor", "int4") == 8e12


# ----- --dtype with a factory's own inputs -------------------------------------------------------
def test_dtype_converts_a_factorys_own_float_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    fvcore_nn = pytest.importorskip("fvcore.nn")
    from tests.fixtures.report_models import tiny

    model, x = tiny()
    expected = fvcore_nn.FlopCountAnalysis(model, x).unsupported_ops_warnings(False).total()
    assert (
        cli.main(["tests.fixtures.report_models:tiny", "--dtype", "float16", "--preset", "fvcore", "--format", "json"])
        == 0
    )
    assert json.loads(capsys.readouterr().out)["total"]["flops"] == expected


# ----- set_op_handle(op, None) -------------------------------------------------------------------
def test_set_op_handle_none_ignores_an_operator_that_has_a_handle() -> None:
    # fvcore's docstring: "If a handle is None, the op will be explicitly ignored"; its code keeps
    # the existing handle (FlopCountAnalysis(...).set_op_handle("aten::linear", None) still counts
    # linear). opcount follows the docstring: 0 flops, and linear is not reported as unsupported.
    flops = FlopCountAnalysis(nn.Linear(4, 3), torch.randn(2, 4), preset="fvcore")
    flops.set_op_handle("aten::linear", None)
    assert flops.total() == 0 and not flops.unsupported_ops()


# ----- digits ------------------------------------------------------------------------------------
# tests/fixtures/report_models.py's tiny() at its 2x3x16x16 input, by hand: parameters 8*3*3*3 + 8 (conv)
# + 2*8 (bn) + 8*16 + 16 + 16*4 + 4 (linears; `unused` 4*4 + 4 is not called but is a parameter)
# = 224 + 16 + 144 + 68 + 20 = 472.
TINY_PARAMS = 472


def _model_row(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    assert cli.main(["tests.fixtures.report_models:tiny", "-q", *argv]) == 0
    # the model's row: "model" in the table and tree, "`.`" in markdown (as in every export)
    row = next(line for line in capsys.readouterr().out.splitlines() if line.lstrip("| ").startswith(("model", "`.`")))
    return row.replace("|", " ").split()


@pytest.mark.parametrize(
    "argv", [["--decimals", "30"], ["--sig-figs", "20", "--format", "tree"], ["--sig-figs", "20", "--format", "md"]]
)
def test_more_digits_than_a_double_holds_still_read_the_exact_count(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    params = next(cell for cell in _model_row(capsys, ["--units", "K", "--depth", "0", *argv]) if cell.endswith("K"))
    assert Decimal(params.removesuffix("K")) * 1000 == TINY_PARAMS, params


def test_units_1_writes_whole_counts(capsys: pytest.CaptureFixture[str]) -> None:
    row = _model_row(capsys, ["--units", "1", "--depth", "2"])
    assert str(TINY_PARAMS) in row and not any(cell.endswith(".000") for cell in row), row


# ----- LLM context length ------------------------------------------------------------------------
def _gpt2(positions: int) -> Any:
    transformers = pytest.importorskip("transformers")
    return transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=100, n_positions=positions)


def test_llm_positions_past_a_learned_position_table_are_refused() -> None:
    # GPT-2 looks each position up in wpe (n_positions rows): the real model raises IndexError past
    # it; on meta nothing is looked up, so before this the phase was priced as if it could run.
    from opcount.llm.causal_lm import CausalLM

    llm = CausalLM(_gpt2(16))
    assert llm.phase("prefill", seq_len=16).seq_len == 16
    assert llm.phase("decode", kv_len=15).kv_len == 15
    with pytest.raises(
        OpcountError, match=r"17 positions \(kv_len 16 \+ seq_len 1\) exceed the 16 rows .* 'transformer.wpe'"
    ):
        llm.phase("decode", kv_len=16)
    with pytest.raises(OpcountError, match="17 positions"):
        llm.phase("prefill", seq_len=17)


def test_llm_rotary_models_run_past_their_configured_length() -> None:
    transformers = pytest.importorskip("transformers")
    from opcount.llm.causal_lm import CausalLM

    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=100, max_position_embeddings=16,
    )  # fmt: skip
    assert CausalLM(config).phase("decode", kv_len=64).kv_len == 64


def test_hf_meta_seq_len_past_the_position_table_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    small = ["n_layer=1", "n_embd=32", "n_head=2", "vocab_size=100", "n_positions=16"]
    argv = ["hf:GPT2Config", "--meta", "--seq-len", "17", *(a for kv in small for a in ("--hf-config", kv))]
    err = _one_line_error(capsys, argv)
    assert "wpe" in err, err


# ----- output paths ------------------------------------------------------------------------------
@pytest.mark.parametrize("flag", ["-o", "--plot"])
def test_an_output_path_that_is_a_folder_is_refused_before_building(
    nothing_built: None, capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str
) -> None:
    # Before: -o wrote nothing after the whole analysis, "IsADirectoryError: [Errno 21] ..." naming no flag.
    err = _one_line_error(capsys, [TINY, "--input", "1,3,8,8", "--hardware", "h100-sxm", flag, str(tmp_path)])
    assert f"{flag} {tmp_path}: a folder, not a file" in err, err


def test_compare_refuses_an_output_folder_before_building(
    nothing_built: None, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: opcount compare analyzed every model, then failed writing -o.
    err = _one_line_error(capsys, ["compare", TINY, "resnet18", "-o", str(tmp_path)])
    assert f"-o {tmp_path}: a folder, not a file" in err, err


# ----- --dtype without --input -------------------------------------------------------------------
FLOAT_AND_IDS = """
import torch
from torch import nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x, ids):
        return self.fc(x + self.emb(ids))


def build():
    return Model(), (), {"x": torch.randn(2, 5, 4), "ids": torch.zeros(2, 5, dtype=torch.long)}
"""


def test_dtype_converts_a_factorys_float_kwargs_and_keeps_its_ids(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # Before: "Input type (float) and bias type (c10::Half)"; ids converted too would fail the embedding.
    path = tmp_path / "factory.py"
    path.write_text(FLOAT_AND_IDS)
    assert cli.main([f"{path}:build", "--dtype", "float16", "--preset", "fvcore", "--format", "json", "-q"]) == 0
    # fvcore's linear: prod(x.shape) * out_features = 2*5*4 * 3; the embedding and the add cost nothing
    assert json.loads(capsys.readouterr().out)["total"]["flops"] == 2 * 5 * 4 * 3


@pytest.mark.parametrize("spec", ["tests.fixtures.report_models:tiny", "hf:GPT2Config"])
def test_an_integer_dtype_without_input_is_refused(capsys: pytest.CaptureFixture[str], spec: str) -> None:
    # Before: exit 0, --dtype int64 silently ignored (the factory's or transformers' own inputs counted).
    err = _one_line_error(capsys, [spec, "--dtype", "int64"])
    assert f"--dtype int64 sets the dtype of --input tensors, and {spec} makes its own inputs" in err, err


# ----- files that cannot be written --------------------------------------------------------------
@pytest.mark.parametrize("path", ["/dev/full", "/proc/version"])
def test_an_unwritable_output_names_the_flag_and_the_path(capsys: pytest.CaptureFixture[str], path: str) -> None:
    # Before: "OSError: [Errno 5] Input/output error", naming neither (root may open /proc/version).
    if not Path(path).exists():
        pytest.skip(f"no {path} on this system")
    err = _one_line_error(capsys, [TINY, "--input", "1,3,8,8", "-o", path])
    assert f"-o {path}: cannot write it (" in err, err


# ----- message grammar ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flags", "words"),
    [(["--plot", "chart.png"], "--plot applies"), (["--depth", "1", "--plot", "chart.png"], "--depth, --plot apply")],
)
def test_compare_refuses_report_flags_in_grammar(
    nothing_built: None, capsys: pytest.CaptureFixture[str], flags: list[str], words: str
) -> None:
    err = _one_line_error(capsys, ["compare", TINY, "tests.fixtures.report_models:tiny", *flags])
    assert f"{words} to one model's report" in err, err


# ----- values in their flag's words --------------------------------------------------------------
def test_a_sparsity_name_matching_no_layer_names_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: "ValueError: sparsity names no weight layer: 'nomatch' ..."
    argv = [TINY, "--input", "1,3,8,8", "--hardware", "h100-sxm", "--sparsity", "2:4@nomatch"]
    err = _one_line_error(capsys, argv)
    assert "error: --sparsity 2:4@nomatch: " in err and "'nomatch'" in err and "ValueError" not in err, err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["llm:gpt2", "--hf-config", "num_hidden_layers=-1"],  # before: "GPT2Config: 0 cache layers for -1 layers"
            "--hf-config num_hidden_layers=-1: GPT2Config.num_hidden_layers takes a whole number >= 0 (default 12)",
        ),
        (
            ["hf:GPT2Config", "--hf-config", "vocab_size=-5"],  # before: torch's "negative dimension -5"
            "--hf-config vocab_size=-5: GPT2Config.vocab_size takes a whole number >= 0",
        ),
        (
            ["llm:gpt2", "--hf-config", "n_embd=33"],  # before: "transformers has no causal LM for GPT2Config: ..."
            "llm:gpt2 with --hf-config n_embd=33: GPT2Config: invalid config: `embed_dim` must be divisible",
        ),
    ],
)
def test_an_invalid_hf_config_names_the_flag_and_the_value(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    pytest.importorskip("transformers")
    err = _one_line_error(capsys, argv)
    assert f"error: {words}" in err, err


@pytest.mark.parametrize(("config", "flags"), [("BertConfig", ["--phase", "decode"]), ("T5Config", ["--batch", "2"])])
def test_llm_flags_on_a_model_that_is_not_a_causal_lm_are_refused_before_building(
    capsys: pytest.CaptureFixture[str], config: str, flags: list[str]
) -> None:
    # Before: transformers' stray "If you want to use `BertLMHeadModel` as a standalone" line, then a
    # DataDependentOutputException on meta tensors whose hint did not apply.
    pytest.importorskip("transformers")
    err = _one_line_error(capsys, [f"hf:{config}", *flags])
    assert f"{flags[0]} needs a causal LM; {config} is not one" in err, err


def test_llm_exports_write_byte_counts_as_integers(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("transformers")
    small = ["n_layer=1", "n_embd=32", "n_head=2", "vocab_size=100", "n_positions=16"]
    argv = ["llm:gpt2", "--seq-len", "8", "--format", "json", *(a for kv in small for a in ("--hf-config", kv))]
    assert cli.main(argv) == 0
    memory = json.loads(capsys.readouterr().out)["memory"]
    by_type = memory.pop("kv_cache_by_type")  # the cache per layer kind, bytes too
    assert all(type(v) is int for v in (*memory.values(), *by_type.values())), memory  # before: weights 32960.0
    # bfloat16 weights, by hand: wte 100*32 (lm_head tied to it), wpe 16*32, ln_1, ln_2, ln_f 3*2*32,
    # c_attn 32*96+96, attn c_proj 32*32+32, c_fc 32*128+128, mlp c_proj 128*32+32 = 16480 parameters
    assert memory["weights"] == 2 * 16480
    # KV cache: 2 (keys, values) x 1 layer x 32 (2 heads x 16) x 8 tokens x 2 bytes
    assert memory["kv_cache"] == 2 * 1 * 32 * 8 * 2
    csv_argv = ["llm:gpt2", "--seq-len", "8", "--format", "csv", "--sweep", "batch=1,2"]
    assert cli.main([*csv_argv, *(a for kv in small for a in ("--hf-config", kv))]) == 0
    header, *rows = capsys.readouterr().out.split()
    assert header.split(",")[4:7] == ["weights_bytes", "kv_cache_bytes", "activations_bytes"]
    assert all(cell.isdigit() for row in rows for cell in row.split(",")[4:7]), rows


# ----- a shape with a negative size --------------------------------------------------------------
@pytest.mark.parametrize("command", [[], ["compare", "tests.fixtures.report_models:tiny"]])
def test_a_negative_input_size_is_named(
    nothing_built: None, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    # Before: argparse's "argument --input: expected one argument" (it takes -1,3,8,8 for a flag).
    err = _one_line_error(capsys, [*command, TINY, "--input", "-1,3,8,8"])
    assert "argument --input: malformed shape '-1,3,8,8': expected positive sizes" in err, err


def test_int4_weights_of_odd_size_take_whole_bytes() -> None:
    from opcount.llm.precision.dtypes import weight_bytes

    # 15 int4 weights in ceil(15/2) = 8 bytes, plus one group of 128 inputs per row: a float16
    # scale and zero-point (4 bytes) for each of the 3 rows. Before: 7.5 + 12 = 19.5.
    assert weight_bytes((3, 5), "int4") == 8 + 3 * 4
