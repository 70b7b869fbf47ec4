"""``opcount simulate``'s workloads on a small Llama: a prompt after a shared prefix priced as the traced phase
of its rest over the cached prefix, traces replayed from the command line, lengths drawn as vllm bench serve
draws them, and every bad workload one line naming its flag or its file's row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")
from transformers import LlamaConfig

from opcount.llm.causal_lm import CausalLM
from opcount.llm.deploy.layout import Parallel
from opcount.llm.serve.simulate import simulate
from opcount.llm.serve.workload import Workload
from tests.fixtures.command import error_line, run

SMALL = {
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000,
}  # fmt: skip
BASE = ["simulate", "hf:LlamaConfig", *(f"--hf-config={k}={v}" for k, v in SMALL.items()), "--hardware", "h100-sxm"]


def test_a_shared_prefix_prices_the_rest_of_a_prompt_over_it() -> None:
    # prompts of 256 tokens, the first half shared: the second request, alone 100 s later, computes 128 tokens
    # over 128 cached, the phase `opcount MODEL --phase prefill --seq-len 128 --kv-len 128` prices
    llm = CausalLM(LlamaConfig(**SMALL))
    workload = Workload(requests=2, input_len=256, output_len=2, rate=0.01, arrivals="constant", prefix_hit=0.5)
    result = simulate(llm, workload, "h100-sxm")

    def traced(seq_len: int, kv_len: int) -> float:
        cost = llm.phase("prefill", seq_len=seq_len, kv_len=kv_len, hardware="h100-sxm")
        time = llm.deploy(cost, Parallel(), hardware=cost.roofline.hardware if cost.roofline else None).step_time
        assert time is not None
        return time

    first, second = (row["ttft"] for row in result.per_request)
    assert first == pytest.approx(traced(256, 0), rel=1e-9)  # a traced prompt length: exact
    assert second == pytest.approx(traced(128, 128), rel=0.01)  # the cached-prefix fit, checked within 1%
    assert result.metrics["prefix_cache_hit_rate"] == pytest.approx(128 / 512)


def test_a_mooncake_trace_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [0]}\n'
        '{"timestamp": 500, "input_length": 120, "output_length": 4, "hash_ids": [0]}\n'
        '{"timestamp": 900, "input_length": 30, "output_length": 2, "hash_ids": [1]}\n'
    )
    status, out, err = run(capsys, *BASE, "--trace", str(trace), "--trace-block-size", "64", "--format", "json", "-q")
    assert status == 0, err
    sim = json.loads(out)["simulation"]
    m = sim["metrics"]
    assert m["completed"] == 3 and m["total_input_tokens"] == 250 and m["total_output_tokens"] == 9
    # the second prompt's first 64 tokens (hash 0 covers 64) are the first's: 4 blocks of 16 hit
    assert m["prefix_cache_hit_rate"] == pytest.approx(64 / 250)
    assert sim["workload"]["trace_own_arrivals"] is True
    status, out, _ = run(capsys, *BASE, "--trace", str(trace), "--requests", "2", "--concurrency", "1", "-q")
    assert status == 0 and "2 requests from a trace of 100-120 (mean 110) prompt" in out
    assert "1 clients in a closed loop" in out


def test_lengths_drawn_around_the_given_ones(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys, *BASE, "--rate", "5", "--requests", "30", "--seq-len", "100", "--gen-len", "4",
        "--random-range-ratio", "0.5", "--format", "json", "-q",
    )  # fmt: skip
    assert status == 0, err
    sim = json.loads(out)["simulation"]
    assert sim["workload"]["range_ratio"] == 0.5 and sim["workload"]["input_len"] == 100
    assert 30 * 50 <= sim["metrics"]["total_input_tokens"] <= 30 * 150


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rate", "1", "--prefix-hit", "1"], "--prefix-hit: expected a number from 0 below 1"),
        (["--rate", "1", "--random-range-ratio", "nan"], "--random-range-ratio: expected a number from 0 below 1"),
        (["--rate", "1", "--trace-block-size", "64"], "--trace-block-size applies to --trace"),
        (["--rate", "1", "--prefix-hit", "0.5", "--no-enable-prefix-caching"], "--prefix-hit shares a prefix"),
        (["--trace", "/nonexistent/t.jsonl"], "--trace /nonexistent/t.jsonl: cannot read it"),
        (["--requests", "0", "--rate", "1"], "--requests"),
    ],
)
def test_bad_workloads_are_one_line(extra: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert message in error_line(capsys, *BASE, *extra)


def test_a_bad_trace_row_or_flag_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "t.csv"
    bad.write_text("arrival_s,input_tokens,output_tokens\n0,10,2\n1,-3,2\n")
    assert f"--trace {bad}:3: input_tokens must be a whole number of tokens from 1" in error_line(
        capsys, *BASE, "--trace", str(bad)
    )
    good = tmp_path / "g.csv"
    good.write_text("arrival_s,input_tokens,output_tokens\n0,10,2\n")
    assert "--input-len does not apply to --trace" in error_line(
        capsys, *BASE, "--trace", str(good), "--input-len", "5"
    )
    untimed = tmp_path / "r.json"
    untimed.write_text(json.dumps({"input_lens": [10], "output_lens": [2]}))
    assert "no arrival times: give --rate R or --concurrency C" in error_line(capsys, *BASE, "--trace", str(untimed))
    long = tmp_path / "long.csv"
    long.write_text("arrival_s,input_tokens,output_tokens\n0,10,2\n0,5000,2\n")
    line = error_line(capsys, *BASE, "--hf-config=max_position_embeddings=4096", "--trace", str(long))
    assert "request 2 of the trace of 5000 + 2 tokens is longer than the model's context of 4096" in line


def test_a_trace_refuses_what_it_decides_itself(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    hashed = tmp_path / "t.jsonl"
    hashed.write_text('{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [0]}\n')
    assert "--prefix-hit does not apply to --trace" in error_line(
        capsys, *BASE, "--trace", str(hashed), "--prefix-hit", "0.5"
    )
    assert "--requests 5: the trace" in error_line(capsys, *BASE, "--trace", str(hashed), "--requests", "5")
    assert "--seed 9223372036854775808: at most 2**63 - 1" in error_line(
        capsys, *BASE, "--rate", "1", "--seed", str(2**63)
    )
