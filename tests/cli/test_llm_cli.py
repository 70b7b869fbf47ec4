"""``opcount llm:NAME`` and the LLM flags, run in process (``opcount.cli.main``).

Tiny configs keep it quick; the expected numbers are the closed forms of tests/llm/test_llm.py
(d hidden, f MLP width, n layers, h heads, g KV heads, e head dim, V vocab).
"""

from __future__ import annotations

import csv
import io
import json

import pandas as pd
import pytest

transformers = pytest.importorskip("transformers")

from tests.fixtures.command import run  # noqa: E402

D, F, N, H, G, V = 256, 512, 2, 8, 2, 1000
E = D // H
# The rotary angles, positions x the e/2 inverse frequencies: a matmul ([e/2, 1] x [1, s]) in
# transformers 4.x, e/2 multiply-adds a token; an elementwise product in 5.x, no multiply-add (its
# e/2 multiplies a token are elementwise flops).
ROTARY = E // 2 if int(transformers.__version__.split(".")[0]) < 5 else 0
TINY = [
    "--hf-config", f"hidden_size={D}", "--hf-config", f"intermediate_size={F}",
    "--hf-config", f"num_hidden_layers={N}", "--hf-config", f"num_attention_heads={H}",
    "--hf-config", f"num_key_value_heads={G}", "--hf-config", f"vocab_size={V}",
]  # fmt: skip


def decode_macs(batch: int, cached: int) -> int:
    linear = N * batch * (2 * D * D + 2 * D * G * E + 3 * D * F) + batch * D * V
    attention = N * 2 * batch * H * (cached + 1) * E
    return linear + attention


def test_decode_json(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--phase", "decode", "--kv-len", "20", "--batch", "2",
                           "--hardware", "h100-sxm", "--format", "json")  # fmt: skip
    assert status == 0, err
    data = json.loads(out)
    assert data["llm"]["phase"] == "decode"
    assert data["llm"]["kv_len"] == 20
    rotary = ROTARY  # inv_freq x the positions, shared by the batch (position_ids is [1, s])
    softmax = N * 2 * H * (3 * 21 - 1)  # inside sdpa: 21 scores per query and head, 3 * 21 - 1 flops
    assert data["llm"]["flops"] - _elementwise(data) == decode_macs(2, 20) + rotary + softmax
    assert data["memory"]["kv_cache"] == 2 * N * G * E * 21 * 2 * 2  # keys and values, 21 tokens, batch 2, bf16
    whole = {"weights", "kv_cache", "kv_cache_by_type", "activations"}
    # with a device's memory one device is judged as a layout's are: what it holds against its capacity
    assert set(data["memory"]) == whole | {
        "per_device",
        "capacity",
        "fits",
        "gpu_memory_utilization",
        "max_batched_tokens",
    }
    assert data["memory"]["fits"] is True and data["memory"]["per_device"]["kv_cache"] == data["memory"]["kv_cache"]
    assert data["memory"]["kv_cache_by_type"] == {"full_attention": data["memory"]["kv_cache"]}
    assert data["llm"]["bound"] == "memory"
    assert data["llm"]["tokens_per_s"] == pytest.approx(2 / data["llm"]["time"])


def _elementwise(data: dict) -> int:
    """What the default preset counts beyond multiply-adds (norms, rotary, activations)."""
    macs = ("linear", "scaled_dot_product_attention", "matmul")
    return sum(row["flops"] for row in data["operators"] if row["module"] == "." and row["operator"] not in macs)


def test_preset_macs(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--phase", "decode", "--kv-len", "5", "--preset", "macs",
                           "--format", "json")  # fmt: skip
    assert status == 0, err
    rotary = ROTARY  # inv_freq x the new token's position
    assert json.loads(out)["llm"]["flops"] == decode_macs(1, 5) + rotary


def test_sweep_csv_has_one_row_per_point(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--phase", "decode", "--sweep", "batch=1,4",
                           "--sweep", "kv-len=8,16,32", "--hardware", "h100-sxm", "--format", "csv")  # fmt: skip
    assert status == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [(int(r["batch"]), int(r["kv_len"])) for r in rows] == [(b, k) for b in (1, 4) for k in (8, 16, 32)]
    assert [float(r["kv_cache_bytes"]) for r in rows] == [
        2 * N * G * E * (k + 1) * b * 2 for b in (1, 4) for k in (8, 16, 32)
    ]
    df = pd.read_csv(io.StringIO(out))  # pandas' defaults: the header is the first line
    assert {"macs", "weights_bytes", "time_s", "tokens_per_s", "bound"} <= set(df.columns)
    assert len(df) == 6


def test_prefill_over_a_cached_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    # 8 prompt tokens after 24 cached: the linear layers run the 8, the logits the last one, and each
    # new token's query meets the 24 cached keys and the 8 of the chunk (counted whole: 8 x 32 pairs)
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--phase", "prefill", "--seq-len", "8", "--kv-len", "24",
                           "--batch", "2", "--preset", "macs", "--format", "json")  # fmt: skip
    assert status == 0, err
    data = json.loads(out)
    assert (data["llm"]["phase"], data["llm"]["seq_len"], data["llm"]["kv_len"]) == ("prefill", 8, 24)
    linear = N * 2 * 8 * (2 * D * D + 2 * D * G * E + 3 * D * F) + 2 * D * V
    attention = N * 2 * 2 * H * 8 * 32 * E
    assert data["llm"]["flops"] == linear + attention + ROTARY
    assert data["memory"]["kv_cache"] == 2 * N * G * E * 32 * 2 * 2  # keys and values of 32 positions, batch 2
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--seq-len", "8", "--kv-len", "24", "--depth", "0")
    assert status == 0, err
    assert "prefill, batch 1, 8 tokens after 24 cached" in out
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--seq-len", "8", "--sweep", "kv-len=0,16,32",
                           "--format", "csv")  # fmt: skip
    assert status == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [float(r["kv_cache_bytes"]) for r in rows] == [2 * N * G * E * (k + 8) * 2 for k in (0, 16, 32)]


