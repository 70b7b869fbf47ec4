"""Workloads as vllm bench serve draws them and as traces publish them, and prefix caching in the scheduler,
against figures worked by hand. The step cost is the scheduler tests' own: ``0.1 + 0.01 d + 0.001 sum n_i``
seconds for ``d`` decode sequences and chunks of ``n_i`` new tokens."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from opcount.errors import OpcountError
from opcount.llm.serve import traces
from opcount.llm.serve.prefix_cache import BlockPool, prompt_hashes
from opcount.llm.serve.scheduler import Engine, run
from opcount.llm.serve.simulate import replay
from opcount.llm.serve.step_cost import Step
from opcount.llm.serve.workload import Sent, Workload


class Recorded:
    def __init__(self) -> None:
        self.steps: list[Step] = []

    def __call__(self, step: Step) -> float:
        self.steps.append(step)
        return 0.1 + 0.01 * step.decode + 0.001 * sum(n for _, n in step.chunks)


def engine(blocks: int = 10_000, caching: bool = True) -> Engine:
    return Engine(
        max_num_seqs=256, max_num_batched_tokens=8192, block_size=16, num_blocks=blocks, enable_prefix_caching=caching
    )


# lengths


def test_range_ratio_draws_within_vllms_bounds_by_the_seed() -> None:
    w = Workload(requests=5000, input_len=1000, output_len=10, rate=1.0, range_ratio=0.5, seed=3)
    prompts, answers = w.lengths()
    # vLLM: integers from floor(L (1 - R)) to ceil(L (1 + R)), both included
    assert prompts.min() >= 500 and prompts.max() <= 1500 and answers.min() >= 5 and answers.max() <= 15
    assert abs(prompts.mean() - 1000) < 15  # uniform: the mean of 5,000 draws within 3 of their spread's sd / sqrt(n)
    again, _ = Workload(requests=5000, input_len=1000, output_len=10, rate=1.0, range_ratio=0.5, seed=3).lengths()
    other, _ = Workload(requests=5000, input_len=1000, output_len=10, rate=1.0, range_ratio=0.5, seed=4).lengths()
    assert np.array_equal(prompts, again) and not np.array_equal(prompts, other)
    fixed = Workload(requests=3, input_len=7, output_len=2, rate=1.0)
    assert fixed.lengths()[0].tolist() == [7, 7, 7] and fixed.longest() == (7, 2)


def test_an_answer_is_one_token_at_least() -> None:
    _, answers = Workload(requests=500, input_len=10, output_len=1, rate=1.0, range_ratio=0.9).lengths()
    assert answers.min() >= 1 and answers.max() <= 2  # floor(0.1) = 0 raised to 1, ceil(1.9) = 2


def test_requests_of_different_lengths_run_as_their_own() -> None:
    rows = (Sent(0.0, 100, 3), Sent(10.0, 40, 2))
    cost = Recorded()
    sim = replay(Workload.replay(rows), engine(), cost)
    # R0 alone: prefill 0.2, two decodes 0.11 each; R1 at 10: prefill 0.1 + 0.04, one decode 0.11
    assert [s.chunks for s in cost.steps if s.chunks] == [((0, 100),), ((0, 40),)]
    assert [r["ttft"] for r in sim.per_request] == pytest.approx([0.2, 0.14])
    assert [r["e2el"] for r in sim.per_request] == pytest.approx([0.42, 0.25])
    assert sim.metrics["total_input_tokens"] == 140 and sim.metrics["total_output_tokens"] == 5


# traces


def write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_mooncake_trace(tmp_path: Path) -> None:
    path = write(
        tmp_path, "t.jsonl",
        '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
        '{"timestamp": 1500, "input_length": 700, "output_length": 6, "hash_ids": [0, 2]}\n\n'
        '{"timestamp": 1500, "input_length": 30, "output_length": 1}\n',
    )  # fmt: skip
    t = traces.read(path)
    assert t.rows == (Sent(0.0, 600, 5, (0, 1)), Sent(1.5, 700, 6, (0, 2)), Sent(1.5, 30, 1, ()))
    assert t.hash_block == 512
    w = Workload.replay(t.rows, hash_block=t.hash_block)
    assert w.first_arrivals() == [0.0, 1.5, 1.5] and w.requests == 3 and w.longest() == (700, 6)


@pytest.mark.parametrize(
    ("header", "rows", "arrivals"),
    [
        ("arrival_s,input_tokens,output_tokens", ["0.5,10,2", "2,20,3"], [0.0, 1.5]),
        (
            "TIMESTAMP,ContextTokens,GeneratedTokens",
            ["2023-11-16 18:15:46.6805900,10,2", "2023-11-16 18:15:48.1805900,20,3"],
            [0.0, 1.5],
        ),
        ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
         ["5,ChatGPT,10,2,12,Conversation log", "6.5,GPT-4,20,3,23,API log"], [0.0, 1.5]),
    ],
)  # fmt: skip
def test_a_csv_trace(tmp_path: Path, header: str, rows: list[str], arrivals: list[float]) -> None:
    t = traces.read(write(tmp_path, "t.csv", "\n".join([header, *rows]) + "\n"))
    assert [(s.prompt, s.output) for s in t.rows] == [(10, 2), (20, 3)]
    assert Workload.replay(t.rows).first_arrivals() == pytest.approx(arrivals)


def test_a_vllm_bench_serve_result(tmp_path: Path) -> None:
    result = {
        "input_lens": [10, 20],
        "output_lens": [2, 3],
        "errors": ["", ""],
        "max_concurrency": 4,
        "request_rate": math.inf,
    }
    t = traces.read(write(tmp_path, "r.json", json.dumps(result)))
    assert [(s.arrival, s.prompt, s.output) for s in t.rows] == [(None, 10, 2), (None, 20, 3)]
    assert (t.concurrency, t.rate) == (4, None)
    paced = traces.read(write(tmp_path, "p.json", json.dumps(result | {"max_concurrency": None, "request_rate": 2.0})))
    assert (paced.concurrency, paced.rate) == (None, 2.0)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n[1]\n', "t.jsonl:2: not a JSON object"),
        ("t.jsonl", '{"timestamp": 0, "input_length": 0, "output_length": 1}\n', "t.jsonl:1: input_length must be"),
        ("t.jsonl", '{"timestamp": 5, "input_length": 1, "output_length": 1}\n{"timestamp": 1, "input_length": 1, "output_length": 1}\n', "t.jsonl:2: timestamp 1 is before"),
        ("t.jsonl", '{"timestamp": 0, "input_length": 1, "output_length": 1, "prompt": "x"}\n', "unknown field 'prompt'"),
        ("t.jsonl", '{"timestamp": 0, "input_length": 1}\n', "t.jsonl:1: no output_length"),
        ("t.jsonl", "\n\n", "the trace has no request"),
        ("t.csv", "a,b,c\n1,2,3\n", "t.csv:1: unknown header"),
        ("t.csv", "arrival_s,input_tokens,output_tokens\n0,10\n", "t.csv:2: 2 cells"),
        ("t.csv", "arrival_s,input_tokens,output_tokens\n-1,10,2\n", "t.csv:2: arrival_s must be"),
        ("t.csv", "arrival_s,input_tokens,output_tokens\nnan,10,2\n", "t.csv:2: arrival_s must be"),
        ("t.csv", "arrival_s,input_tokens,output_tokens\n0,ten,2\n", "t.csv:2: input_tokens 'ten' is not"),
        ("r.json", '{"input_lens": [1], "output_lens": [1, 2]}', "two lists of one length"),
        ("r.json", '{"input_lens": [1], "output_lens": [0], "errors": ["timeout"]}', "request 1 failed"),
        ("t.txt", "x", "a trace is .jsonl"),
    ],
)  # fmt: skip
def test_a_malformed_trace_is_one_line_naming_its_row(tmp_path: Path, name: str, text: str, message: str) -> None:
    with pytest.raises(OpcountError, match=message) as e:
        traces.read(write(tmp_path, name, text))
    assert "\n" not in str(e.value)


# prefix caching


def test_hashes_of_a_shared_prefix_and_of_a_trace() -> None:
    assert prompt_hashes(64, 16, shared_tokens=40) == (1, 2)  # whole blocks of the 40 shared tokens
    a = prompt_hashes(1000, 256, trace=(7, 8), trace_block=512)  # blocks of 256 in blocks of 512: two a hash
    b = prompt_hashes(1000, 256, trace=(7, 9), trace_block=512)
    assert len(a) == 3 and a[:2] == b[:2] and a[2] != b[2]  # 1000 tokens: 3 full blocks; the third differs
    assert prompt_hashes(1000, 256, trace=(6, 8), trace_block=512)[2] != a[2]  # a block knows what is before it


def test_a_prompt_after_a_cached_prefix_computes_only_its_rest() -> None:
    # --prefix-hit 0.5 on prompts of 64 tokens: 32 shared tokens, 2 blocks. R0 computes all 64; R1, ten seconds on,
    # finds its 2 blocks cached (R0's, freed and kept) and runs one chunk of the 32 after them
    w = Workload(requests=2, input_len=64, output_len=2, rate=0.1, arrivals="constant", prefix_hit=0.5)
    cost = Recorded()
    sim = replay(w, engine(), cost)
    assert [s.chunks for s in cost.steps if s.chunks] == [((0, 64),), ((32, 32),)]
    assert [r["ttft"] for r in sim.per_request] == pytest.approx([0.164, 0.132])
    assert sim.metrics["prefix_cache_hit_rate"] == pytest.approx(32 / 128)
    cost = Recorded()
    replay(w, engine(caching=False), cost)  # no prefix caching: every prompt computed whole, no hit rate
    assert [s.chunks for s in cost.steps if s.chunks] == [((0, 64),), ((0, 64),)]


def test_a_whole_cached_prompt_still_computes_its_last_token() -> None:
    # a trace of two prompts of 64 tokens with the same 4 blocks of 16: the second hits 3 (63 tokens' whole blocks)
    rows = (Sent(0.0, 64, 2, (1,)), Sent(10.0, 64, 2, (1,)))
    cost = Recorded()
    replay(Workload.replay(rows, hash_block=64), engine(), cost)
    assert [s.chunks for s in cost.steps if s.chunks] == [((0, 64),), ((48, 16),)]


def test_requests_running_together_hold_a_shared_block_once() -> None:
    # R0 at 0 and R1 at 10 s, each 64 prompt tokens (the first 32 shared: 2 blocks) and 100 answer tokens, at a
    # step cost that does not depend on the chunks: the same timeline with and without caching. While both run,
    # the 2 shared blocks are held once: every count of blocks in use, the peak among them, is 2 lower
    w = Workload(requests=2, input_len=64, output_len=100, rate=0.1, arrivals="constant", prefix_hit=0.5)
    flat = lambda step: 1.0
    shared, alone = run(w, engine(), flat), run(w, engine(caching=False), flat)
    assert alone.peak_blocks - shared.peak_blocks == 2
    assert alone.steps == shared.steps


def test_freed_cached_blocks_are_evicted_least_recently_freed_first() -> None:
    pool = BlockPool()
    assert pool.cache(1) and pool.cache(2) and pool.cache(3)
    assert pool.release([1, 2, 3]) == 3  # freed last first: 3, then 2, then 1
    assert list(pool.evictable) == [3, 2, 1]
    pool.evict_for(need=4, free=5)  # 5 free blocks, 3 of them cached: 4 new ones evict 2 cached
    assert list(pool.evictable) == [1]
    assert pool.cached_prefix((1, 2), prompt=100, block_size=16) == 1
    assert pool.take((1,), 1) == 1 and pool.evictable == {} and pool.held == {1: 1}  # taken back from the free ones


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rate": 1.0, "range_ratio": 1.0}, "range_ratio must be"),
        ({"rate": 1.0, "prefix_hit": -0.1}, "prefix_hit must be"),
        ({"rate": 1.0, "input_len": 2**31}, "input_len must be at most"),
        ({"rate": 1.0, "seed": -1}, "seed must be"),
    ],
)
def test_bad_draws_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(OpcountError, match=message):
        Workload(**({"requests": 1, "input_len": 1, "output_len": 1} | kwargs))  # type: ignore[arg-type]
