"""Hostile configs (issue 42): every size bounded below as well as above, one message naming the field
and its value; fields that select code or reach the network dropped from config files and refused when
set by hand; a misspelt field refused in Python as on the command line. The Python API raises
OpcountError where a raw ZeroDivisionError or RuntimeError came out before."""

from __future__ import annotations

import json
import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountError, OpcountValueError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.models.catalogue import config, names  # noqa: E402
from opcount.llm.models.fields import FieldError, check_no_hub_code  # noqa: E402
from opcount.llm.models.limits import MIN_SIZES, SizeError, check_config  # noqa: E402
from opcount.llm.models.local_config import read_config  # noqa: E402
from tests.llm.test_llm import GEOMETRY  # noqa: E402

HUB_KERNEL = "kernels-community/flash-attn"
SMALL = {**GEOMETRY, "num_hidden_layers": 1}


@pytest.mark.parametrize(
    ("config_class", "values", "message"),
    [
        ("LlamaConfig", {"vocab_size": 0}, "LlamaConfig.vocab_size = 0: a size of at least 1 (the limit)"),
        ("LlamaConfig", {"intermediate_size": 0}, "LlamaConfig.intermediate_size = 0: a size of at least 1"),
        ("LlamaConfig", {"num_key_value_heads": -2}, "LlamaConfig.num_key_value_heads = -2: a size of at least 1"),
        ("LlamaConfig", {"max_position_embeddings": 0}, "LlamaConfig.max_position_embeddings = 0: a size of"),
        ("LlamaConfig", {"head_dim": -1}, "LlamaConfig.head_dim = -1: a size of at least 0"),
        ("MixtralConfig", {"num_local_experts": 0}, "MixtralConfig.num_local_experts = 0: a size of at least 1"),
        ("MixtralConfig", {"num_experts_per_tok": 0}, "MixtralConfig.num_experts_per_tok = 0: a size of at least 1"),
        ("MistralConfig", {"sliding_window": 0}, "MistralConfig.sliding_window = 0: a size of at least 1"),
        ("MistralConfig", {"sliding_window": -5}, "MistralConfig.sliding_window = -5: a size of at least 1"),
        # Qwen3-MoE stores num_experts as num_local_experts
        ("Qwen3MoeConfig", {"num_experts": -1}, "Qwen3MoeConfig.num_local_experts = -1: a size of at least 0"),
    ],
)
def test_a_size_under_its_bound_is_refused_by_the_python_api(
    config_class: str, values: dict[str, int], message: str
) -> None:
    made = getattr(transformers, config_class)(**{**SMALL, **values})
    with pytest.raises(SizeError) as caught:
        CausalLM(made)
    assert str(caught.value) == message if message.endswith("(the limit)") else message in str(caught.value)
    assert isinstance(caught.value, OpcountError)


def test_a_model_already_on_meta_is_bounded_too() -> None:
    import torch

    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch: initializing the empty embedding is a no-op
        model = transformers.AutoModelForCausalLM.from_config(transformers.LlamaConfig(**{**SMALL, "vocab_size": 0}))
    with pytest.raises(SizeError, match=r"LlamaConfig.vocab_size = 0: a size of at least 1"):
        CausalLM(model)


@pytest.mark.parametrize(
    ("config_class", "values"),
    [
        ("LlamaConfig", {"head_dim": 0}),  # 0: hidden_size / num_attention_heads, as transformers reads it
        ("Qwen3MoeConfig", {"num_experts": 0}),  # Qwen's mixtures read 0 experts as every layer dense
        ("Qwen2MoeConfig", {"sliding_window": 0, "use_sliding_window": False}),  # an unused window
    ],
)
def test_zero_where_transformers_gives_it_a_meaning(config_class: str, values: dict[str, Any]) -> None:
    check_config(getattr(transformers, config_class)(**{**SMALL, **values}))


def test_every_default_config_and_catalogue_entry_is_within_the_bounds() -> None:
    from transformers import CONFIG_MAPPING

    refused = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for kind in list(CONFIG_MAPPING.keys()):
            try:
                made = CONFIG_MAPPING[kind]()
            except Exception:  # a class without defaults (transformers' own refusal): nothing to bound
                continue
            try:
                check_config(made)
            except SizeError as e:
                refused.append(f"{kind}: {e}")
    assert refused == []
    for name in names():
        config(name)  # the published values: every size at least its bound
    assert MIN_SIZES["vocab_size"] == MIN_SIZES["num_local_experts"] == 1


