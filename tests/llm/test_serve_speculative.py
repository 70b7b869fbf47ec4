"""Speculative decoding in opcount.llm.serve: the accepted length against its closed form, the scheduler's
verify steps over a step cost the test sets, and what is refused."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")
from transformers import DeepseekV3Config, LlamaConfig

from opcount.cli.main import main
from opcount.errors import OpcountError
from opcount.hardware.lookup import hardware as lookup_hardware
from opcount.llm.causal_lm import CausalLM
from opcount.llm.deploy.layout import Parallel
from opcount.llm.serve.drafting import Drafter, WithDraft, mtp_head, projection, shared_share
from opcount.llm.serve.scheduler import Engine, run
from opcount.llm.serve.simulate import replay, simulate
from opcount.llm.serve.speculative import Speculation, expected_length, parse_acceptance
from opcount.llm.serve.step_cost import Affine, FittedStepCost, Prompt, Step, fitted
from opcount.llm.serve.workload import Workload


class Priced:
    """A step of ``d`` decode sequences each verifying ``1 + s`` tokens, and chunks of ``n_i`` tokens, costs
    ``0.1 + 0.01 d (1 + s) + 0.001 sum n_i`` seconds; every step kept."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __call__(self, step: Step) -> float:
        self.steps.append(step)
        return 0.1 + 0.01 * step.decode * (1 + step.speculative) + 0.001 * sum(n for _, n in step.chunks)


def engine(blocks: int = 10_000, budget: int = 8192, block_size: int = 16) -> Engine:
    return Engine(max_num_seqs=256, max_num_batched_tokens=budget, block_size=block_size, num_blocks=blocks)


def test_the_accepted_length_is_the_closed_form() -> None:
    assert expected_length((0.5, 0.5, 0.5)) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert Speculation.of(3, 0.5).expected_length == pytest.approx(1.875)  # (1 - a^4) / (1 - a)
    assert Speculation.of(2, (0.8, 0.5)).expected_length == pytest.approx(1 + 0.8 + 0.8 * 0.5)
    assert Speculation.of(4, 1.0).expected_length == 5.0
    assert Speculation.of(4, 0.0).expected_length == 1.0


def test_the_credit_emits_the_mean_exactly() -> None:
    spec, credit, emitted = Speculation.of(3, (0.75, 0.5, 0.5)), 0.0, 0
    for _ in range(1000):
        n, credit = spec.emit(credit)
        assert 1 <= n <= 4
        emitted += n
    # 1 + 0.75 + 0.375 + 0.1875 = 2.3125 a step: floor(1000 x 2.3125)
    assert emitted == 2312


def test_at_low_load_tpot_is_the_verify_step_over_the_accepted_length() -> None:
    # k = 1 at a = 0.5: 1.5 tokens a step. A prompt of 100 (0.1 + 0.1 = 0.2 s), then 300 tokens after the first
    # in 200 verify steps of 0.1 + 0.01 x 2 = 0.12 s: TPOT 0.12 / 1.5 = 80 ms
    cost = Priced()
    workload = Workload(requests=1, input_len=100, output_len=301, rate=1.0, arrivals="constant")
    found = run(workload, engine(), cost, speculation=Speculation.of(1, 0.5))
    assert found.steps == 201
    verifies = [s for s in cost.steps if s.decode]
    assert len(verifies) == 200 and all(s.speculative == 1 and s.decode == 1 for s in verifies)
    assert 300 / len(verifies) == pytest.approx(1.5)  # tokens a verify step, the closed form
    sim = replay(workload, engine(), Priced(), speculation=Speculation.of(1, 0.5))
    assert sim.metrics["mean_ttft_ms"] == pytest.approx(200.0)
    assert sim.metrics["mean_tpot_ms"] == pytest.approx(80.0)
    assert sim.metrics["mean_itl_ms"] == pytest.approx(120.0)  # a step's tokens stream as one chunk
    assert sim.metrics["mean_acceptance_length"] == pytest.approx(1.5)


