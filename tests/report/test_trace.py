"""The roofline as a Chrome trace-event timeline: JSON that Perfetto loads, one complete event per
operator call lasting its roofline time, laid end to end so they sum to the total, module events
enclosing their calls."""

from __future__ import annotations

import itertools
import json
import re

import pytest
import torch

from opcount.cli import main
from opcount.errors import OpcountTypeError
from opcount.memory import MemoryTrafficAnalysis
from opcount.report.trace import to_chrome_trace, to_chrome_trace_json
from opcount.roofline import roofline
from tests.fixtures.models import Nested
from tests.fixtures.report_models import tiny

TINY = "tests.fixtures.report_models:tiny"


@pytest.fixture(scope="module")
def report():  # type: ignore[no-untyped-def]
    model, x = tiny()
    return roofline(MemoryTrafficAnalysis(model, x), hardware="h100-sxm")


def _complete(trace: dict, cat: str) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == cat]


def test_one_event_per_operator_call_summing_to_the_roofline_total(report) -> None:  # type: ignore[no-untyped-def]
    trace = json.loads(to_chrome_trace_json(report))
    ops = _complete(trace, "operator")
    # tiny: conv, batch_norm, relu, adaptive_avg_pool2d, flatten (a view: no event), two linears
    assert [e["name"] for e in ops] == ["conv", "batch_norm", "relu", "adaptive_avg_pool2d", "linear", "linear"]
    assert len(ops) == len(report.layers)
    assert sum(e["dur"] for e in ops) == pytest.approx(report.total_time * 1e6, rel=1e-12)
    for before, after in itertools.pairwise(ops):  # end to end, in call order
        assert after["ts"] == pytest.approx(before["ts"] + before["dur"], rel=1e-12)
    assert ops[0]["ts"] == 0
    for e, t in zip(ops, report.layers, strict=True):  # one event per layer here (no split call)
        assert e["dur"] == pytest.approx(t.effective_time * 1e6, rel=1e-12)
        assert e["args"]["module"] == (t.layer.module or ".") and e["args"]["bound"] == t.limited_by


def test_module_events_enclose_their_calls(report) -> None:  # type: ignore[no-untyped-def]
    trace = to_chrome_trace(report)
    ops, modules = _complete(trace, "operator"), _complete(trace, "module")
    by_name = {e["name"]: e for e in modules}
    assert set(by_name) == {".", "stem", "stem.0", "stem.1", "stem.2", "pool", "blocks.0", "blocks.1"}
    root = by_name["."]
    assert root["ts"] == 0 and root["dur"] == pytest.approx(report.total_time * 1e6, rel=1e-12)
    assert by_name["stem"]["dur"] == pytest.approx(report.module("stem").time * 1e6, rel=1e-12)
    events = ops + modules
    for e in events:  # every event lies inside every module event it overlaps: a valid nesting
        for m in modules:
            a, b = (e["ts"], e["ts"] + e["dur"]), (m["ts"], m["ts"] + m["dur"])
            overlap = min(a[1], b[1]) - max(a[0], b[0])
            if e is not m and overlap > 1e-12:
                inside = b[0] <= a[0] + 1e-12 and a[1] <= b[1] + 1e-12
                outside = a[0] <= b[0] + 1e-12 and b[1] <= a[1] + 1e-12
                assert inside or outside, (e["name"], m["name"])
    for e in ops:  # each call inside its own module's event
        m = by_name[e["args"]["module"]]
        assert m["ts"] <= e["ts"] + 1e-12 and e["ts"] + e["dur"] <= m["ts"] + m["dur"] + 1e-12
    assert all(e["pid"] == 1 and e["tid"] == 1 for e in events)


def test_the_command_writes_a_trace_by_the_file_ending(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "nested.trace.json"
    assert main(["tests.fixtures.models:nested", "--hardware", "t4", "-q", "-o", str(out)]) == 0
    trace = json.loads(out.read_text())
    model, x = Nested().eval(), torch.randn(4, 10)
    with torch.no_grad():
        expected = roofline(MemoryTrafficAnalysis(model, x), hardware="t4")
    ops = _complete(trace, "operator")
    assert [e["name"] for e in ops] == ["linear"] * 3
    assert sum(e["dur"] for e in ops) == pytest.approx(expected.total_time * 1e6, rel=1e-9)
    assert trace["otherData"]["hardware"] == "t4"


def test_the_trace_needs_the_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([TINY, "--format", "chrome-trace"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--hardware" in err and "Traceback" not in err


def test_a_wrong_argument_is_named(report) -> None:  # type: ignore[no-untyped-def]
    # each failed with an AttributeError about 'hardware' (or put a number where Perfetto wants a name)
    model, x = tiny()
    for value, name, named in (
        (None, None, "report must be a RooflineReport (opcount.roofline), got NoneType"),
        (MemoryTrafficAnalysis(model, x), None, "report must be a RooflineReport (opcount.roofline), got Memory"),
        (report, 5, "name must be a str or None, got int"),
    ):
        with pytest.raises(OpcountTypeError, match=re.escape(named)):
            to_chrome_trace(value, name=name)


def test_the_trace_refuses_sparsity(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    # it was accepted and laid out the dense times: a 2:4 timeline identical to the dense one
    path = tmp_path / "t.trace.json"
    assert main([TINY, "--hardware", "h100-sxm", "--sparsity", "2:4", "-o", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--sparsity does not apply to --format chrome-trace" in err
    assert not path.exists()
