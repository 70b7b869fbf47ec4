"""``--tp --pp --ep --dp --price --max-batch`` on the command line (the engine's settings: test_fit_cli.py): the
JSON and table fields, and bad layouts refused in one line naming the flag, status 2, before anything is traced.

Tiny Llama (d 256, f 512, n 2, h 8, g 2, V 1000) as in tests/cli/test_llm_cli.py; the numbers are
the closed forms of tests/llm/test_deploy.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from tests.fixtures.command import run

D, F, N, H, G, V = 256, 512, 2, 8, 2, 1000
E = D // H
TINY = [
    "--hf-config", f"hidden_size={D}", "--hf-config", f"intermediate_size={F}",
    "--hf-config", f"num_hidden_layers={N}", "--hf-config", f"num_attention_heads={H}",
    "--hf-config", f"num_key_value_heads={G}", "--hf-config", f"vocab_size={V}",
]  # fmt: skip
DECODE = ["llm:llama-3-8b", *TINY, "--phase", "decode", "--kv-len", "7", "--batch", "2"]


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
    # the H100 SXM's 81,559 MiB (as nvidia-smi reports them) times vLLM's gpu_memory_utilization 0.9
    assert memory["capacity"] == pytest.approx(81_559 * 2**20 * 0.9, rel=1e-15) and memory["fits"] is True
    assert (memory["gpu_memory_utilization"], memory["max_batched_tokens"]) == (0.9, 8192)  # vLLM's on 80 GB
    # 5 all-reduces of B*d*2 = 1024 bytes (1 x 1024 sent at n = 2), the logits gathered: 4000 / 2
    assert llm["communication"]["bytes_per_device"] == 5 * 1024 + 2000
    # time: the layout's step, its kernels then its collectives; the traced device's own in single_device
    total = llm["time"]
    assert total == pytest.approx(llm["compute"]["time"] + llm["communication"]["time"])
    assert llm["tokens_per_s"] == pytest.approx(2 / total)  # B = 2 tokens a step, one replica
    assert set(llm["single_device"]) == {"time", "time_bound", "bound", "tokens_per_s", "tokens_per_s_bound"}
    status, out, err = run(capsys, *DECODE, "--hardware", "h100-sxm", "--format", "json")
    alone = json.loads(out)["llm"]  # no layout: one device, its figures the plain keys
    assert {k: alone[k] for k in llm["single_device"]} == llm["single_device"]
    assert "single_device" not in alone and "parallel" not in alone
    assert not {"time_per_device", "tokens_per_s_all_devices", "tokens_per_s_all_devices_bound"} & set(llm)
    assert llm["cost"]["per_million_tokens"]["generated"] == pytest.approx(2 * 0.001 * total / 2 * 1e6)
    bound = llm["time_bound"]
    assert 0 < bound <= total
    assert bound == pytest.approx(max(llm["compute"]["time_bound"], llm["communication"]["time"]))
    assert llm["cost"]["per_million_tokens_bound"]["generated"] == pytest.approx(2 * 0.001 * bound / 2 * 1e6)
    assert llm["max_batch"] > 1000


def test_the_summary_shows_memory_fit_communication_and_time(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, *DECODE, "--tp", "2", "--hardware", "h100-sxm", "--depth", "0")
    assert status == 0, err
    assert "layout: tp2 = 2 devices; per device: weights" in out
    assert ": fits" in out and "communication:" in out
    # the time line is the layout's, its parts apart; the traced device's own line says so
    assert "h100-sxm, fused kernels, tp2 = 2 devices: " in out and "communication, not overlapped)" in out
    assert "  single device (h100-sxm, fused kernels): " in out
    # the module table's times are one device's, headed so
    assert "time (fused, single device)" in out


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
    assert {"devices", "per_device_bytes", "fits", "time_s", "tokens_per_s", "usd_per_1m_generated_tokens"} <= set(
        columns
    )
    assert not {"step_time_s", "tokens_per_s_all_devices", "usd_per_1m_tokens"} & set(columns)
    row1, row4 = dict(zip(columns, one.split(","), strict=True)), dict(zip(columns, four.split(","), strict=True))
    assert (row1["devices"], row4["devices"]) == ("1", "4")
    # 4 replicas: 4 times the tokens a second on 4 times the devices, the same cost per token
    assert float(row4["tokens_per_s"]) == pytest.approx(4 * float(row1["tokens_per_s"]))
    assert float(row4["usd_per_1m_generated_tokens"]) == pytest.approx(float(row1["usd_per_1m_generated_tokens"]))


def test_a_sweep_row_is_its_layouts_times_and_full_cost(capsys: pytest.CaptureFixture[str]) -> None:
    """A ``--sweep tp=1,2`` row is what that layout run alone says: its time to first token (not the
    one device's on every row), and the prompt's price beside the generated tokens'."""
    gen = ["llm:llama-3-8b", *TINY, "--seq-len", "16", "--gen-len", "4", "--batch", "2", "--hardware", "h100-sxm"]
    status, out, err = run(capsys, *gen, "--sweep", "tp=1,2", "--price", "3.6", "--format", "csv")
    assert status == 0, err
    header, *lines = out.strip().splitlines()
    rows = [dict(zip(header.split(","), line.split(","), strict=True)) for line in lines]
    assert {"usd_per_1m_prompt_tokens", "usd_per_1m_generated_tokens", "usd_per_1m_prompt_tokens_bound"} <= set(rows[0])
    for row in rows:
        tp = int(row["tp"])
        status, out, err = run(capsys, *gen, "--tp", str(tp), "--price", "3.6", "--format", "json")
        alone = json.loads(out)["llm"]
        for key in ("time_to_first_token", "time_per_output_token", "time_to_first_token_bound"):
            assert float(row[f"{key}_s"]) == pytest.approx(alone[key], rel=1e-9)
        assert float(row["tokens_per_s"]) == pytest.approx(alone["tokens_per_s"], rel=1e-9)
        # $3.60 a device-hour = $0.001 a device-second, tp devices, B x s = 32 prompt tokens in the first token's time
        ttft = float(row["time_to_first_token_s"])
        assert float(row["usd_per_1m_prompt_tokens"]) == pytest.approx(tp * 0.001 * ttft / 32 * 1e6, rel=1e-9)
        # 2 generated tokens a decode step (B = 2)
        tpot = float(row["time_per_output_token_s"])
        assert float(row["usd_per_1m_generated_tokens"]) == pytest.approx(tp * 0.001 * tpot / 2 * 1e6, rel=1e-9)
    assert rows[0]["time_to_first_token_s"] != rows[1]["time_to_first_token_s"]


def test_micro_batches_price_the_kernels_asked_for(capsys: pytest.CaptureFixture[str]) -> None:
    """``--micro-batches`` with ``--kernels eager``: the pipeline's kernels are eager (they were the
    fused ones whatever the flag), the same as the Python API's deployment of an eager phase."""
    from transformers import LlamaConfig

    from opcount.llm.causal_lm import CausalLM
    from opcount.llm.deploy.layout import Parallel

    pipeline = ["--pp", "2", "--micro-batches", "2", "--hardware", "h100-sxm", "--format", "json"]
    geometry = {"hidden_size": D, "intermediate_size": F, "num_hidden_layers": N, "num_attention_heads": H}
    model = CausalLM(LlamaConfig(**geometry, num_key_value_heads=G, vocab_size=V))
    compute = {}
    for kernels in ("eager", "fused"):
        status, out, err = run(capsys, *DECODE, *pipeline, "--kernels", kernels)
        assert status == 0, err
        llm = json.loads(out)["llm"]
        assert llm["kernels"] == kernels
        compute[kernels] = llm["compute"]["time"]
        step = model.phase("decode", kv_len=7, batch=2, hardware="h100-sxm", kernels=kernels)
        assert compute[kernels] == pytest.approx(model.deploy(step, Parallel(pp=2, micro_batches=2)).compute_time)
    assert compute["eager"] > compute["fused"]  # one kernel per operator: more launches and more bytes


def test_a_layout_sweep_is_plotted_as_the_layouts_run_it(tmp_path: Path) -> None:
    """The plot's time is each row's layout's (the table's ``time``), its memory a device's."""
    pytest.importorskip("matplotlib")
    from transformers import LlamaConfig

    from opcount.cli.llm_rows import SweepRow
    from opcount.llm.causal_lm import CausalLM
    from opcount.llm.deploy.layout import Parallel
    from opcount.llm.report import plot

    geometry = {"hidden_size": D, "intermediate_size": F, "num_hidden_layers": N, "num_attention_heads": H}
    model = CausalLM(LlamaConfig(**geometry, num_key_value_heads=G, vocab_size=V))
    step = model.phase("decode", kv_len=7, batch=2, hardware="h100-sxm")
    points = [
        SweepRow.of({"batch": 2, "seq_len": 1, "kv_len": 7, "tp": tp}, step, None, model.deploy(step, Parallel(tp=tp)))
        for tp in (1, 2)
    ]
    out = tmp_path / "tp.png"
    assert plot.save_llm_chart(points, out, model="tiny", sweep=["tp"]) == [out]
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for point in points:
        assert point.deployment is not None and point.deployment.time is not None
        assert plot._time_of(point) == point.deployment.time
        assert plot._memory_of(point) == point.deployment.per_device.total
    assert plot._time_of(points[0]) != plot._time_of(points[1])


@pytest.mark.slow
def test_llama_3_70b_on_four_devices_is_the_layouts_time(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's check: ``llm.time`` of Llama-3-70B decoding on ``--tp 4`` is the 4-device step (less
    than half the one-device figure, which ``single_device`` keeps), and with ``--micro-batches 2 --pp 2``
    the kernels asked for are the ones priced."""
    argv = ["llm:llama-3-70b", "--phase", "decode", "--kv-len", "2048", "--batch", "8", "--tp", "4"]
    argv += ["--hardware", "h100-sxm", "--format", "json"]
    status, out, err = run(capsys, *argv)
    assert status == 0, err
    llm = json.loads(out)["llm"]
    assert llm["time"] < llm["single_device"]["time"] / 2
    assert llm["tokens_per_s"] > 2 * llm["single_device"]["tokens_per_s"]
    compute = {}
    for kernels in ("eager", "fused"):
        status, out, err = run(capsys, *argv, "--micro-batches", "2", "--pp", "2", "--kernels", kernels)
        assert status == 0, err
        compute[kernels] = json.loads(out)["llm"]["compute"]["time"]
    assert compute["eager"] > compute["fused"]