@pytest.mark.parametrize(
    ("overrides", "error", "message"),
    [
        (
            {"num_hiden_layers": 2},
            FieldError,
            "LlamaConfig has no field 'num_hiden_layers'; did you mean num_hidden_layers",
        ),
        (
            {"to_dict": 1},
            FieldError,
            "LlamaConfig.to_dict is callable (a method): config() sets the config's data fields",
        ),
        ({"vocab_size": 0}, SizeError, "LlamaConfig.vocab_size = 0: a size of at least 1 (the limit)"),
        ({"num_attention_heads": 0}, SizeError, "LlamaConfig.num_attention_heads = 0: a size of at least 1"),
        ({"auto_map": {"AutoModelForCausalLM": "x--m.M"}}, FieldError, "LlamaConfig.auto_map names a repository's"),
        ({"trust_remote_code": True}, FieldError, "LlamaConfig.trust_remote_code would allow running"),
        ({"attn_implementation": HUB_KERNEL}, FieldError, f"LlamaConfig.attn_implementation = '{HUB_KERNEL}' is a Hub"),
        ({"num_attention_heads": 7}, OpcountValueError, "invalid config: "),  # the constructor's own check
    ],
)
def test_config_refuses_what_the_command_line_refuses(
    overrides: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        config("llama-3-8b", **overrides)
    assert message in str(caught.value) and isinstance(caught.value, OpcountError)


def test_config_takes_transformers_own_implementations() -> None:
    assert config("llama-3-8b", num_hidden_layers=2, attn_implementation="eager")._attn_implementation == "eager"


def test_a_hub_kernel_in_a_config_object_is_refused_before_building(monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the model was built")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", never)
    made = transformers.LlamaConfig(**SMALL, attn_implementation=HUB_KERNEL)
    with pytest.raises(FieldError, match="is a Hub repository's kernel: opcount downloads and runs no code"):
        CausalLM(made)
    sub = transformers.LlavaConfig(text_config={"model_type": "llama", **SMALL})
    sub.text_config._attn_implementation = {"": HUB_KERNEL}
    with pytest.raises(FieldError, match=r"LlamaConfig\.attn_implementation"):
        check_no_hub_code(sub)


CODE = {
    "attn_implementation": HUB_KERNEL,
    "_attn_implementation": HUB_KERNEL,
    "experts_implementation": "kernels-community/moe",
    "auto_map": {"AutoModelForCausalLM": "someone/repo--modeling.Model"},
    "trust_remote_code": True,
    "quantization_config": {"quant_method": "bitsandbytes", "load_in_4bit": True},
    "custom_pipelines": {"text-generation": {"impl": "pipe.P"}},
}


def _file(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    return path


def test_a_config_file_loses_the_fields_that_select_code(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _file(tmp_path, {"model_type": "llama", **SMALL, **CODE})
    with caplog.at_level(logging.WARNING, logger="opcount"):
        made = read_config(path)
    for key in ("auto_map", "trust_remote_code", "quantization_config", "custom_pipelines"):
        assert key not in made.to_dict(), key
    assert made._attn_implementation is None and made._experts_implementation is None
    (record,) = [r for r in caplog.records if "left out" in r.getMessage()]
    assert record.getMessage() == (
        f"{path}: left out attn_implementation, _attn_implementation, experts_implementation, auto_map, "
        "trust_remote_code, quantization_config, custom_pipelines: fields that select code or reach the network "
        "are not read from files (docs/llm.md)"
    )
    CausalLM(made)  # builds: no kernel asked of the Hub


def test_nested_configs_lose_them_too(tmp_path: Path) -> None:
    data = {
        "model_type": "llava",
        "attn_implementation": {"text_config": HUB_KERNEL},
        "text_config": {"model_type": "llama", **SMALL, "attn_implementation": HUB_KERNEL},
    }
    made = read_config(_file(tmp_path, data))
    assert type(made).__name__ == "LlamaConfig" and made._attn_implementation is None
    check_no_hub_code(made)


def test_a_zero_size_in_a_file_names_the_file_and_the_field(tmp_path: Path) -> None:
    path = _file(tmp_path, {"model_type": "llama", **SMALL, "num_attention_heads": 0})
    # before the constructor divides by it
    with pytest.raises(OpcountValueError, match=f"^{path}: LlamaConfig.num_attention_heads = 0: a size of at least 1"):
        read_config(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "not valid JSON: nested too deep to read"),
        (b'{"vocab_size": ' + b"9" * 5000 + b"}", "not valid JSON: an integer of more than 4,300 digits"),
        (b'{"model_type": "llama\xff"}', "not a text file (invalid start byte at byte 21)"),
    ],
)
def test_an_unreadable_file_is_one_line_naming_it(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(content)
    with pytest.raises(OpcountValueError) as caught:
        read_config(path)
    assert str(caught.value) == f"{path}: {message}"


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    with open(path, "wb") as f:
        f.truncate(3 * 2**30)  # sparse: no disk used, and reading it would take 3 GiB of memory
    with pytest.raises(OpcountValueError, match=r"3,221,225,472 bytes, more than the 16 MiB a config file may hold"):
        read_config(path)


@pytest.mark.parametrize("role", ["act", "kv", "state"])
def test_an_empty_dtype_in_python_is_refused_as_on_the_command_line(role: str) -> None:
    from opcount.llm.precision.dtypes import Precision

    with pytest.raises(OpcountValueError, match="''"):
        Precision(**{role: ""})
