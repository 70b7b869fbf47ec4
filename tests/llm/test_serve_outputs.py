"""What opcount simulate reports, on a toy run worked by hand: goodput, the summary in seconds, the CSV a request,
the schedule's trace, the latency chart and the progress callback. The step cost: ``0.1 + 0.01 d + 0.001 sum n``
seconds for ``d`` decode sequences and prompt chunks of ``n_i`` tokens (as tests/llm/test_serve_scheduler.py).

The run: two requests of 100 + 3 tokens sent at 0 and 0.1 s. Step 1 (0 -> 0.2): R0's prompt. Step 2 (-> 0.41):
R0 decodes, R1's prompt. Step 3 (-> 0.53): both decode, R0 ends. Step 4 (-> 0.64): R1 ends. R0's tokens at
0.2, 0.41, 0.53 (TTFT 0.2, TPOT 0.33 / 2 = 0.165, gaps 0.21 and 0.12, E2E 0.53); R1's at 0.41, 0.53, 0.64 (TTFT
0.31, TPOT 0.115, gaps 0.12 and 0.11, E2E 0.54); the run lasts 0.64 s."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import pytest

from opcount.llm.serve import outputs, timeline
from opcount.llm.serve.plot import save_latency_chart, windows
from opcount.llm.serve.scheduler import Engine, run
from opcount.llm.serve.simulate import Simulation, replay
from opcount.llm.serve.slo import parse
from opcount.llm.serve.step_cost import Step
from opcount.llm.serve.workload import Workload

DURATION = 0.64


def cost(step: Step) -> float:
    return 0.1 + 0.01 * step.decode + 0.001 * sum(n for _, n in step.chunks)


ENGINE = Engine(max_num_seqs=256, max_num_batched_tokens=8192, block_size=16, num_blocks=10_000)
TWO = Workload(requests=2, input_len=100, output_len=3, rate=10.0, arrivals="constant")


def toy(*targets: tuple[str, str], devices: int = 1, **kwargs: object) -> Simulation:
    slos = [parse(metric, text) for metric, text in targets]
    return replay(TWO, ENGINE, cost, devices=devices, slos=slos, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("targets", "good"),
    [
        ([("ttft", "250ms")], 1),  # R0's 0.2 s, not R1's 0.31
        ([("tpot", "200ms")], 2),  # 0.165 and 0.115
        ([("ttft", "250ms"), ("tpot", "150ms")], 0),  # R0 misses TPOT, R1 TTFT
        ([("e2el", "535ms")], 1),  # 0.53 and 0.54
        ([("itl", "150ms")], 1),  # R0's longest gap 0.21, R1's 0.12
        ([("ttft", "p99:1s"), ("tpot", "1s")], 2),
    ],
)
def test_goodput_counts_the_requests_meeting_every_target(targets: list[tuple[str, str]], good: int) -> None:
    sim = toy(*targets)
    assert sim.goodput is not None
    assert sim.goodput.good == good and sim.goodput.completed == 2
    assert sim.goodput.requests_per_s == pytest.approx(good / DURATION)
    assert sim.metrics["request_goodput"] == pytest.approx(good / DURATION)  # vLLM's name beside its metrics


def test_a_percentile_target_is_judged_against_the_runs_percentile() -> None:
    sim = toy(("ttft", "250ms"), ("ttft", "p90:300ms"), ("itl", "p50:120ms"))
    assert sim.goodput is not None
    checks = sim.goodput.checks
    assert checks[0].value == pytest.approx(0.255) and not checks[0].met  # the median of 0.2 and 0.31
    assert checks[1].value == pytest.approx(0.2 + 0.9 * 0.11) and checks[1].met  # numpy's linear percentile
    assert checks[2].value == pytest.approx(0.12) and checks[2].met  # the median gap of 0.21, 0.12, 0.12, 0.11
    assert not sim.goodput.met
    assert sim.as_dict()["goodput"]["targets"][1] == {
        "metric": "ttft", "percentile": 90.0, "target": 0.3, "value": pytest.approx(0.299), "met": True,
    }  # fmt: skip


def test_no_target_no_goodput() -> None:
    sim = toy()
    assert sim.goodput is None and "request_goodput" not in sim.metrics and sim.as_dict()["goodput"] is None


def test_the_summary_is_in_seconds_beside_vllms_milliseconds() -> None:
    sim = toy(devices=2)
    d, m = sim.as_dict(), sim.metrics
    assert d["requests"] == 2 and d["preemptions"] == 0
    assert d["ttft"] == pytest.approx({"mean": 0.255, "p50": 0.255, "p90": 0.299, "p99": 0.2 + 0.99 * 0.11})
    assert d["e2e"]["mean"] == pytest.approx(0.535)
    for name, vllm in (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el")):
        assert set(d[name]) == {"mean", "p50", "p90", "p99"}
        assert d[name]["p99"] == pytest.approx(m[f"p99_{vllm}_ms"] / 1000)
    t = d["throughput"]
    assert t["requests_per_s"] == pytest.approx(2 / DURATION)
    assert t["input_tokens_per_s"] == pytest.approx(200 / DURATION)
    assert t["output_tokens_per_s"] == pytest.approx(6 / DURATION)
    assert t["per_device"]["output_tokens_per_s"] == pytest.approx(3 / DURATION)
    assert set(d["kv_utilization"]) == {"mean", "peak"}
    assert {"workload", "engine", "metrics", "bound"} <= set(d)  # the keys that were there stay


def test_the_per_request_csv_has_a_row_a_request() -> None:
    rows = list(csv.DictReader(io.StringIO(outputs.per_request_csv(toy().per_request))))
    assert len(rows) == 2
    assert list(rows[0]) == list(outputs.PER_REQUEST_COLUMNS)
    assert [float(r["ttft_s"]) for r in rows] == pytest.approx([0.2, 0.31])
    assert [float(r["arrival_s"]) for r in rows] == pytest.approx([0.0, 0.1])
    assert [(r["index"], r["prompt_tokens"], r["output_tokens"], r["preemptions"]) for r in rows] == [
        ("0", "100", "3", "0"),
        ("1", "100", "3", "0"),
    ]


def test_the_summary_csv_is_one_row() -> None:
    sim = toy()
    header, row = csv.reader(io.StringIO(outputs.summary_csv(TWO.as_dict(), sim.metrics)))
    found = dict(zip(header, row, strict=True))
    assert found["requests"] == "2" and found["concurrency"] == ""
    assert float(found["p50_ttft_ms"]) == pytest.approx(255.0)


def test_the_trace_has_an_event_a_step_and_each_requests_spans() -> None:
    schedule = timeline.Schedule()
    sim = toy(on_step=schedule)
    trace = timeline.chrome_trace(schedule, sim.per_request)
    steps = [e for e in trace["traceEvents"] if e.get("cat") == "step"]
    assert len(steps) == sim.metrics["steps"] == 4
    assert [(e["args"]["decode"], e["args"]["prefill_tokens"]) for e in steps] == [(0, 100), (1, 100), (2, 0), (1, 0)]
    assert sum(e["dur"] for e in steps) == pytest.approx(DURATION * 1e6)  # microseconds, end to end
    spans = [e for e in trace["traceEvents"] if e.get("cat") == "request"]
    assert [(e["tid"], e["name"]) for e in spans] == [
        (1, "prefill"), (1, "decode"), (2, "queued"), (2, "prefill"), (2, "decode")
    ]  # fmt: skip
    assert [e["ts"] for e in spans] == pytest.approx([0.0, 0.2e6, 0.1e6, 0.2e6, 0.41e6])
    assert [e["ts"] + e["dur"] for e in spans] == pytest.approx([0.2e6, 0.53e6, 0.2e6, 0.41e6, 0.64e6])
    assert trace["otherData"]["truncated"] is False


def test_the_trace_keeps_its_first_steps_only() -> None:
    schedule = timeline.Schedule(limit=2)
    sim = toy(on_step=schedule)
    trace = timeline.chrome_trace(schedule, sim.per_request)
    assert sum(e.get("cat") == "step" for e in trace["traceEvents"]) == 2
    assert trace["otherData"] | {} == {"steps": 4, "steps_kept": 2, "truncated": True, "end_s": pytest.approx(0.41)}
    r1 = [e["name"] for e in trace["traceEvents"] if e.get("cat") == "request" and e["tid"] == 2]
    assert r1 == ["queued", "prefill"]  # its decode began at the last kept step's end


def test_progress_is_reported_every_n_steps() -> None:
    calls: list[tuple[int, int]] = []
    run(TWO, ENGINE, cost, progress=lambda done, total: calls.append((done, total)), progress_every=1)
    assert calls == [(0, 2), (0, 2), (1, 2), (2, 2)]  # R0 ends in step 3, R1 in step 4
    calls.clear()
    run(TWO, ENGINE, cost, progress=lambda done, total: calls.append((done, total)), progress_every=2)
    assert calls == [(0, 2), (2, 2)]


def test_windows_take_percentiles_over_the_last_arrivals() -> None:
    times, found = windows([3.0, 0.0, 1.0, 2.0], [4.0, 1.0, 2.0, 3.0], 2)
    assert list(times) == [1.0, 2.0, 3.0]
    assert list(found[50]) == pytest.approx([1.5, 2.5, 3.5])
    assert list(found[90]) == pytest.approx([1.9, 2.9, 3.9])


def test_the_latency_chart_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = save_latency_chart(toy().per_request, tmp_path / "latency.png", title="toy")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_opcount_llm_simulate_is_the_simulation_and_loads_on_first_use() -> None:
    import opcount.llm
    from opcount.llm.serve.simulate import simulate

    assert opcount.llm.simulate is simulate
    code = "import sys, opcount.llm; assert not [m for m in sys.modules if m.startswith('opcount.llm.')], sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        opcount.llm.nothing  # noqa: B018
