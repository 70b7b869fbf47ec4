"""A latency target's text: ``[pNN:]DURATION`` with its unit."""

import pytest

from opcount.errors import OpcountValueError
from opcount.llm.serve.slo import Slo, parse


def test_seconds_milliseconds_and_a_percentile() -> None:
    assert parse("ttft", "2s") == Slo("ttft", 2.0, 50.0)
    assert parse("tpot", "50ms") == Slo("tpot", 0.05, 50.0)
    assert parse("ttft", "p90:2s") == Slo("ttft", 2.0, 90.0)
    assert parse("tpot", "p99.9:.5s").percentile == 99.9


def test_keys_are_vllm_bench_names() -> None:
    assert parse("ttft", "2s").key == "median_ttft_ms"
    assert parse("tpot", "p90:20ms").key == "p90_tpot_ms"


@pytest.mark.parametrize("text", ["2", "2 sec", "p90:", "p0:2s", "p101:2s", "-1s", "0s", "p90-2s", "100000s"])
def test_bad_targets_are_refused(text: str) -> None:
    with pytest.raises(OpcountValueError):
        parse("ttft", text)


def test_unknown_metric() -> None:
    with pytest.raises(OpcountValueError, match="unknown latency"):
        Slo("latency", 1.0)
