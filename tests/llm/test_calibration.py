"""opcount calibrate and its parts (opcount.llm.calibration): measured rows read and refused row by row, the
steady-state form worked by hand, a profile recovered from rows generated with known parameters, the command."""

from __future__ import annotations

import json
import math
import random
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from opcount.cli import main
from opcount.errors import OpcountValueError
from opcount.hardware.lookup import hardware
from opcount.llm.calibration import evaluate, rows
from opcount.llm.calibration.evaluate import held, price, prompt_budget
from opcount.llm.calibration.fit import FITTED, fit, geomean_error, leave_one_out
from opcount.llm.calibration.steady import (
    Priced,
    Step,
    as_dict,
    bound,
    floor_sum,
    from_dict,
    predict,
    wave,
    workload,
)
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
    # 4 requests of 1,000 tokens at once on 4 slots: the 4,000 prompt tokens fit one step of the 8,192-token
    # budget, so every first token comes at its end, 4 P = 400 ms, and the decodes follow together: TPOT = D
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, SHAPE)
    row = measured("ttft_ms", concurrency="", requests="4")
    assert predict(Priced(row, 4, 1, True, decode, prefill), None) == pytest.approx(0.4)
    tpot = predict(Priced(measured(concurrency="", requests="4"), 4, 1, True, decode, prefill), None)
    assert tpot == pytest.approx(0.01)


def test_a_wave_of_prompts_in_chunks_by_hand() -> None:
    # 4 prompts of 3,000 tokens, 100 ms of work each and 10 ms a step: 12,000 tokens in two steps of the
    # 8,192-token budget; the first two prompts end in step 1, at 8,192 / 3,000 x 100 + 10 ms, the last two
    # in step 2, at 4 x 100 + 2 x 10 = 420 ms
    step1 = 8192 / 3000 * 0.1 + 0.01
    first, last = wave(4, 3000, 0.1, 0.01)
    assert first == pytest.approx((2 * step1 + 2 * 0.42) / 4)
    assert last == pytest.approx(0.42)


def test_the_wave_closed_form_equals_its_definition() -> None:
    # each prompt's end summed one by one (the definition) against the floor sum, over sizes around the budget
    rng = random.Random(3)
    for _ in range(300):
        b, prompt = rng.randint(1, 1500), rng.choice((1, 128, 3000, 8192, 8193, 32000, rng.randint(1, 40000)))
        total, steps = b * prompt, math.ceil(b * prompt / 8192)

        def until(s: int, total: int = total, prompt: int = prompt) -> float:
            return min(s * 8192, total) / prompt * 0.1 + s * 0.01

        first = sum(until(math.ceil(i * prompt / 8192)) for i in range(1, b + 1)) / b
        assert wave(b, prompt, 0.1, 0.01) == pytest.approx((first, until(steps)), rel=1e-12)
    for n, m, a, c in ((0, 5, 3, 2), (7, 3, 5, 11), (100, 8192, 3000, 11191)):
        assert floor_sum(n, m, a, c) == sum((a * i + c) // m for i in range(n))


PER_STEP = StepShape("prefill", 3000, 0.0, 0.0, 10, 2, 0.0)  # 10 collective calls and 2 experts blocks a step


def test_a_closed_loop_of_fixed_lengths_runs_in_waves_by_hand() -> None:
    # 4 clients, fixed lengths (3,000 in, 101 out): every round's 4 prompts arrive together. Under a profile of
    # 10 ms a step, 1 us a collective call and 0 routing: P = 100 + 10 + 0.01 ms, its tokens 100 ms, a step's own
    # terms 10.01 ms; D = 10 ms + 10 ms of the profile's step
    profile = EngineProfile("t", step_overhead_s=0.01, collective_latency_s=1e-6, ttft_overhead_s=0.02)
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, PER_STEP)
    d, own = 0.02, 0.01001
    first, prompts = (2 * (8192 / 3000 * 0.1 + own) + 2 * (0.4 + 2 * own)) / 4, 0.4 + 2 * own

    def priced(metric: str) -> float:
        row = measured(metric, input="3000", lengths="fixed")
        assert row.lockstep
        return predict(Priced(row, 4, 1, False, decode, prefill), profile)

    assert priced("ttft_ms") == pytest.approx(first + 0.02)
    assert priced("tpot_ms") == pytest.approx(d + (prompts - first) / 100)
    # 4 x 101 tokens every round: the server's 20 ms, the wave's prompts, 100 decode steps
    assert priced("out_tok_s") == pytest.approx((0.02 + prompts + 100 * d) / (4 * 101))


