"""opcount.llm.serve's simulate on a small Llama: the fitted step cost against closed forms, a lone request's
latencies against the phases traced on their own, and ``opcount simulate`` end to end."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
from transformers import LlamaConfig

from opcount.cli.main import main
from opcount.errors import OpcountError
from opcount.llm.causal_lm import CausalLM
from opcount.llm.deploy.layout import Parallel
from opcount.llm.phases import PhaseCost
from opcount.llm.serve.simulate import simulate
from opcount.llm.serve.step_cost import (
    Affine,
    FittedStepCost,
    Prefix,
    Prompt,
    Step,
    fitted,
    prefix_points,
    prompt_lengths,
)
from opcount.llm.serve.workload import Workload

SMALL = {
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000,
}  # fmt: skip
# the brief's tiny model: two layers of width 64
TINY = {**SMALL, "hidden_size": 64, "intermediate_size": 128}
FLAGS = [f"--hf-config={k}={v}" for k, v in SMALL.items()]


def test_decode_fit_recovers_an_affine_cost() -> None:
    # D(b, K) = 1 + 2 b + 3 K at (1, 10), (1, 30), (4, 4 x 10)
    fit = Affine.solve(10, 30, 4, 1 + 2 + 30, 1 + 2 + 90, 1 + 8 + 120)
    assert (fit.d0, fit.d1, fit.d2) == pytest.approx((1, 2, 3))


def test_a_prompt_is_interpolated_and_a_chunk_adds_its_cached_prefix() -> None:
    prompt = Prompt((1, 16, 64), (1.0, 2.0, 5.0))
    assert prompt(40) == pytest.approx(2 + 3 * 24 / 48)
    assert prompt(0) == pytest.approx(1 - 1 / 15)  # its first segment, extended
    # each cached position adds 0.01 s, and 0.001 s per new token attending to it
    cost = FittedStepCost(Affine(0.5, 0.25, 0.0), prompt, Prefix(0.01, 0.001))
    assert cost(Step(0, 0, ((0, 64),))) == pytest.approx(5.0)  # a prompt alone: P(L)
    # 48 tokens over 16 cached: P(48) = 2 + 3 x 32 / 48 = 4, and 16 x (0.01 + 0.048)
    assert cost(Step(0, 0, ((16, 48),))) == pytest.approx(4.0 + 0.928)
    # one forward: decode's D(2, 7) = 1, the chunk's 24 tokens beside the 2 decode ones, P(26) - P(2) = 2.625 -
    # (1 + 1/15), and its 16 cached positions 16 x (0.01 + 0.024)
    assert cost(Step(2, 7, ((16, 24),))) == pytest.approx(1.0 + 2.625 - (1 + 1 / 15) + 0.544)
    # two prompts of 16 in one step: one forward of 32 tokens, P(32) = 3, less the attention a sequence of 32
    # would have between its halves, 0.001 x (32^2 - 2 x 16^2) / 2 = 0.256 (each alone: P(16) = 2)
    assert cost(Step(0, 0, ((0, 16), (0, 16)))) == pytest.approx(3.0 - 0.256)


def test_the_prefix_fit_recovers_a_bilinear_cost() -> None:
    # 100 cached positions add 100 (0.01 + 0.001 n): 2.6 s to a chunk of 16, 26.6 s to one of 256
    fit = Prefix.solve(100, 16, 256, 2.6, 26.6)
    assert (fit.c, fit.e) == pytest.approx((0.01, 0.001))
    one = Prefix.solve(100, 16, 16, 2.6, 2.6)  # one chunk length: the slope alone
    assert (one.c, one.e) == pytest.approx((0.026, 0.0))


def test_prompt_lengths_are_fourfold_up_to_the_longest_chunk_and_the_budget() -> None:
    assert prompt_lengths(1000, 8192) == [1, 16, 64, 256, 1000, 8192]  # and the budget: a step's tokens together
    assert prompt_lengths(1000, 512) == [1, 16, 64, 256, 512]  # no chunk is longer than the budget
    # over half the prompt cached: chunks of 16 and 256 (the longest that fits), checked at 64 over 250
    assert prefix_points(1000, [1, 16, 64, 256, 1000]) == (500, 16, 256, (64, 250))


def test_a_chunk_over_a_cached_prefix_is_its_traced_phase() -> None:
    llm = CausalLM(LlamaConfig(**TINY))
    workload = Workload(requests=1, input_len=1000, output_len=4, rate=1.0)
    fit = simulate(llm, workload, "h100-sxm").fit
    assert fit is not None and fit.chunk_error < 0.01
    for n, k in ((100, 300), (500, 400)):  # neither a point the fit traced
        cost = llm.phase("prefill", seq_len=n, kv_len=k, hardware="h100-sxm")
        traced = llm.deploy(cost, Parallel(), hardware=cost.roofline.hardware if cost.roofline else None).step_time
        assert traced is not None
        assert fit.estimate.chunk(n, k) == pytest.approx(traced, rel=0.01)


def test_a_lone_request_sees_its_prefill_and_decode_steps() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    # requests 100 s apart: each alone
    workload = Workload(requests=3, input_len=200, output_len=6, rate=0.01, arrivals="constant")
    result = simulate(llm, workload, "h100-sxm")

    def traced(phase: str, seq_len: int, kv_len: int) -> float:
        cost = llm.phase(phase, seq_len=seq_len, kv_len=kv_len, hardware="h100-sxm")
        time = llm.deploy(cost, Parallel(), hardware=cost.roofline.hardware if cost.roofline else None).step_time
        assert time is not None
        return time

    m = result.metrics
    assert m["p50_ttft_ms"] == pytest.approx(traced("prefill", 200, 0) * 1e3, rel=1e-9)
    # the first decode step reads the prompt, the last the prompt and 4 answer tokens: the fit's two points
    rows = result.per_request
    first, last = traced("decode", 1, 200), traced("decode", 1, 204)
    assert rows[0]["tpot"] == pytest.approx(sum(first + (last - first) * i / 4 for i in range(5)) / 5, rel=1e-9)
    assert m["preemptions"] == 0 and m["completed"] == 3
    assert result.bound is not None and result.bound["p50_ttft_ms"] <= m["p50_ttft_ms"]


def test_opcount_simulate_end_to_end(tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim.json"  # type: ignore[operator]
    argv = ["simulate", "hf:LlamaConfig", *FLAGS, "--hardware", "h100-sxm", "--concurrency", "1", "--requests", "3"]
    assert main([*argv, "--input-len", "64", "--output-len", "4", "-o", str(out), "--format", "json", "-q"]) == 0
    sim = json.loads(out.read_text())["simulation"]
    m = sim["metrics"]
    assert m["completed"] == 3 and m["total_output_tokens"] == 12
    # one client: the requests one after another, each seeing the same latencies
    assert m["p99_ttft_ms"] == pytest.approx(m["p50_ttft_ms"])
    assert m["request_throughput"] == pytest.approx(1e3 / m["mean_e2el_ms"])
    assert sim["engine"]["block_size"] == 16 and sim["engine"]["max_num_seqs"] == 1024  # vLLM's, on an H100
    assert main([*argv, "-q"]) == 0
    assert "TTFT" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rate", "-1"], "--rate"),
        (["--rate", "1", "--block-size", "0"], "--block-size"),
        (["--rate", "1", "--max-num-seqs", "1048577"], "--max-num-seqs"),  # above 2**20, the most traced
        (["--rate", "1", "--block-size", "16777217"], "--block-size"),  # above 2**24 positions a sequence
        (["--concurrency", "10000001"], "argument --concurrency: at most"),  # more clients than a run's most requests
        (["--rate", "1", "--batch", "4"], "--batch does not apply"),
        (["--rate", "1", "--concurrency", "2"], "give one of them"),
        ([], "needs --rate"),
    ],
)
def test_bad_workloads_exit_2_naming_the_flag(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", "hf:LlamaConfig", *FLAGS, "--hardware", "h100-sxm", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_request_longer_than_the_context_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["simulate", "hf:LlamaConfig", *FLAGS, "--hf-config=max_position_embeddings=256", "--hardware", "h100-sxm"]
    assert main([*argv, "--rate", "1", "--input-len", "200", "--output-len", "100"]) == 2
    assert "200 + 100 tokens is longer than the model's context of 256 positions" in capsys.readouterr().err


def test_simulate_needs_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "hf:LlamaConfig", *FLAGS, "--rate", "1"]) == 2
    assert "needs --hardware" in capsys.readouterr().err


def test_a_tensor_parallel_layout_counts_its_devices() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    workload = Workload(requests=4, input_len=64, output_len=4, concurrency=2)
    result = simulate(llm, workload, "h100-sxm", Parallel(tp=2))
    m = result.metrics
    assert result.devices == 2
    assert m["output_throughput_per_device"] == pytest.approx(m["output_throughput"] / 2)
    with pytest.raises(OpcountError, match="--dp and --micro-batches are not modelled"):
        simulate(llm, workload, "h100-sxm", Parallel(dp=2))


def test_a_sliding_window_is_held_per_sequence_and_the_blocks_come_from_full_attention() -> None:
    from transformers import Qwen3Config

    # a full-attention layer and a sliding one of 64 tokens; 2 kv heads of 16, bfloat16: 2 x 2 x 16 x 2 = 128 bytes
    # a token a layer
    config = Qwen3Config(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, vocab_size=1000, layer_types=["full_attention", "sliding_attention"], sliding_window=64,
        use_sliding_window=True, max_position_embeddings=4096, torch_dtype="bfloat16",
    )  # fmt: skip
    llm = CausalLM(config)
    result = simulate(llm, Workload(requests=2, input_len=1000, output_len=4, rate=1.0), "h100-sxm")
    assert result.kv_bytes_per_token == pytest.approx(128)  # the full layer's alone
    assert result.kv_bytes_per_sequence == pytest.approx(64 * 128)  # the window, at 1,003 positions
    assert result.engine.blocks_per_sequence == 4  # 8,192 bytes in blocks of 16 x 128
    # a request of 1,003 positions: 63 blocks of its tokens and the window's 4
    assert result.metrics["peak_kv_utilization"] * result.engine.num_blocks == pytest.approx(67)


def test_phases_traced_once_price_another_layout_as_tracing_again_does() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    workload = Workload(requests=4, input_len=64, output_len=4, concurrency=2)
    phases: dict[tuple[object, ...], PhaseCost] = {}
    one = simulate(llm, workload, "h100-sxm", phases=phases)
    assert one.fit is not None and len(phases) == one.fit.traces
    kept = dict(phases)
    two = simulate(llm, workload, "h100-sxm", Parallel(tp=2), phases=phases)
    assert phases == kept  # nothing traced again
    assert two.metrics == simulate(llm, workload, "h100-sxm", Parallel(tp=2)).metrics


def test_a_large_batch_decode_is_priced_from_its_own_traced_batches() -> None:
    # a decode step reading 10 s of weights until its batch computes more: max(10, 0.1 b) + 0.001 K. Batch 1 and 64
    # alone give a line at 10 s for every batch; traced up to max_num_seqs 1024 (batches 1, 16, 64, 256, 1024),
    # batch 1024 is its 102.4 s and batch 500, between 256 and 1024, the line between them
    def trace(phase: str, batch: int, new: int, cached: int) -> tuple[float, float | None]:
        if phase == "decode":
            return max(10.0, 0.1 * batch) + 0.001 * batch * cached, None
        return float(new), None

    fit = fitted(trace, 100, 10, 8192, 64, most=1024)
    d = fit.estimate.decode
    assert d(1024, 1024 * 100) == pytest.approx(102.4 + 102.4)
    assert d(500, 500 * 108) == pytest.approx(25.6 + (102.4 - 25.6) * 244 / 768 + 0.001 * 500 * 108)
    assert d(32, 32 * 100) == pytest.approx(10.0 + 3.2)  # below the turn: the weights' 10 s
    assert fit.check_error == pytest.approx(0.0, abs=1e-12)
