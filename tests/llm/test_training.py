"""``opcount llm:NAME --mode train``: the step's memory per device and time, the JSON fields,
and the refusals (one line, status 2, naming the flag)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from opcount.cli.main import main
from opcount.llm.causal_lm import CausalLM
from opcount.llm.models.catalogue import config
from opcount.llm.training import train_step
from tests.training.test_saved import saved_by_autograd

SMALL = ["--hf-config", "n_layer=2", "--hf-config", "n_embd=64", "--hf-config", "n_head=4"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def test_gpt2_activations_equal_autograd() -> None:
    """The LLM path's ``memory.activations`` in train mode (bfloat16, on meta) is what autograd
    saves in a real CPU step of the same model in bfloat16, measured with saved_tensors_hooks."""
    from transformers import GPT2LMHeadModel

    cfg = config("gpt2", n_layer=2, n_embd=64, n_head=4)
    cost = train_step(CausalLM(cfg), seq_len=32, batch=2)
    torch.manual_seed(0)
    real = GPT2LMHeadModel(cfg).to(torch.bfloat16)
    ids = torch.randint(0, cfg.vocab_size, (2, 32))
    assert cost.memory()["activations"] == saved_by_autograd(real, (), {"input_ids": ids, "labels": ids})


def test_json_per_device_and_training(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["llm:gpt2", *SMALL, "--mode", "train", "--seq-len", "64", "--hardware", "h100-sxm"]
    status, out, _ = run(
        [*argv, "--dp", "4", "--zero", "3", "--tokens", "1e9", "--price", "2", "--format", "json"], capsys
    )
    assert status == 0
    data = json.loads(out)
    per = data["memory"]["per_device"]
    assert data["llm"]["memory"] == data["memory"]
    params = data["llm"]["parameters"]["total"]
    assert data["llm"]["parameters"] == {"total": params, "active": params}  # a dense model: one token touches all
    assert data["llm"]["memory"]["weights"] == 2 * params  # the model's bfloat16 weights, before ZeRO splits them
    # ZeRO-3 over 4: bfloat16 weights and gradients, 12 bytes of AdamW states, each a quarter (rounded up)
    assert per["weights"] == -(-2 * params // 4)
    assert per["gradients"] == -(-2 * params // 4)
    assert per["optimizer"] == -(-12 * params // 4)
    assert per["total"] == sum(
        per[k] for k in ("weights", "kv_cache", "activations", "gradients", "optimizer", "transient")
    )
    t: dict[str, Any] = data["training"]
    assert (t["optimizer"], t["zero"], t["dp"], t["recompute"]) == ("adamw", 3, 4, "none")
    assert t["tokens_per_s"] == pytest.approx(4 * 64 / t["step_time"])
    assert t["time_to_train"] == pytest.approx(1e9 / t["tokens_per_s"])
    assert t["cost"] == pytest.approx(t["time_to_train"] / 3600 * 4 * 2)
    assert 0 < t["mfu"] < 1
    # the bound: the largest of its terms, never above the estimate; MFU at the bound the same FLOPs over it
    assert 0 < t["step_time_bound"] <= t["step_time"]
    assert t["mfu_bound"] == pytest.approx(t["mfu"] * t["step_time"] / t["step_time_bound"])
    # the bound counts the FLOPs MFU counts (2 per multiply-add) at the H100 SXM's 989.4 TFLOP/s in
    # bfloat16 (NVIDIA's datasheet, dense), so MFU at the bound is at most 1
    assert t["step_time_bound"] >= 2 * data["llm"]["flops"] / 989.4e12 and t["mfu_bound"] <= 1
    assert t["step_time"] == pytest.approx(t["compute_time"] + t["recompute_time"] + t["exposed_communication_time"])
    llm = data["llm"]
    assert llm["parallel"] == {
        "tp": 1, "pp": 1, "cp": 1, "ep": 1, "dp": 4, "devices": 4, "sequence_parallel": False, "micro_batches": 1,
        "virtual_stages": 1,
    }  # fmt: skip
    # ZeRO-3: a reduce-scatter of the gradients and two all-gathers of the weights, 3 x 3/4 x 2 bytes per parameter
    assert llm["communication"]["bytes_per_device"] == pytest.approx(3 * 3 / 4 * 2 * params)
    assert llm["communication"]["time"] == t["communication_time"]
    # the keys an inference point has: the step on its 4 devices, and the cost of a million tokens
    assert (llm["time"], llm["time_bound"], llm["bound"]) == (t["step_time"], t["step_time_bound"], t["bound"])
    assert llm["tokens_per_s"] == t["tokens_per_s"]
    # $2 a device-hour on 4 devices, a million tokens at tokens_per_s
    per_million = 1e6 / t["tokens_per_s"] / 3600 * 4 * 2
    assert llm["cost"]["per_million_tokens"] == {"trained": pytest.approx(per_million)}
    assert llm["cost"]["per_million_tokens_bound"] == {
        "trained": pytest.approx(1e6 / t["tokens_per_s_bound"] / 3600 * 4 * 2)
    }
    assert (llm["cost"]["usd_per_device_hour"], llm["cost"]["devices"]) == (2, 4)
    assert not {"parallel", "communication"} & set(data)  # in llm, as an inference point's


def test_summary_and_recompute(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["llm:gpt2", *SMALL, "--mode", "train", "--seq-len", "64", "--hardware", "h100-sxm"]
    status, out, _ = run([*base, "--recompute", "full"], capsys)
    assert status == 0
    assert "training step, batch 1 x 64 tokens per device" in out
    assert "recompute full" in out and "MFU" in out
    none = json.loads(run([*base, "--format", "json"], capsys)[1])
    full = json.loads(run([*base, "--recompute", "full", "--format", "json"], capsys)[1])
    assert full["memory"]["per_device"]["activations"] < none["memory"]["per_device"]["activations"]
    assert full["training"]["recompute_time"] > 0 == none["training"]["recompute_time"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--recompute", "full"], "--recompute applies to a training step: add --mode train"),
        (["--mode", "train", "--zero", "2"], "--zero 2 partitions the model states over data-parallel devices"),
        (["--mode", "train", "--phase", "decode"], "--phase is for inference phases"),
        (["--mode", "train", "--weight-dtype", "int4"], "--weight-dtype int4: --mode train trains"),
        (["--mode", "train", "--weight-dtype", "float32"], "--weight-dtype float32 with --act-dtype bfloat16"),
        (["--mode", "train", "--optimizer", "rmsprop"], "argument --optimizer: invalid choice: 'rmsprop'"),
        (["--mode", "train", "--tokens", "1e20"], "argument --tokens: expected 1 to 1e+16 tokens"),
        (["--mode", "train", "--tokens", "1e9"], "--tokens needs --hardware"),
        (["--mode", "train", "--tp", "3"], "--tp 3: does not divide the model's 4 attention heads"),
        # --reserve was accepted and ignored (the capacity stayed the whole 80 GB): refused instead
        (["--mode", "train", "--reserve", "0.5", "--hardware", "h100-sxm"], "--reserve applies to inference"),
        (["--mode", "train", "--max-batch", "--hardware", "h100-sxm"], "--max-batch applies to inference"),
        (["--mode", "train", "--seq-len", "2048"], "exceeds the 1024 rows of the learned position table"),
    ],
)
def test_bad_input_is_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["llm:gpt2", *SMALL, *argv], capsys)
    assert status == 2 and not out
    lines = [line for line in err.splitlines() if line.startswith("opcount: error")]
    assert len(lines) == 1 and message in lines[0], err


def test_whole_model_training_memory(capsys: pytest.CaptureFixture[str]) -> None:
    """``opcount MODEL --mode train``: float32 AdamW, 4 + 4 + 8 bytes per parameter on one device."""
    status, out, _ = run(["hf:GPT2Config", *SMALL, "--mode", "train", "--format", "json"], capsys)
    assert status == 0
    data = json.loads(out)
    per = data["memory"]["per_device"]
    params = data["total"]["params"]
    assert (per["weights"], per["gradients"], per["optimizer"]) == (4 * params, 4 * params, 8 * params)
    assert data["training"] == {"optimizer": "adamw", "zero": 0, "dp": 1, "recompute": "none"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tokens", "1e9"], "--tokens counts the tokens of an LLM's run"),
        (["--recompute", "selective"], "--recompute selective finds the attention scores by the sequence length"),
        (["--recompute", "full"], "--recompute full: the model has no layers (an nn.ModuleList) to checkpoint"),
    ],
)
def test_whole_model_bad_input(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["resnet18", "--mode", "train", "--tracer", "dispatch", "--meta", *argv], capsys)
    assert status == 2 and not out
    lines = [line for line in err.splitlines() if line.startswith("opcount: error")]
    assert len(lines) == 1 and lines[0].startswith(f"opcount: error: {message}"), err


def test_compare_refuses_training_flags(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(["compare", "resnet18", "resnet34", "--recompute", "full"], capsys)
    assert status == 2 and not out
    assert "--recompute applies to one model's report" in err
