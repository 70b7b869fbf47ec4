"""Sizes bounded before anything is built (opcount.llm.models.limits): a config by arithmetic and by the
modules its build makes, a phase's batch and positions."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.models import limits  # noqa: E402
from opcount.llm.models.build import build_on_meta  # noqa: E402
from opcount.llm.models.limits import MAX_LAYERS, SizeError, check_config  # noqa: E402
from tests.llm.test_llm import GEOMETRY, llama  # noqa: E402


def test_a_billion_layers_is_refused_before_building() -> None:
    # built, this would make a billion decoder layers on meta: minutes and gigabytes
    with pytest.raises(SizeError, match=r"LlamaConfig.num_hidden_layers = 1,000,000,000: more than 1,024 layers"):
        build_on_meta(transformers.LlamaConfig(**{**GEOMETRY, "num_hidden_layers": 10**9}))


def test_layers_named_as_the_config_stores_them() -> None:
    with pytest.raises(SizeError, match=r"GPT2Config.n_layer = "):
        check_config(transformers.GPT2Config(n_layer=MAX_LAYERS + 1))
    check_config(transformers.GPT2Config(n_layer=MAX_LAYERS))


def test_parameters_estimated_from_the_sizes() -> None:
    # vocab x hidden + layers x (4 hidden^2 + 3 hidden x intermediate):
    # 1000 x 1e7 + 2 x (4e14 + 3 x 1e7 x 512) = 8.0004e14
    with pytest.raises(SizeError, match=r"about 8e\+14 parameters.*over the limit of 1e\+14") as e:
        check_config(transformers.LlamaConfig(**{**GEOMETRY, "hidden_size": 10**7}))
    assert "hidden_size 10000000" in str(e.value)
    # 1 x 1e6 + 1 x (4e12 + 3e12) = 7e12: within the limit
    check_config(
        transformers.LlamaConfig(hidden_size=10**6, num_hidden_layers=1, intermediate_size=10**6, vocab_size=1)
    )


def test_sub_configs_are_bounded() -> None:
    config = transformers.LlavaConfig(text_config={"model_type": "llama", "num_hidden_layers": 10**6})
    with pytest.raises(SizeError, match="num_hidden_layers = 1,000,000"):
        check_config(config)


def test_modules_counted_while_building(monkeypatch: pytest.MonkeyPatch) -> None:
    # what the arithmetic does not bound (modules per layer, experts per layer where each is a module,
    # as transformers 4.x builds them) the build stops at: the limit is lowered here so that the test
    # builds a few hundred modules, not the limit's 200,000. A Llama decoder layer makes 13 modules
    # (the layer; attention and its 4 projections; the MLP, its 3 projections and its activation;
    # 2 norms): 20 layers make 260, more than 100.
    monkeypatch.setattr(limits, "MAX_MODULES", 100)
    config = transformers.LlamaConfig(**{**GEOMETRY, "num_hidden_layers": 20})
    with pytest.raises(SizeError, match="LlamaConfig: more than 100 modules"):
        build_on_meta(config)
    monkeypatch.setattr(limits, "MAX_MODULES", 1000)
    build_on_meta(config)  # 260 modules and the model's 7 others: within


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch": 2**20 + 1, "seq_len": 1}, "batch 1,048,577: more than 1,048,576 sequences"),
        ({"seq_len": 2**24 + 1}, "16,777,217 positions per sequence: more than 16,777,216"),
        ({"seq_len": 1, "kv_len": 2**24}, "16,777,217 positions"),
        ({"seq_len": 10**20}, "positions per sequence"),
    ],
)
def test_phase_sizes(kwargs: dict[str, int], message: str) -> None:
    llm = CausalLM(llama())
    phase = "decode" if "kv_len" in kwargs else "prefill"
    with pytest.raises(SizeError, match=message):
        llm.phase(phase, **kwargs)


def test_generation_bounded_before_its_prefill() -> None:
    from opcount.llm.generation import generation

    with pytest.raises(SizeError, match="positions per sequence"):
        generation(CausalLM(llama()), 8, 10**20)


def test_an_integer_past_int64_is_named() -> None:
    # the KV heads are in no parameter estimate: torch.empty's size overflowed when building
    with pytest.raises(SizeError, match=r"LlamaConfig.num_key_value_heads = 100,000,000,000,000,000,000: more than"):
        build_on_meta(transformers.LlamaConfig(**{**GEOMETRY, "num_key_value_heads": 10**20}))
