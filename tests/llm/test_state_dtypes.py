"""The dtype of each cache part, as serving engines hold it, against closed forms worked by hand from
tiny configs.

- The KV cache is in the model's dtype unless asked (vLLM's ``kv_cache_dtype="auto"``: "will use
  model data type"), whatever the activations: FP8 weights and activations keep a bfloat16 cache.
- A recurrent state is held apart from it (vLLM's ``mamba_cache_dtype`` for the conv states,
  ``mamba_ssm_cache_dtype`` for the recurrent ones): the conv states in the model's dtype, the
  recurrent states in ``state`` (``--state-dtype``), by default what the config sets (Nemotron-H's
  ``mamba_ssm_cache_dtype``, float32 in transformers' ``NemotronHConfig``; Qwen3.5's
  ``mamba_ssm_dtype``), else the model's dtype; Kimi-Linear's KDA state is float32 whatever is asked.

Tiny Nemotron-H (its layers: Mamba-2, MoE, attention, MLP; transformers' default pattern): a Mamba-2
mixer of 4 heads of 16 with an SSM state of 8, one group, conv kernel 4. Per sequence and layer:

    SSM state   heads x head_dim x state_size = 4 x 16 x 8 = 512 elements, float32: 2048 bytes
    conv state  (heads x head_dim + 2 x groups x state_size) x conv_kernel = (64 + 16) x 4 = 320, bf16: 640
    together    2688 bytes (the SSM state in bfloat16: 1024 + 640 = 1664)

and the attention's keys and values, 2 KV heads of 8: 2 x 2 x 8 = 32 elements a token.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="layer types need transformers 5")

from opcount.cli import main  # noqa: E402
from opcount.errors import OpcountError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.precision.dtypes import Precision, StateDtypeError  # noqa: E402
from tests.llm.test_decode_bound_bytes import STEPS  # noqa: E402

B, KV_LEN = 2, 5
SSM, CONV = 4 * 16 * 8, (64 + 2 * 8) * 4  # 512 and 320 elements per sequence
TOKEN = 2 * 2 * 8  # keys and values of one token
NEMOTRON = {  # --hf-config: transformers' NemotronHConfig at the tiny sizes above
    "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8, "mamba_num_heads": 4,
    "mamba_head_dim": 16, "n_groups": 1, "ssm_state_size": 8, "conv_kernel": 4, "vocab_size": 100,
    "intermediate_size": 64, "n_routed_experts": 2, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
    "moe_shared_expert_intermediate_size": 16,
}  # fmt: skip


def _nemotron(**extra: Any) -> Any:
    return transformers.NemotronHConfig(**NEMOTRON, **extra)


def _cache(config: Any, precision: Precision) -> dict[str, int]:
    return CausalLM(config, precision).kv_bytes_by_type(KV_LEN, 1, B)


def test_nemotron_h_state_is_float32_by_default_as_its_config_says() -> None:
    llm = CausalLM(_nemotron(), Precision())
    assert llm.config.mamba_ssm_cache_dtype == "float32"  # transformers' default, vLLM's when a config lacks it
    assert llm.precision.state == "float32"
    assert llm.precision.label() == "w16a16, state float32"
    # the SSM state at 4 bytes, the conv state at 2; the attention's 6 tokens at 2
    assert llm.kv_bytes_by_type(KV_LEN, 1, B) == {
        "state": B * (SSM * 4 + CONV * 2),
        "full_attention": B * 6 * TOKEN * 2,
    }
    assert llm.kv_bytes_by_type(KV_LEN, 1, B)["state"] == 2 * 2688


def test_state_dtype_bf16_brings_the_state_back_to_16_bits() -> None:
    llm = CausalLM(_nemotron(), Precision(state="bf16"))
    assert llm.precision.state == "bfloat16" and llm.precision.label() == "w16a16"
    assert llm.kv_bytes_by_type(KV_LEN, 1, B)["state"] == B * (SSM + CONV) * 2 == 2 * 1664


def test_a_config_naming_bfloat16_holds_the_state_in_bfloat16() -> None:
    assert _cache(_nemotron(mamba_ssm_cache_dtype="bfloat16"), Precision())["state"] == 2 * 1664


def test_the_kv_dtype_leaves_the_state_alone() -> None:
    # vLLM's --kv-cache-dtype fp8 quantizes the attention's keys and values, not the Mamba states
    held = _cache(_nemotron(), Precision(kv="fp8"))
    assert held == {"state": 2 * 2688, "full_attention": B * 6 * TOKEN * 1}


def test_state_dtype_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    sizes = [a for k, v in NEMOTRON.items() for a in ("--hf-config", f"{k}={v}")]
    argv = ["hf:NemotronHConfig", *sizes, "--phase", "decode", "--kv-len", str(KV_LEN), "--batch", str(B)]
    held = {}
    for state in (None, "bf16"):
        assert main([*argv, "--format", "json", *(["--state-dtype", state] if state else [])]) == 0
        data = json.loads(capsys.readouterr().out)
        held[state] = (data["llm"]["precision"], data["memory"]["kv_cache_by_type"]["state"])
    assert held[None] == (
        {
            "weight": "bfloat16",
            "act": "bfloat16",
            "kv": "bfloat16",
            "state": "float32",
            "label": "w16a16, state float32",
        },
        2 * 2688,
    )
    assert held["bf16"][0]["state"] == "bfloat16" and held["bf16"][1] == 2 * 1664


def test_qwen3_5_style_mamba_ssm_dtype_field_sets_the_gated_deltanet_state() -> None:
    # Qwen3-Next's gated DeltaNet: a conv over q, k, v (2 x 2 x 8 + 4 x 8 = 64 channels) x 4 taps = 256,
    # and a state per value head 8 x 8 (4 x 64 = 256); a config's mamba_ssm_dtype (Qwen3.5's field, which
    # vLLM and SGLang read) puts the state in float32
    base = STEPS["qwen3_next"].config()
    assert _cache(base, Precision())["state"] == B * (256 + 256) * 2
    base.mamba_ssm_dtype = "float32"
    assert _cache(base, Precision())["state"] == B * (256 * 2 + 256 * 4)


def test_kimi_linear_kda_state_is_float32_whatever_is_asked() -> None:
    # three convs (q, k, v: 32 channels x 4 taps each, 384) in bf16 and a state per head 8 x 8 (4 x 64 =
    # 256) in float32: transformers writes it as float32, vLLM's kda_state_dtype holds it so
    config = STEPS["kimi_linear"].config()
    for precision in (Precision(), Precision(state="bf16")):
        assert _cache(config, precision)["state"] == B * (384 * 2 + 256 * 4)


def test_the_kv_cache_stays_in_the_models_dtype_under_narrow_activations() -> None:
    assert Precision(weight="fp8", act="fp8").kv == "bfloat16"
    assert Precision(weight="int8", act="int8").kv == "bfloat16"
    assert Precision(act="nvfp4").kv == "bfloat16"
    assert Precision(act="float32").kv == "float32"
    assert Precision(act="fp16").kv == "float16"
    assert Precision(weight="fp8", act="fp8", kv="fp8").kv == "float8_e4m3fn"


def test_the_label_names_the_kv_dtype_where_the_activations_do_not_say_it() -> None:
    assert Precision().label() == "w16a16"
    assert Precision(weight="fp8", act="fp8").label() == "w8a8, KV bfloat16"
    assert Precision(weight="fp8", act="fp8", kv="fp8").label() == "w8a8, KV float8_e4m3fn"
    assert Precision(kv="fp8").label() == "w16a16, KV float8_e4m3fn"
    assert Precision(weight="fp8", act="fp8").label(cache=False) == "w8a8"  # a training step holds no cache


def test_an_attention_free_model_names_no_kv_cache() -> None:
    # Mamba: every layer a state-space mixer (a conv state and an SSM state), no keys and values anywhere
    config = transformers.MambaConfig(hidden_size=64, state_size=8, num_hidden_layers=2, vocab_size=100)
    llm = CausalLM(config, Precision(weight="fp8", act="fp8"))
    assert all(layer.layer_type == "state" and not layer.token_elements for layer in llm.caches.layers)
    # a8 says nothing of a cache: the state (the model's bfloat16) is named, no KV cache is
    assert llm.precision.label() == "w8a8, state bfloat16"
    assert not llm.precision.holds_kv
    # a model with attention still names its KV cache (Nemotron-H: Mamba-2 mixers and attention)
    assert CausalLM(_nemotron(), Precision(weight="fp8", act="fp8")).precision.label() == (
        "w8a8, KV bfloat16, state float32"
    )


def test_an_attention_free_model_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    sizes = ["--hf-config", "hidden_size=64", "--hf-config", "state_size=8", "--hf-config", "num_hidden_layers=2"]
    argv = ["hf:MambaConfig", *sizes, "--phase", "decode", "--weight-dtype", "fp8", "--act-dtype", "fp8"]
    assert main([*argv, "--format", "json"]) == 0
    precision = json.loads(capsys.readouterr().out)["llm"]["precision"]
    # no KV dtype where nothing holds keys and values, as no state dtype where nothing holds a state
    assert (precision["kv"], precision["state"], precision["label"]) == (None, "bfloat16", "w8a8, state bfloat16")


def test_llama_fp8_cache_bytes_stay_16_bit() -> None:
    # Llama at the tiny sizes of test_decode_bound_bytes (2 layers, 2 KV heads of 8): FP8 weights and
    # activations hold 2 layers x 32 elements x 2 bytes = 128 bytes a token, as in bfloat16
    config = STEPS["llama"].config()
    fp8 = CausalLM(config, Precision(weight="fp8", act="fp8"))
    assert fp8.kv_bytes(tokens=10, batch=3) == 3 * 10 * 2 * TOKEN * 2


def test_a_state_dtype_for_a_model_without_a_state_is_refused() -> None:
    with pytest.raises(StateDtypeError, match="LlamaForCausalLM holds no recurrent state"):
        CausalLM(STEPS["llama"].config(), Precision(state="float32"))


def test_a_state_dtype_engines_do_not_hold_is_refused() -> None:
    with pytest.raises(OpcountError, match=r"unknown recurrent state dtype 'fp8'; choose one of float32, bfloat16, "):
        Precision(state="fp8")
    with pytest.raises(OpcountError, match=r"NemotronHConfig\.mamba_ssm_cache_dtype is 'int8'"):
        CausalLM(_nemotron(mamba_ssm_cache_dtype="int8"))


def test_state_dtype_refusals_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llm:gpt2", "--hf-config", "n_layer=1", "--phase", "decode", "--state-dtype", "float32"]) == 2
    assert "opcount: error: --state-dtype float32: GPT2LMHeadModel holds no recurrent state" in capsys.readouterr().err
    assert main(["llm:gpt2", "--phase", "decode", "--state-dtype", "int8"]) == 2
    assert "unknown recurrent state dtype 'int8'" in capsys.readouterr().err
    assert main(["llm:gpt2", "--mode", "train", "--state-dtype", "float32"]) == 2
    assert "--state-dtype is for inference phases" in capsys.readouterr().err


def test_a_kv_dtype_on_an_attention_free_model_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    # Mamba keeps a conv state and an SSM state, no keys and values: --kv-dtype would set nothing
    sizes = ["--hf-config", "hidden_size=64", "--hf-config", "state_size=8", "--hf-config", "num_hidden_layers=2"]
    assert main(["hf:MambaConfig", *sizes, "--phase", "decode", "--kv-dtype", "fp8"]) == 2
    err = capsys.readouterr().err
    assert "opcount: error: --kv-dtype fp8: hf:MambaConfig holds no keys and values" in err
    assert len(err.strip().splitlines()) == 1
