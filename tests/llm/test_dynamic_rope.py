"""Dynamic RoPE (``rope_type: "dynamic"``, NTK-aware scaling) priced on meta, in Python and on the
command line, against the default RoPE of the same Llama plus the update worked by hand.

transformers' update (``dynamic_rope_update``, ``_compute_dynamic_ntk_parameters``) reads the
positions seen, ``n = max(position_ids) + 1`` (integer arithmetic: no flop), and only when ``n``
passes ``max_position_embeddings`` (64 here) makes new frequencies for the ``e / 2`` rotary pairs:

- the new base on one value: ``factor * n`` (mul), ``/ max_position_embeddings`` (div),
  ``- (factor - 1)`` (sub), ``** (e / (e - 2))`` (pow), ``base *`` (mul): 5 flops;
- per pair: ``2i / e`` (div), ``base' ** (2i / e)`` (pow), ``1 / (...)`` (a reciprocal and the
  multiply by 1.0 of torch's reversed division): 4 flops, ``4 x e / 2 = 32`` with e = 16.

So 37 flops more per forward, whatever the batch or the new tokens (the frequencies are shared),
and no multiply-add; the rotation itself then costs what the default RoPE's does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5:
    pytest.skip("rope_parameters is transformers 5's spelling", allow_module_level=True)

from opcount.cli import main  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.training import train_step  # noqa: E402

D, H, G, E, V, MAX = 64, 4, 2, 16, 128, 64
DEFAULT = {"rope_type": "default", "rope_theta": 10000.0}
DYNAMIC = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0}
UPDATE = {"mul": 2 + E // 2, "div": 1 + E // 2, "sub": 1, "pow": 1 + E // 2, "reciprocal": E // 2}
UPDATE_FLOPS = 5 + 4 * (E // 2)  # 37


def llama(rope: dict[str, Any]) -> Any:
    return transformers.LlamaConfig(
        vocab_size=V, hidden_size=D, intermediate_size=128, num_hidden_layers=2, num_attention_heads=H,
        num_key_value_heads=G, max_position_embeddings=MAX, rope_parameters=rope,
    )  # fmt: skip


@pytest.fixture(scope="module")
def models() -> tuple[CausalLM, CausalLM]:
    return CausalLM(llama(DEFAULT)), CausalLM(llama(DYNAMIC))


def extra(base: Any, dynamic: Any) -> dict[str, int]:
    """Flops per operator the dynamic model's phase counts beyond the default one's."""
    a, b = base.flops.by_operator(), dynamic.flops.by_operator()
    return {k: b.get(k, 0) - a.get(k, 0) for k in {*a, *b} if b.get(k, 0) != a.get(k, 0)}


@pytest.mark.parametrize(
    ("phase", "options", "positions"),
    [
        ("decode", {"kv_len": 10}, 11),
        ("decode", {"kv_len": 63}, 64),  # max_position_embeddings exactly: the frequencies held serve
        ("decode", {"kv_len": 64}, 65),
        ("decode", {"kv_len": 100, "batch": 3}, 101),
        ("prefill", {"seq_len": 100, "batch": 3}, 100),
    ],
)
def test_dynamic_rope_prices_as_default_rope_plus_its_update(
    models: tuple[CausalLM, CausalLM], phase: str, options: dict[str, int], positions: int
) -> None:
    base, dynamic = (llm.phase(phase, **options) for llm in models)
    grown = positions > MAX
    assert extra(base, dynamic) == (UPDATE if grown else {})
    assert dynamic.flops.total() - base.flops.total() == (UPDATE_FLOPS if grown else 0)
    macs = [llm.phase(phase, **options, preset="macs").flops.total() for llm in models]
    assert macs[0] == macs[1]  # the update multiplies and adds nothing


def test_the_rotary_module_is_left_as_it_was(models: tuple[CausalLM, CausalLM]) -> None:
    rotary = models[1].model.model.rotary_emb
    before = (dict(vars(rotary)), rotary.inv_freq, rotary.max_seq_len_cached)
    models[1].phase("decode", kv_len=100)
    assert (dict(vars(rotary)), rotary.inv_freq, rotary.max_seq_len_cached) == before
    assert "forward" not in vars(rotary)


def test_a_training_step_runs_the_update_once(models: tuple[CausalLM, CausalLM]) -> None:
    base, dynamic = (train_step(llm, seq_len=100).flops.total() for llm in models)
    assert dynamic - base == UPDATE_FLOPS


def run_json(capsys: pytest.CaptureFixture[str], rope: dict[str, Any]) -> dict[str, Any]:
    tiny = {"hidden_size": D, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": H,
            "num_key_value_heads": G, "vocab_size": V, "max_position_embeddings": MAX, "rope_parameters": rope}  # fmt: skip
    flags = [part for key, value in tiny.items() for part in ("--hf-config", f"{key}={value!r}")]
    status = main(["hf:LlamaConfig", *flags, "--phase", "decode", "--kv-len", "100", "--format", "json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_dynamic_rope_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    base, dynamic = run_json(capsys, DEFAULT), run_json(capsys, DYNAMIC)
    assert dynamic["llm"]["flops"] - base["llm"]["flops"] == UPDATE_FLOPS
