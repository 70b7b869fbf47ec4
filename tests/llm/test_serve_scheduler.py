"""The scheduler of opcount.llm.serve against timelines worked by hand, over a step cost the test sets:
a step of ``d`` decode sequences and prompt chunks of ``n_i`` new tokens costs ``0.1 + 0.01 d + 0.001 sum n_i``
seconds."""

from __future__ import annotations

from dataclasses import replace

import pytest

from opcount.errors import OpcountError
from opcount.llm.serve.scheduler import Engine, run
from opcount.llm.serve.simulate import replay
from opcount.llm.serve.step_cost import Step
from opcount.llm.serve.workload import Workload


class Recorded:
    """The test's step cost, keeping every step it priced."""

    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __call__(self, step: Step) -> float:
        self.steps.append(step)
        return 0.1 + 0.01 * step.decode + 0.001 * sum(n for _, n in step.chunks)


def engine(blocks: int = 10_000, budget: int = 8192, block_size: int = 16, seqs: int = 256) -> Engine:
    return Engine(max_num_seqs=seqs, max_num_batched_tokens=budget, block_size=block_size, num_blocks=blocks)


def test_one_request_alone_is_its_prefill_then_decode_steps() -> None:
    # prefill of 100 tokens: 0.1 + 0.1 = 0.2 s; then 4 decode steps of 0.1 + 0.01 = 0.11 s
    sim = replay(Workload(requests=1, input_len=100, output_len=5, rate=1.0, arrivals="constant"), engine(), Recorded())
    m = sim.metrics
    assert m["mean_ttft_ms"] == pytest.approx(200.0)
    assert m["mean_tpot_ms"] == pytest.approx(110.0)
    assert m["mean_itl_ms"] == pytest.approx(110.0)
    assert m["mean_e2el_ms"] == pytest.approx(640.0)
    assert m["duration"] == pytest.approx(0.64)
    assert m["steps"] == 5 and m["preemptions"] == 0


def test_two_overlapping_requests_share_steps() -> None:
    # R0 at 0: prefill 0.2 -> 0.2. R1 (at 0.1) waits; step 2: R0 decode + R1 prefill 0.1 + 0.01 + 0.1 = 0.21 -> 0.41;
    # step 3: both decode 0.12 -> 0.53 (R0 done); step 4: R1 decode 0.11 -> 0.64.
    cost = Recorded()
    sim = replay(Workload(requests=2, input_len=100, output_len=3, rate=10.0, arrivals="constant"), engine(), cost)
    assert [(s.decode, s.kv_tokens, s.chunks) for s in cost.steps] == [
        (0, 0, ((0, 100),)),
        (1, 100, ((0, 100),)),
        (2, 201, ()),
        (1, 101, ()),
    ]
    rows = sim.per_request
    assert [r["ttft"] for r in rows] == pytest.approx([0.2, 0.31])
    assert [r["e2el"] for r in rows] == pytest.approx([0.53, 0.54])
    assert [r["tpot"] for r in rows] == pytest.approx([0.165, 0.115])
    m = sim.metrics
    assert m["mean_ttft_ms"] == pytest.approx(255.0)
    assert m["median_ttft_ms"] == pytest.approx(255.0)
    assert m["p99_ttft_ms"] == pytest.approx(200.0 + 0.99 * 110.0)  # linear between the two, as numpy's default
    assert m["request_throughput"] == pytest.approx(2 / 0.64)
    assert m["output_throughput"] == pytest.approx(6 / 0.64)


def test_a_token_budget_chunks_a_long_prompt() -> None:
    # 250 tokens under a budget of 100: chunks of 100, 100, 50 (0.2, 0.2, 0.15 s), then one decode step
    cost = Recorded()
    sim = replay(Workload(requests=1, input_len=250, output_len=2, rate=1.0), engine(budget=100), cost)
    assert [s.chunks for s in cost.steps] == [((0, 100),), ((100, 100),), ((200, 50),), ()]
    assert sim.metrics["mean_ttft_ms"] == pytest.approx(550.0)
    assert sim.metrics["mean_e2el_ms"] == pytest.approx(660.0)