def test_sweep_csv_leaves_missing_values_empty(capsys: pytest.CaptureFixture[str]) -> None:
    # no output token at gen-len 0: no time per output token, nor tokens/s (None in JSON)
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--seq-len", "8", "--gen-len", "1",
                           "--sweep", "gen-len=0,2", "--hardware", "h100-sxm", "--format", "csv")  # fmt: skip
    assert status == 0, err
    assert "None" not in out
    first = next(csv.DictReader(io.StringIO(out)))
    assert first["gen_len"] == "0" and first["time_per_output_token_s"] == "" and first["tokens_per_s"] == ""
    df = pd.read_csv(io.StringIO(out))
    assert pd.isna(df["time_per_output_token_s"].iloc[0]) and df["time_per_output_token_s"].iloc[1] > 0


def test_llm_exports_describe_the_model_as_typed(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--phase", "decode", "--kv-len", "4", "--format", "json")
    assert status == 0, err
    meta = json.loads(out)["meta"]
    assert (meta["model"], meta["model_class"], meta["device"]) == ("llm:llama-3-8b", "LlamaForCausalLM", "meta")
    sidecar = tmp_path / "meta.json"
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--phase", "decode", "--kv-len", "4", "--format", "csv",
                           "--csv-meta", str(sidecar))  # fmt: skip
    assert status == 0, err
    assert json.loads(sidecar.read_text()) == meta
    df = pd.read_csv(io.StringIO(out))
    assert df["name"].iloc[0] == "." and "macs" in df.columns


def test_sweep_json_points(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--sweep", "seq-len=4,8", "--format", "json")
    assert status == 0, err
    points = json.loads(out)["points"]
    assert [p["seq_len"] for p in points] == [4, 8]


def test_generation_summary(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--seq-len", "16", "--gen-len", "4",
                           "--hardware", "h100-sxm", "--weight-dtype", "int4", "--depth", "0")  # fmt: skip
    assert status == 0, err
    assert "time to first token" in out
    assert "time per output token" in out
    assert "w4a16" in out


def test_hf_causal_lm_class(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "hf:LlamaForCausalLM", *TINY, "--phase", "decode", "--kv-len", "8",
                           "--format", "json")  # fmt: skip
    assert status == 0, err
    assert json.loads(out)["llm"]["flops"] > decode_macs(1, 8)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--gen-len", "4", "--kv-len", "4"], "--kv-len with --gen-len: a generation starts from an empty cache"),
        (["--weight-dtype", "int3"], "unknown weight dtype 'int3'"),
        (["--sweep", "layers=1,2"], "--sweep"),
        (["--gen-len", "4", "--sweep", "kv-len=1,2"], "--kv-len with --gen-len"),
        (["--tracer", "jit"], "drop --tracer jit"),
        (["--input", "1,8"], "not --input shapes"),
    ],
)
def test_mistakes_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    status, _, err = run(capsys, "llm:llama-3-8b", *TINY, *args)
    assert status == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_unknown_architecture_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, "llm:llama-3-80b")
    assert status == 2
    assert "did you mean" in err and "llama-3-8b" in err


def test_generation_json_counts_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    prompt, steps = 12, 3
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--seq-len", str(prompt), "--gen-len", str(steps),
                           "--preset", "macs", "--format", "json")  # fmt: skip
    assert status == 0, err
    data = json.loads(out)
    # the cache at the last step holds the prompt and every generated token
    assert data["memory"]["kv_cache"] == 2 * N * G * E * (prompt + steps) * 2
    rotary = ROTARY
    decode = sum(decode_macs(1, prompt + j) + rotary for j in range(steps))
    assert data["llm"]["flops"] - decode == data["total"]["flops"]  # the rest is the prefill (the table)


def test_table_rows_have_distinct_names(capsys: pytest.CaptureFixture[str]) -> None:
    # LlamaForCausalLM's body is its child `model`: the root row, fvcore's "model", would repeat it
    status, out, err = run(capsys, "llm:llama-3-8b", *TINY, "--phase", "decode", "--depth", "1")
    assert status == 0, err
    names = [line.split("|")[1].strip() for line in out.splitlines() if line.startswith("|")][2:]
    assert names == ["whole model", "model", "lm_head"]


@pytest.mark.parametrize("values", ["1,,16", ",1", "1,16,,"])
def test_sweep_refuses_an_empty_value(capsys: pytest.CaptureFixture[str], values: str) -> None:
    # the empty value was dropped: a grid of fewer points than typed, and nothing said so
    status, out, err = run(capsys, "llm:llama-3-8b", "--sweep", f"batch={values}")
    assert status == 2 and out == "" and err.count("\n") == 1 and "expected whole numbers" in err


def test_sweep_takes_a_trailing_comma(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = run(capsys, "llm:gpt2", "--sweep", "batch=1,2,", "--format", "csv", "-q")
    assert status == 0 and [int(b) for b in pd.read_csv(io.StringIO(out))["batch"]] == [1, 2]


@pytest.mark.parametrize("flags", [["--batch", "4"], ["--phase", "decode"], ["--weight-dtype", "int4"]])
def test_llm_flags_on_another_model_say_so(capsys: pytest.CaptureFixture[str], flags: list[str]) -> None:
    # a factory given --batch was looked up as a transformers class: "not a transformers config or model class"
    status, out, err = run(capsys, "tests.fixtures.models:nested", *flags)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert "price LLM inference phases of llm: and hf: models, not tests.fixtures.models:nested" in err
