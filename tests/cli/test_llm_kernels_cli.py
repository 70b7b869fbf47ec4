"""``--kernels``, ``--fuse`` and ``--by-operator`` on the LLM path, and the two times in every format."""

from __future__ import annotations

import csv
import io
import json

import pytest

pytest.importorskip("transformers")

from tests.fixtures.command import run

TINY = [
    "--hf-config", "hidden_size=64", "--hf-config", "intermediate_size=128",
    "--hf-config", "num_hidden_layers=2", "--hf-config", "num_attention_heads=4",
    "--hf-config", "num_key_value_heads=2", "--hf-config", "vocab_size=1000",
]  # fmt: skip
MODEL = ["llm:llama-3-8b", *TINY, "--hardware", "h100-sxm"]


def test_json_gives_the_bound_beside_the_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *MODEL, "--seq-len", "16", "--gen-len", "4", "--format", "json")
    assert status == 0, err
    llm = json.loads(out)["llm"]
    assert llm["kernels"] == "fused"
    for key in ("time", "time_to_first_token", "time_per_output_token"):
        assert 0 < llm[f"{key}_bound"] <= llm[key]
    assert llm["tokens_per_s_bound"] >= llm["tokens_per_s"]
    # tokens per second: the batch of 1 over the time per output token, bound and estimate alike
    assert llm["tokens_per_s_bound"] == pytest.approx(1 / llm["time_per_output_token_bound"])


def test_eager_kernels_take_longer_with_the_same_bound(capsys: pytest.CaptureFixture[str]) -> None:
    times = {}
    for mode in ("fused", "eager"):
        status, out, err = run(capsys, *MODEL, "--seq-len", "32", "--kernels", mode, "--format", "json")
        assert status == 0, err
        times[mode] = json.loads(out)["llm"]
    assert times["fused"]["time"] < times["eager"]["time"]
    assert times["fused"]["time_bound"] == times["eager"]["time_bound"]
    status, out, err = run(capsys, *MODEL, "--seq-len", "32", "--fuse", "--format", "json")
    assert status == 0, err
    assert json.loads(out)["llm"]["time"] == times["fused"]["time"]


def test_fuse_with_eager_kernels_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, *MODEL, "--fuse", "--kernels", "eager")
    assert status == 2
    assert err.strip().splitlines()[-1] == "opcount: error: --fuse and --kernels eager contradict each other: give one"


def test_the_summary_names_the_speed_of_light(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *MODEL, "--phase", "decode", "--kv-len", "8", "--depth", "0")
    assert status == 0, err
    assert "h100-sxm, fused kernels:" in out and "speed of light" in out and "(at most" in out


def test_by_operator_says_which_kernel(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *MODEL, "--seq-len", "16", "--by-operator")
    assert status == 0, err
    header = out.splitlines()[0]
    assert "| MACs " in header and "| time (fused) " in header and "fused kernels it ran in" in header
    rows = {line.split("|")[1].strip(): line for line in out.splitlines()[2:] if line.startswith("|")}
    assert rows["scaled_dot_product_attention"].rstrip(" |").endswith("attention 2")
    assert rows["linear"].rstrip(" |").endswith("gemm 15")  # 7 per layer and lm_head, all in GEMM kernels
    status, out, err = run(
        capsys, *MODEL, "--seq-len", "16", "--by-operator", "--format", "csv", "--flops-per-mac", "2"
    )
    assert status == 0, err
    table = list(csv.DictReader(io.StringIO(out)))
    assert set(table[0]) == {
        "operator",
        "calls",
        "flops",
        "bytes_eager",
        "time_fused_s",
        "bound_fused",
        "fused_kernels",
    }


def test_by_operator_needs_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "llm:llama-3-8b", *TINY, "--seq-len", "16", "--by-operator")
    assert status == 2
    assert "needs --hardware" in err


def test_a_sweep_gives_both_times(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *MODEL, "--phase", "decode", "--sweep", "kv-len=4,8", "--format", "csv")
    assert status == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert all(float(r["time_bound_s"]) <= float(r["time_s"]) for r in rows)
