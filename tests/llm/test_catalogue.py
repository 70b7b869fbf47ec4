"""The catalogue's structure: every entry cites its config file, every value it writes reaches the
transformers config (a misspelt key would be dropped silently and the class default counted),
aliases resolve, and an unknown name is refused with suggestions."""

from __future__ import annotations

import re

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountValueError  # noqa: E402
from opcount.llm.models.catalogue import ALIASES, ARCHITECTURES, config, names, resolve  # noqa: E402

SOURCE = re.compile(r"^[\w.-]+/[\w.-]+ config\.json( \(text_config\))?$")
ROPE = {"rope_theta", "rope_scaling", "partial_rotary_factor"}  # transformers 5 gathers them in rope_parameters


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_entry_cites_its_config_and_every_value_lands(name: str) -> None:
    arch = ARCHITECTURES[name]
    assert SOURCE.match(arch.source), arch.source
    cfg = config(name)
    assert type(cfg).__name__ == arch.config_class
    for key, value in arch.values.items():
        if key in ROPE:
            rope = cfg.rope_parameters
            expected = value if key != "rope_scaling" else {k: v for k, v in value.items() if k != "rope_type"}
            if key == "rope_scaling":
                assert all(rope[k] == v for k, v in expected.items()), (key, rope)
            else:
                assert rope[key] == value, (key, rope)
        else:
            assert getattr(cfg, key) == value, key


def test_aliases_resolve_to_an_entry_with_their_own_source() -> None:
    for alias, (target, source) in ALIASES.items():
        assert target in ARCHITECTURES
        assert SOURCE.match(source)
        assert resolve(alias) == (target, ARCHITECTURES[target])
        assert config(alias).to_dict() == config(target).to_dict()
    assert set(names()) == set(ARCHITECTURES) | set(ALIASES)
    assert resolve("DeepSeek-R1")[0] == "deepseek-v3"  # names are case-insensitive


def test_unknown_name_suggests() -> None:
    with pytest.raises(OpcountValueError, match=r"unknown architecture 'deepseek-v4'.*did you mean deepseek-v3"):
        config("deepseek-v4")
    with pytest.raises(OpcountValueError, match="did you mean kimi-k2"):
        config("kimi-k3")


def test_fewer_layers_keep_the_released_layer_pattern() -> None:
    # gpt-oss alternates sliding-window and full attention, starting with a window
    assert config("gpt-oss-20b", num_hidden_layers=3).layer_types == [
        "sliding_attention",
        "full_attention",
        "sliding_attention",
    ]
    # Gemma 3: five local layers, then a global one
    assert config("gemma-3-27b", num_hidden_layers=6).layer_types == ["sliding_attention"] * 5 + ["full_attention"]
    # Qwen3-Next: three linear-attention layers (Gated DeltaNet), then full attention
    assert config("qwen3-next-80b-a3b", num_hidden_layers=4).layer_types[-1] == "full_attention"
