"""opcount plan on a small Llama: the best configuration against a brute-force enumeration, each configuration
returned re-run through simulate, each phase traced once for every device, the KV transfer worked by hand, and
bad input refused naming its flag."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("transformers")
from transformers import LlamaConfig

from opcount.errors import OpcountError
from opcount.hardware.lookup import hardware
from opcount.llm.causal_lm import CausalLM, TracedPhase
from opcount.llm.deploy.layout import Parallel
from opcount.llm.phases import PhaseRequest
from opcount.llm.plan.disagg import Pool, transfer
from opcount.llm.plan.planner import plan
from opcount.llm.plan.search import Config, Search, latency, share
from opcount.llm.serve.simulate import simulate
from opcount.llm.serve.slo import parse
from opcount.llm.serve.speculative import Speculation
from opcount.llm.serve.workload import Workload
from tests.fixtures.command import error_line, run

SMALL = {
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": 1000,
}  # fmt: skip
WORKLOAD = Workload(requests=40, input_len=200, output_len=20, rate=50.0)
SLOS = (parse("ttft", "p90:40ms"), parse("tpot", "30ms"))
PRICES = {"h100-sxm": 2.5, "b200": 5.0}


def test_the_best_is_the_cheapest_meeting_the_targets_by_brute_force() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    devices = (hardware("h100-sxm"), hardware("b200"))
    found = plan(Search(WORKLOAD, SLOS, devices, PRICES, max_devices=4), {"bf16": llm})
    assert found.met
    best = found.met[0]
    cheapest = None
    for h in devices:
        for tp in (1, 2, 4):
            for pp in (1, 2, 4):
                for dp in range(1, 4 // (tp * pp) + 1):
                    part = share(WORKLOAD, dp)
                    assert part is not None
                    try:
                        sim = simulate(llm, part, h, Parallel(tp=tp, pp=pp))
                    except OpcountError:
                        continue  # a layout the model cannot run
                    if all(s.met(latency(sim, s.metric, s.percentile)) for s in SLOS):
                        # the bill: devices x hours x price over the output tokens of every copy
                        bill = tp * pp * dp * sim.metrics["duration"] / 3600 * PRICES[h.name]
                        cost = bill / (sim.metrics["total_output_tokens"] * dp) * 1e6
                        cheapest = cost if cheapest is None else min(cheapest, cost)
    assert best.cost is not None and cheapest is not None
    assert best.cost["output"] == pytest.approx(cheapest, rel=1e-9)
    for r in found.met:  # each returned configuration meets the targets when simulated again
        c = r.config
        part = share(WORKLOAD, c.dp)
        assert part is not None and r.point is not None and "prefill" not in r.point.layout
        sim = simulate(llm, part, c.hardware, c.parallel)
        assert all(s.met(latency(sim, s.metric, s.percentile)) for s in SLOS)


def test_kv_transfer_is_the_prompts_cache_over_the_link() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    h = hardware("h100-sxm")
    sim = simulate(llm, WORKLOAD, h)
    one = Pool(Config(h.name, "bf16", Parallel(), 1), h, sim, "memory")
    seconds, via = transfer(one, one, 200)
    # 2 layers x (keys and values) x 2 KV heads x 64 wide x 2 bytes = 1,024 bytes a token, on one device
    assert via == "scale-up" and h.interconnect is not None
    assert seconds == pytest.approx(1024 * 200 / h.interconnect.bandwidth + h.interconnect.latency)


FLAGS = [f"--hf-config={k}={v}" for k, v in SMALL.items()]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--hardware", "nope"], "--hardware"),
        (["--price", "b200=5"], "--price"),
        (["--slo-ttft", "0s"], "--slo-ttft"),
        (["--max-devices", "1024", "--hardware", "h100-sxm,h200-sxm,b200"], "--max-devices"),
        (["--acceptance", "0.8"], "--acceptance"),
        (["--speculative-tokens", "2", "--acceptance", "0.8", "--disaggregate"], "--speculative-tokens"),
        # a step is traced at most at 2**20 = 1,048,576 sequences: a cap above it is refused by its flag
        (["--max-num-seqs", "1048577"], "--max-num-seqs"),
        # a block of more than the 2**24 = 16,777,216 positions a sequence may hold
        (["--block-size", "16777217"], "--block-size"),
        # more clients than the 10,000,000 requests a run may hold
        (["--concurrency", "10000001"], "argument --concurrency: at most"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str], args: list[str], flag: str) -> None:
    assert flag in error_line(capsys, "plan", "llm:llama-3-8b", *FLAGS, "--rate", "1", *args)


CLOSED = Workload(requests=96, input_len=200, output_len=20, concurrency=48)


def test_a_batch_cap_is_searched_where_vllms_misses_the_tpot_target() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    h = hardware("h100-sxm")
    wide, narrow = simulate(llm, CLOSED, h), simulate(llm, CLOSED, h, max_num_seqs=8)
    slow, fast = latency(wide, "tpot", 50), latency(narrow, "tpot", 50)
    assert fast < slow  # eight sequences a step step faster than 48
    target = parse("tpot", f"{(slow * fast) ** 0.5 * 1e3:.6f}ms")  # between the two
    found = plan(Search(CLOSED, (target,), (h,), {}, max_devices=1), {"bf16": llm})
    labels = [r.config.label() for r in found.met]
    assert labels and all("seqs" in label for label in labels), labels
    assert next(r.config.label() for r in found.missed if r.point is not None) == "tp1"  # vLLM's cap missed
    for r in found.met:  # each capped configuration meets the target when simulated with that cap
        assert r.config.max_num_seqs is not None
        sim = simulate(llm, CLOSED, h, max_num_seqs=r.config.max_num_seqs)
        assert target.met(latency(sim, "tpot", 50))


def test_speculation_is_searched_beside_none_and_each_returned_one_meets() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    draft = CausalLM(LlamaConfig(**(SMALL | {"num_hidden_layers": 1})))
    spec = Speculation.of(2, 0.8, "draft")
    h = hardware("h100-sxm")
    found = plan(Search(WORKLOAD, SLOS, (h,), {}, max_devices=2, speculation=spec, draft=draft), {"bf16": llm})
    ran = [r for r in (*found.met, *found.missed) if r.point is not None]
    assert {r.config.speculative for r in ran} == {0, 2}
    for r in found.met:
        part = share(WORKLOAD, r.config.dp)
        assert part is not None
        with_spec = r.config.speculative > 0
        sim = simulate(llm, part, h, r.config.parallel, speculation=spec if with_spec else None,
                       draft=draft if with_spec else None)  # fmt: skip
        assert all(s.met(latency(sim, s.metric, s.percentile)) for s in SLOS)


def test_a_trace_is_dealt_round_robin_over_copies(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from opcount.llm.serve.workload import Sent

    rows = tuple(Sent(0.01 * i, 100 + i, 10 + i) for i in range(6))
    traced = Workload.replay(rows)
    half = share(traced, 2)
    assert half is not None and half.trace is not None
    assert [s.prompt for s in half.trace] == [100, 102, 104] and half.requests == 3  # the first copy's: every 2nd
    assert share(Workload.replay(rows, concurrency=3), 2) is None  # 3 clients do not split over 2 copies
    path = tmp_path / "t.csv"
    path.write_text(
        "arrival_s,input_tokens,output_tokens\n" + "".join(f"{0.01 * i},{100 + i},{10 + i}\n" for i in range(6))
    )
    status, out, err = run(capsys, "plan", "llm:llama-3-8b", *FLAGS, "--trace", str(path), "--max-devices", "1")
    assert status == 0, err
    assert "6 requests from a trace of 100-105" in out and "at the trace's own times" in out
    assert "--trace" in error_line(
        capsys, "plan", "llm:llama-3-8b", *FLAGS, "--trace", str(path), "--disaggregate", "--rate", "1"
    )


def test_each_phase_is_traced_once_for_every_device_and_the_estimate_alone_is_run() -> None:
    llm = CausalLM(LlamaConfig(**SMALL))
    traced: list[tuple[object, ...]] = []
    trace = llm.traced

    def counted(request: PhaseRequest) -> TracedPhase:
        traced.append((request.phase, request.new_tokens, request.kv_len, request.batch))
        return trace(request)

    llm.traced = counted  # type: ignore[method-assign]  # the instance's, which the search's copy calls
    devices = (hardware("h100-sxm"), hardware("b200"))
    found = plan(Search(WORKLOAD, SLOS, devices, PRICES, max_devices=2), {"bf16": llm})
    assert found.simulations > 0 and traced
    assert len(traced) == len(set(traced))  # a phase both devices price is traced once
    # a plan judges the estimate's run: without the bound's run beside it, the estimate's figures are the same
    alone = simulate(llm, WORKLOAD, "b200", Parallel(tp=2), with_bound=False)
    both = simulate(llm, WORKLOAD, "b200", Parallel(tp=2))
    assert alone.bound is None and both.bound is not None
    assert alone.metrics == both.metrics and alone.per_request == both.per_request


def test_a_pool_that_cannot_hold_its_share_is_rejected_with_the_reason() -> None:
    from opcount.llm.plan.disagg import holds
    from opcount.llm.plan.search import in_system
    from opcount.llm.serve.scheduler import Engine
    from opcount.llm.serve.simulate import replay

    # one sequence at a time, each request one step of 0.1 s (its prompt gives its only token): 10 requests/s
    # served, against 50 arriving evenly at 100/s (49 gaps over 0.49 s)
    offered = Workload(requests=50, input_len=16, output_len=1, rate=100.0, arrivals="constant")
    engine = Engine(max_num_seqs=1, max_num_batched_tokens=16, block_size=16, num_blocks=100)
    sim = replay(offered, engine, lambda step: 0.1)
    assert holds(sim) == "serves 10 requests/s of its share of 100/s: its queue grows"
    kept = replay(replace(offered, rate=5.0), engine, lambda step: 0.1)  # 5/s offered: it keeps up
    assert holds(kept) == ""
    # the most held at once: at the last arrival (0.49 s) 50 have come and 4 left (at 0.1, 0.2, 0.3, 0.4 s);
    # at 5/s each leaves (0.1 s) before the next comes (0.2 s): a batch cap of 46 or more would cap nothing
    assert (in_system(sim), in_system(kept)) == (46, 1)