def test_a_verify_takes_its_drafts_of_the_budget_and_their_blocks() -> None:
    # k = 3: a decode takes 4 tokens of the budget; at a budget of 6 the second request's prompt of 2 fits
    # beside the first one's verify, a third decode does not
    cost = Priced()
    workload = Workload(requests=2, input_len=2, output_len=3, concurrency=2)
    run(workload, engine(budget=6), cost, speculation=Speculation.of(3, 1.0))
    assert cost.steps[0].chunks == ((0, 2), (0, 2)) and not cost.steps[0].decode
    assert cost.steps[1] == Step(1, 2, (), 3)  # the first request's verify; the second's waits for budget
    # the largest request needs the blocks of its prompt, its answer but the last, a verify's k drafts and k
    # lookahead slots: 10 + 2 - 1 + 2 x 3 = 17 tokens, 2 blocks of 16
    alone, spec = Workload(requests=1, input_len=10, output_len=2, rate=1.0), Speculation.of(3, 0.5)
    with pytest.raises(OpcountError, match="needs 2 KV blocks"):
        run(alone, engine(blocks=1), Priced(), speculation=spec)
    # its prompt of 10 and 3 lookahead slots take one block, its verify of 4 after 10 and 3 more slots a second
    assert run(alone, engine(blocks=2), Priced(), speculation=spec).peak_blocks == 2


def test_the_draft_is_k_passes_over_the_verified_sequences_and_its_pass_over_chunks() -> None:
    # the draft's decode D(b, K) = 1 + 2 b + 3 K, its prompt P(L) = L: 2 passes over b = 2, K = 10 then 12,
    # and a chunk of 5 after 4 (P(0) + P(9) - P(4) = 5)
    draft = Drafter(FittedStepCost(Affine(1.0, 2.0, 3.0), Prompt((0, 10), (0.0, 10.0))), 2)
    assert draft(Step(2, 10, (), 2)) == pytest.approx((1 + 4 + 30) + (1 + 4 + 36))
    assert draft(Step(0, 0, ((4, 5),))) == pytest.approx(5.0)
    priced = WithDraft(lambda step: 1.0, draft)
    assert priced(Step(2, 10, ((4, 5),), 2)) == pytest.approx(1 + 76 + 5)
    assert priced.draft_share == pytest.approx(81 / 82)


@pytest.mark.parametrize(
    ("tokens", "rates", "match"),
    [
        (3, (0.5, 0.5), "2 rates for 3 speculative tokens"),
        (1, (1.5,), "from 0 to 1"),
        (2, (0.5, -0.1), "from 0 to 1"),
        (2, (0.5, float("nan")), "from 0 to 1"),
        (0, (), "from 1 to 64"),
    ],
)
def test_a_wrong_speculation_is_refused(tokens: int, rates: tuple[float, ...], match: str) -> None:
    with pytest.raises(OpcountError, match=match):
        Speculation(tokens, rates)


def test_an_acceptance_is_read_as_one_rate_or_a_list() -> None:
    assert parse_acceptance("0.7") == (0.7,)
    assert parse_acceptance("0.8,0.6") == (0.8, 0.6)
    with pytest.raises(OpcountError, match="comma list"):
        parse_acceptance("0.8;0.6")


SMALL = {
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000,
}  # fmt: skip


def _traced(llm: CausalLM, phase: str, batch: int, seq_len: int, kv_len: int) -> float:
    cost = llm.phase(phase, seq_len=seq_len, kv_len=kv_len, batch=batch, hardware="h100-sxm")
    time = llm.deploy(cost, Parallel(), hardware=cost.roofline.hardware if cost.roofline else None).step_time
    assert time is not None
    return time


def test_the_verify_step_is_a_traced_prefill_of_k_plus_1_over_the_cache() -> None:
    llm, draft = CausalLM(LlamaConfig(**SMALL)), CausalLM(LlamaConfig(**(SMALL | {"num_hidden_layers": 1})))
    workload = Workload(requests=2, input_len=200, output_len=9, rate=0.01, arrivals="constant")
    result = simulate(llm, workload, "h100-sxm", speculation=Speculation.of(2, 0.5, "draft"), draft=draft)
    assert result.fit is not None and result.fit.estimate.verify is not None
    verify = result.fit.estimate.verify
    # the fit's points: one sequence over the prompt (200) and over all but the last two answer tokens (207)
    for kv in (200, 207):
        assert verify(1, kv) == pytest.approx(_traced(llm, "prefill", 1, 3, kv), rel=1e-9)
    # and a batch of 64 there, which the fit did not solve for: within 1%
    assert verify(64, 64 * 207) == pytest.approx(_traced(llm, "prefill", 64, 3, 207), rel=0.01)


