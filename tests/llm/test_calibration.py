"""opcount calibrate and its parts (opcount.llm.calibration): measured rows read and refused row by row, the
steady-state form worked by hand, a profile recovered from rows generated with known parameters, the command."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from opcount.cli import main
from opcount.errors import OpcountValueError
from opcount.llm.calibration import rows
from opcount.llm.calibration.fit import FITTED, fit, geomean_error, leave_one_out
from opcount.llm.calibration.steady import Priced, Step, bound, predict
from opcount.llm.engines.profile import BUILTIN, EngineProfile
from opcount.llm.engines.terms import StepShape

HEADER = ",".join(rows.COLUMNS)


def measured(metric: str = "tpot_ms", concurrency: str = "4", requests: str = "100", **extra: str) -> rows.Row:
    data = {
        "case": "x", "engine": "vLLM", "model": "llama-3-8b", "hardware": "h100-sxm", "devices": "1", "tp": "1",
        "concurrency": concurrency, "rate": "inf", "requests": requests, "input": "1000", "output": "101",
        "metric": metric, "stat": "mean", "measured": "10",
    }  # fmt: skip
    return rows.row(data | extra)


SHAPE = StepShape("decode", 4, 0.0, 0.0, 0, 0, 0.0)


def test_a_closed_loop_by_hand() -> None:
    # 4 clients, D = 10 ms, P = 100 ms, O = 101: TPOT = 10 + 3 x 100 / 101 ms
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, SHAPE)
    profile = EngineProfile("t", ttft_overhead_s=0.02)
    tpot = 0.01 + 3 * 0.1 / 101
    assert predict(Priced(measured(), 4, 1, False, decode, prefill), profile) == pytest.approx(tpot)
    # TTFT: P, the server's 20 ms, half a decode step, and M/D/1's wait behind the 3 others' prompts, which hold
    # the engine rho = 3 P / (P + 100 TPOT) of the time
    rho = 3 * 0.1 / (0.1 + 100 * tpot)
    ttft = 0.1 + 0.02 + 0.005 + rho / (1 - rho) * 0.05
    assert predict(Priced(measured("ttft_ms"), 4, 1, False, decode, prefill), profile) == pytest.approx(ttft)
    e2el = ttft + 100 * tpot
    out = predict(Priced(measured("out_tok_s"), 4, 1, False, decode, prefill), profile)
    assert out == pytest.approx(e2el / (4 * 101))  # seconds per output token: 4 clients of 101 tokens each E2EL
    # the bound: TPOT at least the decode step's bound, tokens a second at most 4 / 5 ms
    assert bound(Priced(measured(), 4, 1, False, decode, prefill)) == pytest.approx(0.005)
    assert bound(Priced(measured("out_tok_s"), 4, 1, False, decode, prefill)) == pytest.approx(0.005 / 4)


def test_all_at_once_in_one_wave_by_hand() -> None:
    # 4 requests at once on 4 slots: the prompts one after another, mean TTFT (1 + 2 + 3 + 4) / 4 x P = 2.5 P
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, SHAPE)
    row = measured("ttft_ms", concurrency="", requests="4")
    assert predict(Priced(row, 4, 1, True, decode, prefill), None) == pytest.approx(0.25)
    # TPOT: D and, on average, half the 3 other prompts over the 101 tokens: 10 ms + 1.5 x 100 / 101 ms
    tpot = predict(Priced(measured(concurrency="", requests="4"), 4, 1, True, decode, prefill), None)
    assert tpot == pytest.approx(0.01 + 1.5 * 0.1 / 101)


def test_seconds_and_back() -> None:
    assert rows.seconds("tpot_ms", 20) == pytest.approx(0.02)
    assert rows.seconds("out_tok_s", 50) == pytest.approx(0.02)
    assert rows.value("out_tok_s", 0.02) == pytest.approx(50)
    assert geomean_error([1.0, 4.0], [2.0, 2.0]) == pytest.approx(1.0)


def synthetic(truth: EngineProfile, count: int = 24) -> list[Priced]:
    """Rows of varied shapes whose measurements are ``truth``'s estimates exactly."""
    rng = random.Random(7)
    out = []
    for i in range(count):
        metric = ("tpot_ms", "ttft_ms", "out_tok_s", "e2el_ms")[i % 4]
        batch = rng.choice((1, 2, 8, 32, 128))
        decode = StepShape(
            "decode", batch, rng.uniform(2e-3, 2e-2), rng.uniform(0, 2e-3), rng.choice((0, 32, 120, 160)),
            rng.choice((0, 24, 58)), rng.uniform(1e-5, 2e-3), software_dequant=i % 5 == 0,
        )  # fmt: skip
        prefill = StepShape("prefill", 1024, rng.uniform(2e-2, 2e-1), 0.0, decode.collectives, decode.moe_blocks, 0.0)
        p = Priced(
            measured(metric, concurrency=str(batch)), batch, 1, False,
            Step(decode.kernels_s, decode.kernels_s / 2, decode), Step(prefill.kernels_s, prefill.kernels_s / 2, prefill),
        )  # fmt: skip
        value = rows.value(metric, predict(p, truth))
        out.append(replace(p, row=measured(metric, concurrency=str(batch), measured=repr(value))))
    return out


def test_calibrate_recovers_known_parameters_within_1_percent() -> None:
    truth = EngineProfile(
        "truth", step_overhead_s=7e-4, collective_latency_s=1.2e-5, gemm_small_m_efficiency=0.6, moe_routing_s=4e-5,
        prefill_efficiency=0.75,
        attention_decode_efficiency=0.55, software_dequant=0.8, ttft_overhead_s=0.03,
    )  # fmt: skip
    found = fit(synthetic(truth), BUILTIN["vllm"], FITTED)
    for name in FITTED:
        assert getattr(found.profile, name) == pytest.approx(getattr(truth, name), rel=0.01), name
    assert found.error < 1e-6