def test_clients_beyond_the_kv_cache_wait_for_a_slot_by_hand() -> None:
    # 8 clients, a KV cache that holds 4 sequences: 4 run as in the closed loop above, the other 4 wait one
    # round of a slot's time (TTFT + 100 TPOT of the running ones) before their prompt; tokens a second stay
    # the 4 slots'
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, SHAPE)
    profile = EngineProfile("t", ttft_overhead_s=0.02)
    tpot = 0.01 + 3 * 0.1 / 101
    rho = 3 * 0.1 / (0.1 + 100 * tpot)
    running = 0.1 + 0.02 + 0.005 + rho / (1 - rho) * 0.05
    slot = running + 100 * tpot

    def priced(metric: str, **extra: str) -> float:
        return predict(Priced(measured(metric, concurrency="8", **extra), 4, 1, False, decode, prefill), profile)

    assert priced("tpot_ms") == pytest.approx(tpot)
    assert priced("ttft_ms") == pytest.approx(running + slot)
    assert priced("out_tok_s") == pytest.approx(slot / (4 * 101))
    # fixed lengths: the waiting 4 start a round later, a round the server's 20 ms, 4 x 100 ms of prompts in
    # one 8,192-token step (their first tokens at its end) and 100 decode steps
    wave = 0.02 + 0.4 + 100 * 0.01
    assert priced("ttft_ms", lengths="fixed") == pytest.approx(0.4 + 0.02 + wave)
    assert priced("out_tok_s", lengths="fixed") == pytest.approx(wave / (4 * 101))


def test_a_closed_loop_is_capped_by_the_kv_cache_the_engine_logged_else_by_opcounts_count() -> None:
    # Llama-3-8B on an H100, 1,000 + 101 tokens a sequence: 16 clients, an engine that logged 8,808 tokens of KV
    # cache holds 8 of them; without its figure, opcount's count of an H100 holds all 16
    row = measured(concurrency="16", requests="64")
    (logged,) = price([replace(row, kv_tokens=8808)])
    (plain,) = price([row])
    assert isinstance(logged, Priced) and isinstance(plain, Priced)
    assert (logged.batch, plain.batch) == (8, 16)
    # 64 clients of 8,000 + 100 tokens: 0.9 of the H100's 85.52 GB less 16.06 GB of bfloat16 weights (8.03 B
    # parameters) leaves 60.91 GB before the prompt step's working set, and a sequence takes 8,100 x 131,072 =
    # 1.062 GB (32 layers x 8 KV heads x 128 x 2 x 2 bytes a token): 56 of them whenever that working set is
    # between 0.4 and 1.45 GB (the MLP's gate-and-up output alone, 8,000 x 28,672 x 2 bytes, is 0.46 GB)
    (long,) = price([measured(concurrency="64", requests="256", input="8000", output="100")])
    assert isinstance(long, Priced) and long.batch == 56
    assert workload(long) == "closed loop of 56 (8 more waiting: the KV cache holds 56)"


def test_the_slots_a_kv_cache_holds() -> None:
    # 100 bytes for the engine, 60 of weights, 4 of working set: 36 left for sequences of 1,000 + 100 tokens
    # at 1 byte a 1,000-token prompt, 1.1 bytes each: 32 of them
    prefill = SimpleNamespace(capacity=100.0, per_device=SimpleNamespace(weights=60.0, activations=4.0, kv_cache=1.0))
    assert held(prefill, 1000, 100) == 32  # type: ignore[arg-type]


