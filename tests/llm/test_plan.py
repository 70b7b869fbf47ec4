"""opcount plan on a small Llama: the best configuration against a brute-force enumeration, each configuration
returned re-run through simulate, each phase traced once for every device, the KV transfer worked by hand, and
bad input refused naming its flag."""

from __future__ import annotations

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
from opcount.llm.serve.workload import Workload
from tests.fixtures.command import error_line

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
    ],
)
def test_bad_input_is_one_line_naming_the_flag(capsys: pytest.CaptureFixture[str], args: list[str], flag: str) -> None:
    assert flag in error_line(capsys, "plan", "llm:llama-3-8b", *FLAGS, "--rate", "1", *args)


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