def test_at_low_load_a_draft_models_tokens_per_step_and_tpot_are_the_closed_form() -> None:
    # k = 2 at a = 0.5: 1 + 0.5 + 0.25 = 1.75 tokens a verify step; 7 tokens after the first take 4 steps
    # (credits 1.75, 3.5, 5.25, 7: 1, 2, 2, 2 tokens); each step costs the verify and 2 draft passes over 1
    # sequence at its context, plus nothing else (the requests are 100 s apart)
    llm, draft = CausalLM(LlamaConfig(**SMALL)), CausalLM(LlamaConfig(**(SMALL | {"num_hidden_layers": 1})))
    workload = Workload(requests=2, input_len=200, output_len=8, rate=0.01, arrivals="constant")
    spec = Speculation.of(2, 0.5, "draft")
    result = simulate(llm, workload, "h100-sxm", speculation=spec, draft=draft)
    assert result.fit is not None and result.draft_fit is not None
    verify, drafted = result.fit.estimate.verify, result.draft_fit.estimate.decode
    assert verify is not None
    contexts = [200, 201, 203, 205]  # the tokens cached before each verify: the prompt, then what it emitted
    steps = [verify(1, kv) + drafted(1, kv) + drafted(1, kv + 1) for kv in contexts]
    m = result.metrics
    assert m["mean_acceptance_length"] == pytest.approx(7 / 4)
    assert result.per_request[0]["tpot"] == pytest.approx(sum(steps) / 7, rel=1e-9)
    assert m["mean_itl_ms"] == pytest.approx(sum(steps) / 4 * 1e3, rel=1e-9)
    assert 0 < m["draft_time_share"] < 1


def test_a_model_with_no_mtp_layers_and_no_draft_is_refused() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    workload = Workload(requests=1, input_len=16, output_len=4, rate=1.0)
    with pytest.raises(OpcountError, match="no multi-token prediction layers"):
        simulate(llm, workload, "h100-sxm", speculation=Speculation.of(1, 0.5))
    other = CausalLM(LlamaConfig(**(SMALL | {"vocab_size": 500})))
    with pytest.raises(OpcountError, match="vocabulary"):
        simulate(llm, workload, "h100-sxm", speculation=Speculation.of(1, 0.5, "draft"), draft=other)
    with pytest.raises(OpcountError, match="names the draft 'llm:x', but no draft model is given"):
        simulate(llm, workload, "h100-sxm", speculation=Speculation.of(1, 0.5, "llm:x"))
    with pytest.raises(OpcountError, match="drafts speculative tokens"):
        simulate(llm, workload, "h100-sxm", draft=llm)


def _deepseek() -> CausalLM:
    # two dense layers, one of routed experts; the config's one MTP layer (num_nextn_predict_layers = 1)
    return CausalLM(
        DeepseekV3Config(
            hidden_size=256, intermediate_size=512, moe_intermediate_size=128, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, num_experts_per_tok=2,
            first_k_dense_replace=2, kv_lora_rank=64, q_lora_rank=96, qk_nope_head_dim=32, qk_rope_head_dim=16,
            v_head_dim=32, vocab_size=1000, n_group=1, topk_group=1, num_nextn_predict_layers=1,
        )
    )  # fmt: skip


def test_an_mtp_head_is_one_expert_layer_with_the_models_embedding_and_head() -> None:
    head = mtp_head(_deepseek())
    assert head.config.num_hidden_layers == 1 and len(head.experts) == 1  # its one layer routes to experts
    # the embedding and the LM head (1000 x 256 each, untied) are the model's: no memory of their own
    assert shared_share(head) * head.parameters == 2 * 1000 * 256
    # the 2h -> h projection over one token: its weight (2 x 256 x 256), its input (512) and output (256) in
    # bfloat16, read and written at the H100's 3.35 TB/s
    (e0, e1), weight = projection(head, lookup_hardware("h100-sxm"), 64)
    assert weight == 2 * 256 * 256 * 2
    assert e0 + e1 == pytest.approx((2 * 256 * 256 + 512 + 256) * 2 / 3.35e12, rel=1e-6)


def test_mtp_drafts_with_its_head_and_its_cache_takes_blocks() -> None:
    llm = _deepseek()
    workload = Workload(requests=2, input_len=100, output_len=9, rate=0.01, arrivals="constant")
    spec = simulate(llm, workload, "h100-sxm", speculation=Speculation.of(1, 1.0))
    plain = simulate(llm, workload, "h100-sxm")
    # every draft accepted: 2 tokens a verify step, 8 after the first in 4 steps
    assert spec.metrics["mean_acceptance_length"] == 2.0 and spec.draft_fit is not None
    assert 0 < spec.metrics["draft_time_share"] < 1
    # the head's one latent-attention layer caches as each of the model's three do: a token holds 4/3 as much
    assert spec.kv_bytes_per_token == pytest.approx(plain.kv_bytes_per_token * 4 / 3)
    assert spec.engine.num_blocks < plain.engine.num_blocks
    assert spec.as_dict()["speculative"]["mean_acceptance_length"] == 2.0


