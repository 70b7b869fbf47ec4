"""transformers models from the command line (``hf:``), as a new user types them.

Causal LMs whose attention mask transformers builds with torch.vmap (Llama, Qwen2, Mistral,
Mixtral) run under the dispatch tracer by default; encoder-decoders and text-image models get
every input their forward needs. Closed forms: d hidden, f MLP width, n layers, h heads, g KV
heads, e = d/h, V vocab, s tokens; 1 multiply-add = 1 flop.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from opcount.cli import main

D, F, N, H, G, V, S = 64, 128, 2, 4, 2, 1000, 16
E = D // H


def small(**fields: int) -> list[str]:
    base = {"hidden_size": D, "intermediate_size": F, "num_hidden_layers": N, "num_attention_heads": H,
            "num_key_value_heads": G, "vocab_size": V, **fields}  # fmt: skip
    return [a for k, v in base.items() for a in ("--hf-config", f"{k}={v}")]


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    status = main([*args, "--format", "json", "-q"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def linear(data: dict, module: str = ".") -> int:
    return sum(r["flops"] for r in data["operators"] if r["module"] == module and r["operator"] == "linear")


@pytest.mark.parametrize("cls", ["LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"])
def test_causal_lm_classes(capsys: pytest.CaptureFixture[str], cls: str) -> None:
    data = run_json(capsys, f"hf:{cls}", *small(), "--seq-len", str(S))
    assert data["meta"]["tracer"] == "dispatch"  # the tracer that can record their masks
    # the whole forward: every layer on every token, the output projection on every position
    assert linear(data) == N * S * (2 * D * D + 2 * D * G * E + 3 * D * F) + S * D * V


def test_the_jit_tracer_when_asked_still_works_with_a_ready_mask(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "hf:LlamaForCausalLM", *small(), "--seq-len", str(S), "--tracer", "jit")
    assert linear(data) == N * S * (2 * D * D + 2 * D * G * E + 3 * D * F) + S * D * V


@pytest.mark.parametrize("meta", [[], ["--meta"]])
def test_mixtral_routes_by_expectation(capsys: pytest.CaptureFixture[str], meta: list[str]) -> None:
    experts, top_k = 4, 2
    fields = small(num_local_experts=experts, num_experts_per_tok=top_k)
    data = run_json(capsys, "hf:MixtralForCausalLM", *fields, "--seq-len", str(S), *meta)
    moe = "model.layers.0.mlp"
    assert linear(data, f"{moe}.experts") == S * top_k * 3 * D * F  # every token to top_k experts
    assert linear(data, f"{moe}.gate") == S * D * experts


def test_text_image_model_gets_both_inputs(capsys: pytest.CaptureFixture[str]) -> None:
    fields = [
        "--hf-config",
        "text_config={'num_hidden_layers': 1}",
        "--hf-config",
        "vision_config={'num_hidden_layers': 1}",
    ]
    data = run_json(capsys, "hf:CLIPConfig", *fields)
    names = {i["name"] for i in data["meta"]["inputs"]}
    assert {"input_ids", "pixel_values"} <= names


@pytest.mark.parametrize(
    "spec,fields",
    [
        ("hf:WhisperConfig", ["encoder_layers=1", "decoder_layers=1"]),
        ("hf:BloomConfig", ["n_layer=1"]),
        ("hf:BloomForCausalLM", ["n_layer=1"]),
        ("hf:GPT2LMHeadModel", ["n_layer=1"]),
    ],
)
def test_models_that_need_their_own_inputs(capsys: pytest.CaptureFixture[str], spec: str, fields: list[str]) -> None:
    data = run_json(capsys, spec, *(a for f in fields for a in ("--hf-config", f)), "--seq-len", "8")
    assert data["total"]["flops"] > 0
    assert not data["unsupported_ops"]["flops"]
