"""What a user meets on the LLM command line with configs transformers refuses or values out of range:
one line naming what is wrong and where, exit 2."""

from __future__ import annotations

import pytest

from opcount import cli


def test_a_validation_error_keeps_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    # huggingface_hub's strict-dataclass errors put the reason on the line after a header ending in a colon;
    # ZambaConfig's default layer_types name 3 layers, so 2 layers is refused with that reason
    pytest.importorskip("transformers")
    assert cli.main(["hf:ZambaConfig", "--hf-config", "num_hidden_layers=2", "--phase", "decode"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert (
        "validate_layer_type': ValueError: `num_hidden_layers` (2) must be equal to the number of `layer_types` (3)"
        in err
    )


def test_a_catalogue_model_with_a_value_its_config_refuses(capsys: pytest.CaptureFixture[str]) -> None:
    # LlamaConfig divides hidden_size by num_attention_heads: zero heads is the user's mistake, not an internal
    # error, named with its lower bound before the constructor divides by it
    pytest.importorskip("transformers")
    argv = ["llm:llama-3-8b", "--hf-config", "num_attention_heads=0", "--hf-config", "num_hidden_layers=1"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert (
        "--hf-config num_attention_heads=0: LlamaConfig.num_attention_heads = 0: a size of at least 1 (the limit)"
        in err
    )


@pytest.mark.parametrize("flags", [["--phase", "decode"], ["--meta"]])
def test_a_value_the_config_rounds_is_refused(capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    # LongcatFlashConfig documents num_hidden_layers as always 2 x num_layers, its setter num_layers = value // 2:
    # 3 layers asked for would count 2 x (3 // 2) = 2; 1 would count 0 (and then find no experts)
    pytest.importorskip("transformers")
    assert cli.main(["hf:LongcatFlashConfig", "--hf-config", "num_hidden_layers=3", *flags]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--hf-config num_hidden_layers=3: LongcatFlashConfig makes it 2" in err


@pytest.mark.parametrize("flags", [["--phase", "decode"], ["--mode", "train"]])
def test_dtype_is_refused_where_it_would_be_ignored(capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    # LLM runs are priced in --weight-dtype and --act-dtype: --dtype float16 printed w16a16 in bfloat16 before
    pytest.importorskip("transformers")
    assert cli.main(["llm:llama-3-8b", "--hf-config", "num_hidden_layers=1", "--dtype", "float16", *flags]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "--dtype float16 does not apply to LLM runs: give --weight-dtype and --act-dtype" in err


def test_a_nested_configs_field_is_shown_as_the_dict_that_sets_it(capsys: pytest.CaptureFixture[str]) -> None:
    # Gemma3Config holds its decoder's fields in text_config, a sub-config built from a dict
    pytest.importorskip("transformers")
    assert cli.main(["hf:Gemma3Config", "--phase", "decode", "--hf-config", "text_config.num_hidden_layers=2"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert 'a nested config\'s field is set as a dict: text_config={"num_hidden_layers": 2}' in err
