"""A config that transformers builds but that fails when traced is reported with its own error
(the attention's or the router's), not the fake-tensor rerun's (``index_copy(): ... same device``)."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import TraceError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from tests.llm.test_llm import GEOMETRY  # noqa: E402


def test_query_heads_not_a_multiple_of_kv_heads() -> None:
    llm = CausalLM(transformers.LlamaConfig(**{**GEOMETRY, "num_attention_heads": 4, "num_key_value_heads": 3}))
    with pytest.raises(TraceError, match="Number of heads in key and value must divide") as e:
        llm.phase("prefill", seq_len=4)
    assert "index_copy" not in str(e.value) and "self_attn" in str(e.value)


def test_more_experts_per_token_than_experts() -> None:
    config = transformers.MixtralConfig(**GEOMETRY, num_local_experts=8, num_experts_per_tok=9)
    with pytest.raises(TraceError, match="k not in range") as e:
        CausalLM(config).phase("prefill", seq_len=4)
    assert "index_copy" not in str(e.value) and "model.layers.0.mlp.gate" in str(e.value)  # the router
