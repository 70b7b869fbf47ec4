"""Issue 38's invariants of a served workload, over the scheduler tests' step cost (``0.1 + 0.01 d + 0.001 sum
n_i`` seconds a step): Little's law, the throughput a saturated engine levels off at, a queue's growing wait,
and the same seed giving the same numbers."""

from __future__ import annotations

import numpy as np
import pytest

from opcount.llm.serve.scheduler import Engine
from opcount.llm.serve.simulate import replay
from opcount.llm.serve.step_cost import Step
from opcount.llm.serve.workload import Workload


def cost(step: Step) -> float:
    return 0.1 + 0.01 * step.decode + 0.001 * sum(n for _, n in step.chunks)


def engine(seqs: int = 256) -> Engine:
    return Engine(max_num_seqs=seqs, max_num_batched_tokens=8192, block_size=16, num_blocks=100_000)


def test_littles_law() -> None:
    # the mean number of requests in the system, counted at 20,000 instants over the run, equals the
    # throughput times the mean time a request spends in it
    sim = replay(Workload(requests=400, input_len=200, output_len=30, rate=8.0, seed=5), engine(), cost)
    rows, m = sim.per_request, sim.metrics
    arrive = np.array([r["arrival"] for r in rows])
    leave = arrive + np.array([r["e2el"] for r in rows])
    instants = np.linspace(0.0, m["duration"], 20_000, endpoint=False)
    in_system = ((arrive[:, None] <= instants) & (instants < leave[:, None])).sum(axis=0).mean()
    assert in_system == pytest.approx(m["request_throughput"] * m["mean_e2el_ms"] / 1e3, rel=0.02)


def test_past_saturation_throughput_levels_off_at_the_decode_bound_batch() -> None:
    # at most 8 running: a step of 8 decodes takes 0.18 s, so at most 8 / 0.18 = 44.4 output tokens a second;
    # prompts share the steps, so the engine gives a little less, the same at 4 times the rate
    runs = [
        replay(Workload(requests=300, input_len=50, output_len=100, rate=r, seed=1), engine(seqs=8), cost).metrics
        for r in (50.0, 200.0)
    ]
    assert runs[0]["output_throughput"] <= 8 / 0.18
    assert runs[0]["output_throughput"] == pytest.approx(runs[1]["output_throughput"], rel=0.02)
    assert runs[0]["output_throughput"] > 0.9 * 8 / 0.18
    # the queue grows: twice the requests, at a saturating rate, wait longer for their first token
    longer = replay(Workload(requests=600, input_len=50, output_len=100, rate=50.0, seed=1), engine(seqs=8), cost)
    assert longer.metrics["mean_ttft_ms"] > 1.5 * runs[0]["mean_ttft_ms"]


def test_the_same_seed_gives_the_same_numbers() -> None:
    def metrics(seed: int) -> dict[str, float]:
        w = Workload(requests=200, input_len=300, output_len=20, rate=6.0, seed=seed, range_ratio=0.5)
        return replay(w, engine(), cost).metrics

    assert metrics(3) == metrics(3)
    assert metrics(3) != metrics(4)