def test_a_prompt_beside_decodes_pays_its_tokens_not_another_step() -> None:
    # a closed loop of varied lengths: each of the 3 other prompts adds its tokens' 100 ms to the decode steps,
    # not the 10 ms step and 10 collective calls the decode step pays already
    profile = EngineProfile("t", step_overhead_s=0.01, collective_latency_s=1e-6)
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, PER_STEP)
    tpot = predict(Priced(measured(input="3000"), 4, 1, False, decode, prefill), profile)
    assert tpot == pytest.approx(0.02 + 3 * 0.1 / 101)


def test_vllm_v0_runs_whole_prompts_alone_on_a_latent_attention_model() -> None:
    # vLLM 0.7 turned chunked prefill off for MLA and took whole prompts up to max(max_model_len, 2048) tokens
    mla = SimpleNamespace(kv_lora_rank=512, max_position_embeddings=163840)
    gqa = SimpleNamespace(max_position_embeddings=131072)
    v0, v1 = measured(version="0.7.3.dev138+g21f6ca217"), measured(version="v0.11.0")
    h100, a100 = hardware("h100-sxm"), hardware("a100-sxm")
    assert prompt_budget(v0, mla, h100) == (163840, True)
    # the server's --max-model-len bounds it (dstack's MI300X runs: --max-model-len 32768), never below 2,048
    assert prompt_budget(measured(version="0.7.3", max_model_len="32768"), mla, h100) == (32768, True)
    assert prompt_budget(measured(version="0.7.3", max_model_len="1024"), mla, h100) == (2048, True)
    assert prompt_budget(v1, mla, h100) == (8192, False)
    assert prompt_budget(v0, gqa, h100) == (8192, False)
    assert prompt_budget(v1, gqa, a100) == (2048, False)  # vLLM V1's budget on an A100 (EngineArgs)
    assert prompt_budget(measured(engine="SGLang", version="0.4.2"), mla, a100) == (8192, False)
    # a closed loop of varied lengths: each of the 3 other prompts takes a step of its own, P whole
    profile = EngineProfile("t", step_overhead_s=0.01, collective_latency_s=1e-6)
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, PER_STEP)
    alone = Priced(measured(input="3000"), 4, 1, False, decode, prefill, 163840, True)
    assert predict(alone, profile) == pytest.approx(0.02 + 3 * (0.1 + 0.01001) / 101)
    # a wave of 4 x 3,000 tokens in one step of 163,840: every first token at 4 x 100 ms + one step's 10.01 ms
    wave_row = measured("ttft_ms", input="3000", lengths="fixed")
    assert predict(replace(alone, row=wave_row), None) == pytest.approx(0.4)
    assert predict(replace(alone, row=wave_row), profile) == pytest.approx(0.4 + 0.01001)
    assert from_dict(alone.row, as_dict(alone)) == alone  # kept with the priced steps


def test_each_row_says_how_its_workload_is_priced() -> None:
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, SHAPE)
    assert workload(Priced(measured(), 4, 1, False, decode, prefill)) == "closed loop of 4"
    queued = Priced(measured(concurrency="8"), 4, 1, False, decode, prefill)
    assert workload(queued) == "closed loop of 4 (4 more waiting: the KV cache holds 4)"
    fixed = Priced(measured(lengths="fixed"), 4, 1, False, decode, prefill, 163840, True)
    assert workload(fixed) == "waves of 4 (163840 tokens a step, prompts alone)"
    burst = Priced(measured(concurrency="", requests="10"), 4, 1, True, decode, prefill)
    assert workload(burst) == "all at once, 2.5 waves of 4"