def test_leave_one_out_is_small_on_rows_a_profile_explains() -> None:
    truth = EngineProfile("truth", step_overhead_s=5e-4, ttft_overhead_s=0.01)
    # the start has no other term, as the truth: the two fitted parameters explain every row
    assert leave_one_out(synthetic(truth, 8), EngineProfile("start"), ("step_overhead_s", "ttft_overhead_s")) < 1e-4


def test_a_bad_row_is_one_line_naming_the_file_and_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = "a,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,4,inf,10,100,10,fixed,tpot_ms,mean,5,"
    bad = "b,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,4,inf,10,100,10,fixed,tpot_ms,mean,fast,"
    path = tmp_path / "m.csv"
    path.write_text("\n".join([HEADER, good, bad]) + "\n", encoding="utf-8")
    assert main(["calibrate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:3: measured: expected a number, got 'fast'" in err and len(err.splitlines()) == 1
    path.write_text("\n".join([HEADER, good.replace("vLLM", "Ollama")]) + "\n", encoding="utf-8")
    with pytest.raises(OpcountValueError, match=r"m.csv:2: engine 'Ollama'"):
        rows.load(path)
    path.write_text("case,engine\n", encoding="utf-8")
    assert main(["calibrate", str(path)]) == 2
    assert f"{path}:1: the header lacks" in capsys.readouterr().err
    # a rate is requests a second or inf (all at once); nan is neither
    path.write_text("\n".join([HEADER, good.replace(",inf,", ",nan,")]) + "\n", encoding="utf-8")
    with pytest.raises(OpcountValueError, match=r"m.csv:2: rate: expected a number from 0, got 'nan'"):
        rows.load(path)


def test_no_row_priced_says_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # tp 1 on a row of 10**9 devices: no layout of the row's is priced, and the reason is the answer
    row = "a,s,vLLM,1,llama-3-8b,h100-sxm,1000000000,1,1,1,bfloat16,bfloat16,,4,inf,10,100,10,fixed,tpot_ms,mean,5,"
    path = tmp_path / "m.csv"
    path.write_text("\n".join([HEADER, row]) + "\n", encoding="utf-8")
    assert main(["calibrate", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "no row opcount can price" in err, err
    assert "(a: " in err and "1000000000" in err, err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--write", "{tmp}"], "--write {tmp}: a folder, not a file"),
        (["--write", "{tmp}/none/p.json"], "--write {tmp}/none/p.json: no folder"),
        (["-o", "{tmp}"], "-o {tmp}: a folder, not a file"),
        (["--write", "{tmp}/p.json", "-o", "{tmp}/p.json"], "--write {tmp}/p.json: -o writes the same file"),
    ],
)
def test_output_files_are_checked_before_any_row_is_priced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    # a file with no row to price: a check made after pricing would report that instead of the flag
    row = "a,s,vLLM,1,llama-3-8b,h100-sxm,1000000000,1,1,1,bfloat16,bfloat16,,4,inf,10,100,10,fixed,tpot_ms,mean,5,"
    path = tmp_path / "m.csv"
    path.write_text("\n".join([HEADER, row]) + "\n", encoding="utf-8")
    assert main(["calibrate", str(path), *(f.format(tmp=tmp_path) for f in flags)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and message.format(tmp=tmp_path) in err, err


def test_vllm_bench_serve_json_becomes_rows(tmp_path: Path) -> None:
    result = {
        "completed": 10, "total_input_tokens": 10240, "total_output_tokens": 1280, "max_concurrency": 4,
        "request_rate": "inf", "mean_tpot_ms": 7.5, "mean_ttft_ms": 40.0, "output_throughput": 500.0,
        "model": "llama-3-8b", "hardware": "h100-sxm",
    }  # fmt: skip
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(result), encoding="utf-8")
    found = {r.metric: r for r in rows.load(path)}
    assert set(found) == {"tpot_ms", "ttft_ms", "out_tok_s"}
    assert found["tpot_ms"].input == 1024 and found["tpot_ms"].output == 128 and found["tpot_ms"].concurrency == 4
    path.write_text(json.dumps({k: v for k, v in result.items() if k != "hardware"}), encoding="utf-8")
    with pytest.raises(OpcountValueError, match=r"bench.json:1: lacks 'hardware'"):
        rows.load(path)


def test_calibrate_writes_a_profile_the_other_commands_take(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = [
        "a,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,1,inf,10,512,64,fixed,tpot_ms,mean,7.0,",
        "b,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,1,inf,10,512,64,fixed,ttft_ms,mean,60,",
        "c,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,1,inf,10,512,64,fixed,tpot_ms,p99,9.0,",
    ]
    path, profile = tmp_path / "m.csv", tmp_path / "vllm.json"
    path.write_text("\n".join([HEADER, *body]) + "\n", encoding="utf-8")
    fitted = "step_overhead_s,ttft_overhead_s"
    assert main(["calibrate", str(path), "--fit", fitted, "--write", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "not modelled: p99 of tpot_ms" in out and "leave-one-out error" in out
    written = json.loads(profile.read_text(encoding="utf-8"))
    assert written["engine"] == "vllm" and written["fit"]["rows"] == 2
    # two parameters, two rows: the fit meets both
    assert written["fit"]["error"] < 1e-3
    assert main(["llm:llama-3-8b", "--hardware", "h100-sxm", "--engine-profile", str(profile)]) == 0
    assert "engine profile:" in capsys.readouterr().out
