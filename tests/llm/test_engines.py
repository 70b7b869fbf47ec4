"""Engine profiles (opcount.llm.engines): each term against its closed form worked by hand, a deployment's
estimate gaining exactly the terms and its bound untouched, profile files and the --engine flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers")

from opcount.cli import main  # noqa: E402
from opcount.errors import OpcountValueError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.layout import Parallel  # noqa: E402
from opcount.llm.engines.profile import BUILTIN, RANGES, EngineProfile, dumps, load, resolve  # noqa: E402
from opcount.llm.engines.terms import StepShape, step_seconds, terms  # noqa: E402
from opcount.llm.generation import generation  # noqa: E402
from opcount.llm.serve.simulate import simulate  # noqa: E402
from opcount.llm.serve.workload import Workload  # noqa: E402
from tests.llm.test_deploy import DEVICE, N, llama  # noqa: E402

PROFILE = EngineProfile(
    "test",
    step_overhead_s=1e-3,
    collective_latency_s=1e-5,
    gemm_small_m_efficiency=0.5,
    moe_routing_s=2e-5,
    attention_decode_efficiency=0.25,
    overlap=0.5,
    software_dequant=1.0,
    ttft_overhead_s=0.02,
)


def test_each_term_by_hand() -> None:
    # a decode step of 16 sequences: kernels 4 ms, collectives 1 ms in 10 calls, 3 experts blocks, KV read 0.2 ms
    shape = StepShape("decode", 16, 4e-3, 1e-3, 10, 3, 2e-4, software_dequant=True)
    found = terms(PROFILE, shape)
    assert found["step"] == pytest.approx(1e-3)
    assert found["collectives"] == pytest.approx(10 * 1e-5)
    # (1 / 0.5 - 1) x (1 - 16 / 64) of the 4 ms kernels: 1 x 0.75 x 4 ms = 3 ms
    assert found["small_m"] == pytest.approx(3e-3)
    assert found["moe"] == pytest.approx(3 * 2e-5)
    # (1 / 0.25 - 1) x 0.2 ms = 0.6 ms
    assert found["attention"] == pytest.approx(6e-4)
    # half of min(1 ms, 4 ms) hidden
    assert found["overlap"] == pytest.approx(-5e-4)
    assert found["dequant"] == pytest.approx(4e-3)
    assert step_seconds(PROFILE, shape) == pytest.approx(sum(found.values()))
    assert step_seconds(None, shape) == 0.0


def test_a_full_tile_and_a_prompt_pay_no_small_m_or_decode_attention() -> None:
    shape = StepShape("prefill", 64, 4e-3, 0.0, 0, 0, 2e-4)
    found = terms(PROFILE, shape)
    assert found["small_m"] == 0.0 and found["attention"] == 0.0 and found["dequant"] == 0.0
    assert found["prefill"] == 0.0  # PROFILE keeps the estimate's prompt speed
    # a prompt at 0.8 of the estimate's speed: 4 ms x (1 / 0.8 - 1) = 1 ms more
    assert terms(EngineProfile("p", prefill_efficiency=0.8), shape)["prefill"] == pytest.approx(1e-3)


def test_a_deployment_adds_exactly_the_terms_and_leaves_the_bound() -> None:
    llm = CausalLM(llama())
    cost = llm.phase("decode", kv_len=63, batch=4, hardware=DEVICE)
    plain = llm.deploy(cost, Parallel(tp=2), hardware=DEVICE)
    engine = llm.deploy(cost, Parallel(tp=2), hardware=DEVICE, engine=PROFILE)
    assert plain.engine_terms == {} and plain.shape is not None
    assert engine.step_time_bound == plain.step_time_bound
    assert engine.step_time == pytest.approx(plain.step_time + sum(terms(PROFILE, plain.shape).values()))
    # Llama at tp 2: an all-reduce after o_proj and after down_proj in each of N layers, the embedding's
    # all-reduce and lm_head's all-gather
    assert plain.shape.collectives == 2 * N + 2
    assert plain.shape.tokens == 4 and plain.shape.phase == "decode" and plain.shape.moe_blocks == 0


def test_a_generation_gains_the_server_time_to_first_token() -> None:
    llm = CausalLM(llama())
    gen = generation(llm, 32, 4, batch=1, hardware=DEVICE)
    plain = llm.deploy(gen, Parallel(), hardware=DEVICE)
    none = EngineProfile("ttft only", ttft_overhead_s=0.02)
    engine = llm.deploy(gen, Parallel(), hardware=DEVICE, engine=none)
    assert engine.time_to_first_token == pytest.approx(plain.time_to_first_token + 0.02)
    assert engine.step_time == pytest.approx(plain.step_time)


def test_builtin_profiles_name_a_source_for_every_parameter() -> None:
    for name, profile in BUILTIN.items():
        assert profile.name == name
        assert set(profile.sources) == set(RANGES), name


def test_a_profile_file_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(dumps(PROFILE), encoding="utf-8")
    assert load(path) == PROFILE
    assert resolve("vllm", None) is BUILTIN["vllm"]
    assert resolve(None, None) is None
    assert resolve("vllm", path) == PROFILE


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"engine": "x"}, "expected an object with 'engine' and 'parameters'"),
        ({"engine": "x", "parameters": {"step_s": 1}}, r"unknown keys \['step_s'\]"),
        ({"engine": "x", "parameters": {"overlap": 2}}, "overlap must be a number from 0 to 1"),
    ],
)
def test_a_bad_profile_file_is_refused(tmp_path: Path, data: dict[str, object], message: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(OpcountValueError, match=message):
        load(path)


def test_engine_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["llm:llama-3-8b", "--engine", "vllm"]) == 2
    assert "--engine needs --hardware" in capsys.readouterr().err
    assert main(["llm:llama-3-8b", "--engine", "nope"]) == 2
    assert main(["llm:llama-3-8b", "--hardware", "h100-sxm", "--engine-profile", "/no/such/file.json"]) == 2
    assert "/no/such/file.json" in capsys.readouterr().err


def test_simulate_adds_the_step_terms_and_the_server_time_to_first_token() -> None:
    # one client: every step is its own, so each decode step gains the 1 ms step cost and the TTFT the prompt's
    # step cost and the server's 20 ms; the bound is the same run without them
    llm = CausalLM(llama())
    workload = Workload(requests=2, input_len=64, output_len=5, concurrency=1)
    profile = EngineProfile("t", step_overhead_s=1e-3, ttft_overhead_s=0.02)
    plain = simulate(llm, workload, "h100-sxm")
    engine = simulate(llm, workload, "h100-sxm", engine_profile=profile)
    assert engine.metrics["mean_tpot_ms"] == pytest.approx(plain.metrics["mean_tpot_ms"] + 1.0, rel=1e-6)
    assert engine.metrics["mean_ttft_ms"] == pytest.approx(plain.metrics["mean_ttft_ms"] + 21.0, rel=1e-6)
    assert engine.bound == plain.bound
    assert engine.as_dict()["engine_profile"]["engine"] == "t" and plain.as_dict()["engine_profile"] is None
