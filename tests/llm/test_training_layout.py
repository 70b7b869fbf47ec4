"""A training step on a layout: the activations per device against Korthikanti et al. 2022 (Table 2: tensor
parallelism ``sbh (10 + 24 / t) + 5 a s^2 b / t``, with sequence parallelism ``(34 sbh + 5 a s^2 b) / t``, with
selective recomputation ``34 sbh / t``), per-stage memory under 1F1B and interleaving, the step's terms, and bad
layouts refused in one line naming the flag."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("transformers")

from opcount.cli.main import main
from opcount.llm.causal_lm import CausalLM
from opcount.llm.deploy.layout import Sharding
from opcount.llm.models.catalogue import config
from opcount.llm.training import train_step
from opcount.llm.training.stages import activations
from opcount.training.layout import TrainLayout
from opcount.training.saved import Saved, SavedActivations

S, B, H, A = 512, 2, 64, 4  # sequence, micro-batch, hidden, heads
SBH = S * B * H


def _paper_layer() -> SavedActivations:
    """One transformer layer's saved tensors as Korthikanti et al. 2022 (section 4.1) count them, 16-bit
    activations, 1-byte dropout masks: 34 sbh + 5 a s^2 b bytes."""
    ln, attn, mlp, o_proj = "l.0.ln", "l.0.attn", "l.0.mlp", "l.0.attn.o_proj"
    scores = A * S * S * B
    parts = [
        (4 * SBH, ln, H, 3, False),  # the two layer norms' inputs
        (2 * SBH, "l.0.attn.q_proj", H, 3, False),  # the QKV projection's input
        (4 * SBH, attn, H // A, 4, False),  # Q and K
        (2 * scores, attn, S, 4, True),  # the softmax's output
        (scores, attn, S, 4, True),  # its dropout mask
        (2 * scores, attn, S, 4, True),  # the dropout's output, for the product with V
        (2 * SBH, attn, H // A, 4, False),  # V
        (2 * SBH, o_proj, H, 3, False),  # the output projection's input (row-parallel: split)
        (SBH, attn, H, 3, False),  # the attention's dropout mask
        (2 * SBH, "l.0.mlp.fc1", H, 3, False),  # the MLP's input
        (8 * SBH, mlp, 4 * H, 3, False),  # GeLU's input
        (8 * SBH, "l.0.mlp.fc2", 4 * H, 3, False),  # the second linear's input
        (SBH, mlp, H, 3, False),  # the MLP's dropout mask
    ]
    saved = [Saved(n, 0, sc, key=i + 1, module=m, width=w, dims=d) for i, (n, m, w, d, sc) in enumerate(parts)]
    return SavedActivations(saved, [2 * SBH], "l", frozenset())


SHARDING = Sharding(
    {"l.0.attn.q_proj": "colwise", "l.0.attn.o_proj": "rowwise", "l.0.mlp.fc1": "colwise", "l.0.mlp.fc2": "rowwise"},
    frozenset({"l.0.attn", "l.0.mlp"}),
    frozenset(),
)


def test_the_paper_layer_is_34_sbh_plus_5_as2b() -> None:
    assert _paper_layer().total == 34 * SBH + 5 * A * S * S * B


@pytest.mark.parametrize("t", [1, 2, 4])
def test_activations_per_layer_under_tensor_and_sequence_parallelism(t: int) -> None:
    saved, scores = _paper_layer(), 5 * A * S * S * B
    tensor = activations(saved, "none", TrainLayout(tp=t), SHARDING, H)[0][0]
    assert tensor == pytest.approx(SBH * (10 + 24 / t) + scores / t)
    sequence = activations(saved, "none", TrainLayout(tp=t, sequence_parallel=True), SHARDING, H)[0][0]
    assert sequence == pytest.approx((34 * SBH + scores) / t)
    selective = activations(saved, "selective", TrainLayout(tp=t, sequence_parallel=True), SHARDING, H)[0][0]
    assert selective == pytest.approx(34 * SBH / t)
    # full recomputation keeps the layer's input, 2 sbh (split by t with sequence parallelism), and brings
    # one layer's activations back at a time
    full, _, remat = activations(saved, "full", TrainLayout(tp=t, sequence_parallel=True), SHARDING, H)
    assert full[0] == pytest.approx(2 * SBH / t) and remat == pytest.approx((34 * SBH + scores) / t)
    # context parallelism splits every one of them by cp
    context = activations(saved, "none", TrainLayout(tp=t, cp=2, sequence_parallel=True), SHARDING, H)[0][0]
    assert context == pytest.approx((34 * SBH + scores) / t / 2)


@pytest.fixture(scope="module")
def llama() -> CausalLM:
    return CausalLM(
        config(
            "llama-3-8b", num_hidden_layers=8, hidden_size=128, intermediate_size=256, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=512,
        )
    )  # fmt: skip


def test_stage_memory_under_1f1b_and_interleaving(llama: CausalLM) -> None:
    plain = train_step(llama, seq_len=64, batch=2, layout=TrainLayout(pp=4, micro_batches=8))
    one = [s.activations for s in plain.stages]  # a micro-batch's activations of each stage's 2 layers
    layer = one[1] / 2
    # the layers are alike: the first stage's also hold what the model computes once and its layers share (RoPE)
    assert one[2] == one[1] and one[0] >= one[1]
    held = [plain.stage_memory(s)["activations"] for s in plain.stages]
    # stage k holds min(p - k, m) micro-batches of its 2 layers; the last stage the logits and loss once besides
    assert held[:3] == [round(4 * one[0]), round(3 * one[1]), round(2 * one[2])]
    assert held[3] == round(one[3] + plain.stages[3].outside)
    # interleaved, 2 chunks of one layer a stage: the first stage holds 2 (p - 1) + (v - 1) p + 1 = 11 chunks,
    # L (1 + (p - 1) / (p v)) = 8 x 11 / 8 = 11 layers of a micro-batch
    interleaved = train_step(llama, seq_len=64, batch=2, layout=TrainLayout(pp=4, micro_batches=8, virtual_stages=2))
    first = interleaved.stage_memory(interleaved.stages[0])["activations"]
    assert first == round(11 / 2 * interleaved.stages[0].activations)
    assert first == pytest.approx(11 * layer + 11 / 2 * (one[0] - one[1]), rel=1e-9)
    # each stage's weights: a quarter of the layers', the embedding on the first, the norm and the head on the last
    assert [len(s.layers) for s in plain.stages] == [2, 2, 2, 2]


def test_step_terms_add_up_on_a_layout(llama: CausalLM) -> None:
    layout = TrainLayout(tp=2, pp=2, dp=2, sequence_parallel=True, micro_batches=4)
    cost = train_step(llama, seq_len=64, batch=2, layout=layout, zero=1, hardware="h100-sxm")
    parallel, rate = cost.parallel, cost.throughput
    assert parallel is not None and rate is not None
    assert parallel.time == pytest.approx(sum(parallel.terms.values()))
    # the bubble: (p - 1) / (m + p - 1) = 1 / 5 of the pipeline's part of the step
    paced = parallel.time - parallel.terms["data_parallel"]
    assert parallel.terms["bubble"] == pytest.approx(paced / 5)
    assert 0 < parallel.time_bound <= parallel.time
    # MFU: the traced micro-batch's FLOPs (2 per multiply-add) x 4 micro-batches x 2 replicas over 8 devices
    model_flops = 2 * cost.flops.total() * 4 * 2
    assert rate.mfu == pytest.approx(model_flops / (8 * parallel.time * 989.4e12))
    assert cost.tokens == 2 * 64 * 4 * 2


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


SMALL = ["llm:gpt2", "--hf-config", "n_layer=4", "--hf-config", "n_embd=64", "--hf-config", "n_head=4"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--tp", "3"], "--tp 3: does not divide the model's 4 attention heads"),
        (["--pp", "5"], "--pp 5: more pipeline stages than the model's 4 layers"),
        (["--cp", "3"], "--cp 3: does not divide the sequence of 64 tokens"),
        (["--global-batch", "8", "--micro-batches", "3"], "--micro-batches 3: does not divide --global-batch 8"),
        (["--global-batch", "7", "--dp", "2"], "--global-batch 7: does not divide over --dp 2"),
        # 10**12 sequences in micro-batches of --batch 1 on one replica: 10**12 micro-batches, over 65,536
        (["--global-batch", "1000000000000"], "--global-batch 1000000000000: 1,000,000,000,000 micro-batches"),
        (["--virtual-stages", "2"], "--virtual-stages 2: interleaves a pipeline: give --pp"),
        (["--sequence-parallel"], "--sequence-parallel splits what tensor parallelism keeps whole: give --tp"),
        (["--max-micro-batch"], "--max-micro-batch needs --hardware"),
    ],
)
def test_bad_layouts_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run([*SMALL, "--mode", "train", "--seq-len", "64", *argv], capsys)
    assert status == 2 and not out
    assert err.count("\n") == 1 and message in err, err


def test_cli_json_on_a_layout(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SMALL, "--mode", "train", "--seq-len", "64", "--hardware", "h100-sxm", "--tp", "2", "--pp", "2"]
    argv += ["--dp", "2", "--global-batch", "16", "--sequence-parallel", "--max-micro-batch", "--format", "json"]
    status, out, _ = _run(argv, capsys)
    assert status == 0
    data: dict[str, Any] = json.loads(out)
    t = data["training"]
    assert t["layout"]["micro_batches"] == 8  # 16 sequences over 2 replicas, micro-batches of 1
    assert t["bubble_fraction"] == pytest.approx(1 / 9)  # (2 - 1) / (8 + 2 - 1)
    assert set(t["terms"]) >= {"compute", "tensor_parallel", "pipeline", "bubble", "data_parallel"}
    assert t["step_time"] == pytest.approx(sum(t["terms"].values()))
    assert 0 < t["step_time_bound"] <= t["step_time"] and 0 < t["mfu"] <= t["mfu_bound"] <= 1
    assert t["max_micro_batch"] >= 1
    # the slowest stage paces the step: m + (p - 1) of its micro-batch times, then the exposed gradients' sync
    pace = max(s["micro_batch_time"] for s in t["stages"])
    assert t["step_time"] == pytest.approx(9 * pace + t["terms"]["data_parallel"])
    assert t["step_time_bound"] == pytest.approx(max(s["step_time_bound"] for s in t["stages"]))
    stages = data["memory"]["per_stage"]
    assert [s["stage"] for s in stages] == [0, 1] and data["memory"]["per_device"] in [
        {k: v for k, v in s.items() if k not in ("stage", "layers")} for s in stages
    ]
    assert data["llm"]["parallel"]["devices"] == 8


def test_a_sweep_prices_each_point_as_its_own_run(capsys: pytest.CaptureFixture[str]) -> None:
    base = [*SMALL, "--mode", "train", "--seq-len", "64", "--hardware", "h100-sxm", "--dp", "2", "--format", "json"]
    status, out, _ = _run([*base, "--sweep", "tp=1,2", "--sweep", "zero=0,3", "--sweep", "recompute=none,full"], capsys)
    assert status == 0
    points = json.loads(out)["points"]
    assert [(p["tp"], p["zero"], p["recompute"]) for p in points][:3] == [
        (1, 0, "none"),
        (1, 0, "full"),
        (1, 3, "none"),
    ]
    assert len(points) == 8
    # the point tp=2, zero=3, recompute=full is what that run alone gives: one trace serves them all
    status, out, _ = _run([*base, "--tp", "2", "--zero", "3", "--recompute", "full"], capsys)
    alone = json.loads(out)
    point = next(p for p in points if (p["tp"], p["zero"], p["recompute"]) == (2, 3, "full"))
    assert point["training"]["step_time"] == pytest.approx(alone["training"]["step_time"])
    assert point["memory"] == alone["memory"]["per_device"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--sweep", "tp=1,3"], "--tp 3: does not divide the model's 4 attention heads (--sweep point tp=3)"),
        (["--sweep", "batch=1,2"], "--sweep batch=...: --mode train sweeps tp, pp, cp"),
        (["--sweep", "zero=0,1"], "--sweep zero=1: ZeRO partitions over data-parallel devices"),
    ],
)
def test_bad_sweeps_are_one_line(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run([*SMALL, "--mode", "train", "--seq-len", "64", "--hardware", "h100-sxm", *argv], capsys)
    assert status == 2 and not out
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"opcount: error: {message}"), err


def test_a_training_sweep_key_needs_mode_train(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run([*SMALL, "--seq-len", "64", "--sweep", "zero=1,2"], capsys)
    assert status == 2 and not out and "--sweep zero=... applies to a training step: add --mode train" in err


def test_a_search_lists_the_layouts_that_fit_fastest_first(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SMALL, "--mode", "train", "--seq-len", "64", "--hardware", "h100-sxm", "--devices", "8"]
    status, out, _ = _run([*argv, "--global-batch", "16", "--format", "json"], capsys)
    assert status == 0
    points = json.loads(out)["points"]
    assert 1 <= len(points) <= 10
    for p in points:
        # every layout fills the 8 devices, tensor parallelism within the 4 heads, its global batch whole
        assert p["tp"] * p["pp"] * p["cp"] * p["dp"] == 8 and 4 % p["tp"] == 0 and 16 % p["dp"] == 0
        assert p["fits"] and p["training"]["layout"]["sequence_parallel"] == (p["tp"] > 1)
    times = [p["training"]["step_time"] for p in points]
    assert times == sorted(times)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--devices", "8", "--tp", "2"], "--devices searches the layouts: drop --tp"),
        (["--devices", "8", "--sweep", "zero=0,1"], "--devices searches the layouts: drop --sweep"),
        # a billion devices is refused by its own flag, before any layout of them is built
        (["--devices", "1000000000"], "--devices 1000000000: at most 65,536"),
    ],
)
def test_bad_searches(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = _run([*SMALL, "--mode", "train", "--seq-len", "64", "--hardware", "h100-sxm", *argv], capsys)
    assert status == 2 and not out and message in err, err
    assert err.count("\n") == 1, err


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_one_device_holds_what_autograd_saves(llama: CausalLM, recompute: str) -> None:
    # no layout: the activations held are the measured ones under the recomputation, as before layouts
    cost = train_step(llama, seq_len=64, batch=2, recompute=recompute)
    assert cost.memory()["activations"] == cost.saved.kept(recompute)


def test_tied_embeddings_on_the_first_and_the_last_stage() -> None:
    # GPT-2, h = 64, 4 layers over 2 stages, bfloat16: a layer 12 h^2 + 13 h = 49,984 parameters, the token
    # embedding V h = 50,257 x 64 (tied to the output layer), positions 1024 h, the final norm 2 h
    gpt2 = CausalLM(config("gpt2", n_layer=4, n_embd=64, n_head=4))
    cost = train_step(gpt2, seq_len=64, layout=TrainLayout(pp=2))
    layer, vocab = 12 * 64 * 64 + 13 * 64, 50257 * 64
    assert cost.stages[0].states.weights == 2 * (vocab + 1024 * 64 + 2 * layer)
    assert cost.stages[1].states.weights == 2 * (2 * layer + 2 * 64 + vocab)  # the output layer's copy