FLAGS = [f"--hf-config={k}={v}" for k, v in SMALL.items()]
SIMULATE = ["simulate", "hf:LlamaConfig", *FLAGS, "--hardware", "h100-sxm", "--rate", "1"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--speculative-tokens", "3", "--acceptance", "0.8,0.6"], "2 rates for 3 speculative tokens"),
        (["--speculative-tokens", "1", "--acceptance", "1.2"], "from 0 to 1"),
        (["--speculative-tokens", "2", "--acceptance", "0.8,x"], "comma list"),
        (["--acceptance", "0.8"], "--acceptance applies to speculative decoding"),
        (["--draft", "llm:llama-2-7b"], "--draft applies to speculative decoding"),
        (["--speculative-tokens", "2"], "needs --acceptance"),
        (["--speculative-tokens", "2", "--acceptance", "0.5", "--draft", "resnet50"], "--draft takes a causal LM"),
        (["--speculative-tokens", "2", "--acceptance", "0.5"], "no multi-token prediction layers"),
    ],
)
def test_a_wrong_speculation_exits_2_in_one_line(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*SIMULATE, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_opcount_simulate_with_a_draft_model(tmp_path: pytest.TempPathFactory) -> None:
    out = tmp_path / "sim.json"  # type: ignore[operator]
    # the target takes Llama-2's vocabulary, so that Llama-2-7B can draft for it
    argv = [*SIMULATE[:-2], "--hf-config=vocab_size=32000", "--concurrency", "1", "--requests", "2"]
    argv += ["--input-len", "64", "--output-len", "9", "--speculative-tokens", "1", "--acceptance", "1"]
    assert main([*argv, "--draft", "llm:llama-2-7b", "-o", str(out), "--format", "json", "-q"]) == 0
    sim = json.loads(out.read_text())["simulation"]
    assert sim["speculative"]["draft"] == "llm:llama-2-7b" and sim["speculative"]["mean_acceptance_length"] == 2
    assert sim["metrics"]["mean_acceptance_length"] == 2  # 8 tokens after the first, in 4 verify steps
    assert 0 < sim["metrics"]["draft_time_share"] < 1


def test_a_mixed_step_is_the_verify_and_its_chunks_tokens_beside_it() -> None:
    prompt = Prompt((1, 16, 64), (1.0, 2.0, 5.0))
    cost = FittedStepCost(Affine(0.5, 0.25, 0.0), prompt, verify=Affine(0.75, 0.5, 0.125))
    # V(2, 8) = 0.75 + 1 + 1 = 2.75 over 2 x (1 + 1) = 4 verified tokens, and the chunk of 24 after 16 (no
    # cached-prefix term fitted): what 24 tokens add to a forward of 4, P(28) - P(4) = 2.75 - 1.2
    assert cost(Step(2, 8, ((16, 24),), 1)) == pytest.approx(2.75 + 1.55)
    # without drafts: the decode step D(2, 8) = 1 over 2 tokens, and P(26) - P(2) = 2.625 - (1 + 1/15)
    assert cost(Step(2, 8, ((16, 24),))) == pytest.approx(1.0 + 2.625 - (1 + 1 / 15))
    with pytest.raises(OpcountError, match="without its verify"):
        FittedStepCost(Affine(0.5, 0.25, 0.0), prompt)(Step(1, 8, (), 2))


def test_the_verify_fit_recovers_an_affine_cost() -> None:
    # decode D(b, K) = 1 + 2 b + 3 K; a prefill of 3 tokens over K cached V(b, K) = 4 + 5 b + 6 K (per sequence K)
    def trace(phase: str, batch: int, new: int, cached: int) -> tuple[float, float | None]:
        if phase == "decode":
            return 1 + 2 * batch + 3 * batch * cached, None
        if cached and new == 3:  # the verify (the cached-prefix chunks traced for the prompt are 1, 8 and 16 long)
            return 4 + 5 * batch + 6 * batch * cached, None
        return float(new), None

    fit = fitted(trace, 100, 10, 8192, 8, speculative=2)
    assert fit.estimate.verify is not None and fit.bound is None
    v = fit.estimate.verify
    assert (v.d0, v.d1, v.d2) == pytest.approx((4, 5, 6))
    assert (
        fit.check_error == pytest.approx(0, abs=1e-12) and fit.traces == 4 + 4 + 5 + 3
    )  # prompts at 1, 16, 64, 100, 8192; chunks 1 and 16 over 50, 8 over 25