def test_a_full_cache_preempts_the_newest_request_which_is_recomputed() -> None:
    # 5 blocks of 10 tokens; two requests of 20 + 11 tokens (3 blocks each at the end), both sent at 0.
    # step 1: both prefill (2 blocks each), 0.14 s. Step 2: R0 takes the last block; R1 needs one: R1, the newest,
    # is preempted; R0 decodes alone (0.11 s -> 0.25). R1 (21 tokens to recompute, 3 blocks) waits for R0, which ends
    # after 9 more decode steps: 1.24. R1 recomputes its prompt and first token (0.1 + 0.021 -> 1.361), its second
    # token comes out then, and 9 decode steps more end it at 2.351.
    cost = Recorded()
    sim = replay(Workload(requests=2, input_len=20, output_len=11, concurrency=2), engine(5, block_size=10), cost)
    assert sim.metrics["preemptions"] == 1
    rows = sim.per_request
    assert [r["ttft"] for r in rows] == pytest.approx([0.14, 0.14])
    assert [r["e2el"] for r in rows] == pytest.approx([1.24, 2.351])
    assert [r["preempted"] for r in rows] == [0, 1]
    assert cost.steps[11].chunks == ((0, 21),)
    assert sim.metrics["peak_kv_utilization"] == pytest.approx(0.8)  # 4 of 5 blocks after step 1


def test_concurrency_one_runs_the_requests_one_after_another() -> None:
    sim = replay(Workload(requests=3, input_len=100, output_len=5, concurrency=1), engine(), Recorded())
    assert [r["arrival"] for r in sim.per_request] == pytest.approx([0.0, 0.64, 1.28])
    assert sim.metrics["p99_ttft_ms"] == pytest.approx(200.0)
    assert sim.metrics["duration"] == pytest.approx(1.92)
    assert sim.metrics["request_throughput"] == pytest.approx(3 / 1.92)


def test_max_num_seqs_holds_the_others_waiting() -> None:
    # max_num_seqs 1: the second request, sent at 0 too, starts when the first ends (0.64 s)
    sim = replay(Workload(requests=2, input_len=100, output_len=5, concurrency=2), engine(seqs=1), Recorded())
    assert [r["ttft"] for r in sim.per_request] == pytest.approx([0.2, 0.84])


def test_one_token_answers_have_no_tpot() -> None:
    # two prompts of 100 sent together: one step of both (0.1 + 0.2 s), each answer its first token
    sim = replay(Workload(requests=2, input_len=100, output_len=1, concurrency=2), engine(), Recorded())
    assert sim.metrics["p50_ttft_ms"] == pytest.approx(300.0)
    assert sim.metrics["mean_tpot_ms"] == 0.0 and sim.metrics["steps"] == 1


def test_a_request_larger_than_the_cache_is_refused() -> None:
    with pytest.raises(OpcountError, match="needs 3 KV blocks of 10 tokens; the cache holds 2"):
        run(Workload(requests=1, input_len=20, output_len=5, rate=1.0), engine(2, block_size=10), Recorded())


def test_poisson_arrivals_follow_the_seed() -> None:
    a = Workload(requests=2000, input_len=1, output_len=1, rate=4.0, seed=7).first_arrivals()
    assert a == Workload(requests=2000, input_len=1, output_len=1, rate=4.0, seed=7).first_arrivals()
    assert a != Workload(requests=2000, input_len=1, output_len=1, rate=4.0, seed=8).first_arrivals()
    assert a[-1] / 1999 == pytest.approx(0.25, rel=0.1)  # the mean gap of a Poisson process is 1 / rate


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": -1.0}, "rate must be"),
        ({"rate": 1.0, "concurrency": 2}, "not both"),
        ({}, "one of them"),
        ({"concurrency": 0}, "concurrency must be"),
        ({"rate": 1.0, "arrivals": "bursty"}, "unknown arrivals"),
    ],
)
def test_bad_workloads_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(OpcountError, match=message):
        Workload(requests=1, input_len=1, output_len=1, **kwargs)  # type: ignore[arg-type]


def test_a_running_request_holds_its_fixed_blocks_beside_its_tokens() -> None:
    # 2 blocks a sequence (a window, a state) and 20 + 1 tokens in blocks of 16: 2 + 2 blocks at the peak
    fixed = Engine(max_num_seqs=256, max_num_batched_tokens=8192, block_size=16, num_blocks=100, blocks_per_sequence=2)
    found = run(Workload(requests=1, input_len=20, output_len=2, rate=1.0), fixed, Recorded())
    assert found.peak_blocks == 4
    # two requests arriving together need 2 x (2 + 2) blocks: with 7 the second waits for the first to finish
    small = Engine(max_num_seqs=256, max_num_batched_tokens=8192, block_size=16, num_blocks=7, blocks_per_sequence=2)
    steps = Recorded()
    run(Workload(requests=2, input_len=20, output_len=2, concurrency=2), small, steps)
    assert [(s.decode, len(s.chunks)) for s in steps.steps] == [(0, 1), (1, 0), (0, 1), (1, 0)]
    with pytest.raises(OpcountError, match="needs 4 KV blocks of 16 tokens; the cache holds 3"):
        run(Workload(requests=1, input_len=20, output_len=2, rate=1.0), replace(small, num_blocks=3), Recorded())
