"""``--tp --pp --ep --dp --price --max-batch --reserve`` on the command line: the JSON and table
fields, and bad layouts refused in one line naming the flag, status 2, before anything is traced.

Tiny Llama (d 256, f 512, n 2, h 8, g 2, V 1000) as in tests/cli/test_llm_cli.py; the numbers are
the closed forms of tests/llm/test_deploy.py.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from opcount.cli import main

D, F, N, H, G, V = 256, 512, 2, 8, 2, 1000
E = D // H
TINY = [
    "--hf-config", f"hidden_size={D}", "--hf-config", f"intermediate_size={F}",
    "--hf-config", f"num_hidden_layers={N}", "--hf-config", f"num_attention_heads={H}",
    "--hf-config", f"num_key_value_heads={G}", "--hf-config", f"vocab_size={V}",
]  # fmt: skip
DECODE = ["llm:llama-3-8b", *TINY, "--phase", "decode", "--kv-len", "7", "--batch", "2"]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_json_has_the_layout_per_device_memory_communication_and_cost(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys, *DECODE, "--tp", "2", "--hardware", "h100-sxm", "--price", "3.6", "--max-batch", "--format", "json"
    )
    assert status == 0, err
    llm = json.loads(out)["llm"]
    assert llm["parallel"] == {"tp": 2, "pp": 1, "ep": 1, "dp": 1, "devices": 2}
    memory = llm["memory"]
    # the totals stay; per device: the split weights halved, 2 norms a layer and the final one whole
    split = (2 * V * D + N * (2 * D * D + 2 * D * G * E + 3 * D * F)) * 2
    assert memory["weights"] == split + (2 * N + 1) * D * 2
    assert memory["per_device"]["weights"] == split / 2 + (2 * N + 1) * D * 2
    assert memory["per_device"]["gradients"] == memory["per_device"]["optimizer"] == 0
    assert memory["capacity"] == 80e9 * 0.9 and memory["fits"] is True
    # 5 all-reduces of B*d*2 = 1024 bytes (1 x 1024 sent at n = 2), the logits gathered: 4000 / 2
    assert llm["communication"]["bytes_per_device"] == 5 * 1024 + 2000
    total = llm["time_per_device"]["total"]
    assert llm["cost"]["per_million_tokens"]["generated"] == pytest.approx(2 * 0.001 * total / 2 * 1e6)
    bound = llm["time_per_device"]["time_bound"]
    assert 0 < bound <= total
    assert llm["cost"]["per_million_tokens_bound"]["generated"] == pytest.approx(2 * 0.001 * bound / 2 * 1e6)
    assert llm["max_batch"] > 1000


def test_the_summary_shows_memory_fit_communication_and_time(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *DECODE, "--tp", "2", "--hardware", "h100-sxm", "--depth", "0")
    assert status == 0, err
    assert "layout: tp2 = 2 devices (the lines above: one device); per device: weights" in out
    assert ": fits" in out and "communication:" in out and "per device and step: estimate" in out
    assert "communication (not overlapped)" in out and "; bound " in out


def test_a_sweep_over_tp_has_a_row_a_layout(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *DECODE, "--sweep", "tp=1,2", "--hardware", "h100-sxm", "--format", "json")
    assert status == 0, err
    points = json.loads(out)["points"]
    assert [p["parallel"]["devices"] for p in points] == [1, 2]
    assert points[1]["memory"]["per_device"]["kv_cache"] == points[0]["memory"]["per_device"]["kv_cache"] / 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tp", "3"], "--tp 3: does not divide the 8 attention heads"),
        (["--pp", "3"], "--pp 3: more pipeline stages than the 2 layers"),
        (["--ep", "2"], "--ep 2: expert parallelism"),
        (["--tp", "2", "--ep", "2"], "--ep 2: LlamaConfig has no experts blocks"),
        (["--tp", "2", "--hardware", "l4"], "--tp 2: l4 has no interconnect figures"),
        (["--tp", "70000"], "--tp: expected a whole number from 1 to 65,536"),
        (["--price", "2"], "--price needs --hardware"),
        (["--price", "0", "--hardware", "h100"], "argument --price: expected dollars per device-hour"),
        (["--reserve", "1.5"], "argument --reserve: expected a fraction"),
        (["--micro-batches", "2"], "--micro-batches applies to a pipeline"),
        (["--pp", "2", "--micro-batches", "3"], "--micro-batches 3: does not divide --batch 2"),
        (["--max-batch", "--hardware", "xeon-8480-2s"], "--max-batch: xeon-8480-2s does not say its memory"),
        (["--sweep", "tp=1,3"], "--tp 3: does not divide"),
        (["--sweep", "tp=1,2", "--sweep", "ep=1,2"], "--ep 2: expert parallelism"),  # tp 1 with ep 2
    ],
)
def test_bad_layouts_exit_2_in_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status, out, err = run(capsys, *DECODE, *args)
    assert status == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_replicas_alone_need_no_links_and_a_sweep_csv_has_the_layout_columns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, out, err = run(capsys, *DECODE, "--sweep", "dp=1,4", "--hardware", "l4", "--price", "1", "--format", "csv")
    assert status == 0, err
    header, one, four = out.strip().splitlines()
    columns = header.split(",")
    assert {"devices", "per_device_bytes", "fits", "step_time_s", "usd_per_1m_tokens"} <= set(columns)
    row1, row4 = dict(zip(columns, one.split(","), strict=True)), dict(zip(columns, four.split(","), strict=True))
    assert (row1["devices"], row4["devices"]) == ("1", "4")
    # 4 replicas: 4 times the tokens a second on 4 times the devices, the same cost per token
    assert float(row4["tokens_per_s_all_devices"]) == pytest.approx(4 * float(row1["tokens_per_s_all_devices"]))
    assert float(row4["usd_per_1m_tokens"]) == pytest.approx(float(row1["usd_per_1m_tokens"]))