def test_all_at_once_over_two_waves_mixes_the_wave_and_the_loop() -> None:
    # 8 requests on 4 slots: the first 4 decode as a wave (TPOT = D: their prompts fit one step), the other 4
    # beside the prompts that follow (TPOT = D + 3 P / O): the mean of the two
    decode, prefill = Step(0.01, 0.005, SHAPE), Step(0.1, 0.05, SHAPE)
    tpot = predict(Priced(measured(concurrency="", requests="8"), 4, 1, True, decode, prefill), None)
    assert tpot == pytest.approx((0.01 + (0.01 + 3 * 0.1 / 101)) / 2)


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


@pytest.mark.parametrize(
    ("given", "said"),
    [("0", "max_model_len: expected a number from 1"), ("4.5", "max_model_len: expected a whole number"),
     (str(2**24 + 1), "max_model_len: at most 16777216 tokens")],
)  # fmt: skip
def test_a_max_model_len_is_a_whole_number_of_tokens_within_bounds(given: str, said: str) -> None:
    with pytest.raises(OpcountValueError, match=said):
        measured(max_model_len=given)
    assert measured().max_model_len is None and measured(max_model_len="32768").max_model_len == 32768
    with pytest.raises(OpcountValueError, match="kv_tokens: at most 17592186044416 tokens"):
        measured(kv_tokens=str(2**44 + 1))
    assert measured(kv_tokens="8808").kv_tokens == 8808


def test_a_bad_row_is_one_line_naming_the_file_and_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = "a,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,4,inf,10,100,10,fixed,,,tpot_ms,mean,5,"
    bad = "b,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,4,inf,10,100,10,fixed,,,tpot_ms,mean,fast,"
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
    row = "a,s,vLLM,1,llama-3-8b,h100-sxm,1000000000,1,1,1,bfloat16,bfloat16,,4,inf,10,100,10,fixed,,,tpot_ms,mean,5,"
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
    row = "a,s,vLLM,1,llama-3-8b,h100-sxm,1000000000,1,1,1,bfloat16,bfloat16,,4,inf,10,100,10,fixed,,,tpot_ms,mean,5,"
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
    assert not found["tpot_ms"].lockstep and found["tpot_ms"].release is None
    path.write_text(json.dumps(result | {"lengths": "fixed", "version": "0.7.3", "max_model_len": 32768}), "utf-8")
    fixed = rows.load(path)[0]
    assert fixed.lockstep and fixed.release == (0, 7) and fixed.max_model_len == 32768
    assert [measured(lengths=text).lockstep for text in ("Fixed ", "random ratio 0", "random ratio 0.5", "sharegpt")] == [
        True, True, False, False,
    ]  # fmt: skip
    path.write_text(json.dumps({k: v for k, v in result.items() if k != "hardware"}), encoding="utf-8")
    with pytest.raises(OpcountValueError, match=r"bench.json:1: lacks 'hardware'"):
        rows.load(path)


def test_calibrate_writes_a_profile_the_other_commands_take(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = [
        "a,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,1,inf,10,512,64,fixed,,,tpot_ms,mean,7.0,",
        "b,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,1,inf,10,512,64,fixed,,,ttft_ms,mean,60,",
        "c,s,vLLM,1,llama-3-8b,h100-sxm,1,1,1,1,bfloat16,bfloat16,,1,inf,10,512,64,fixed,,,tpot_ms,p99,9.0,",
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


def test_the_tracer_keeps_the_phases_used_last(monkeypatch: pytest.MonkeyPatch) -> None:
    # a file of many rows is priced within bounded memory: the phases used last are kept, the oldest dropped
    monkeypatch.setattr(evaluate, "PHASES_KEPT", 2)
    tracer = evaluate.Tracer()
    price([measured(concurrency="4"), measured(concurrency="8")], tracer)  # one prompt, two decode steps
    assert len(tracer.phases) == 2
    assert [key[6] for key in tracer.phases] == [1, 8]  # the prompt (batch 1), used again, and the last decode
