"""What a simulation reports beside ``vllm bench serve``'s names: goodput under latency targets (:func:`goodput`,
as ``vllm bench serve --goodput`` counts it), the summary in seconds that issue 38 names (:func:`summary`:
``requests``, ``ttft``, ``tpot``, ``itl``, ``e2e``, ``throughput``, ``goodput``, ``preemptions``,
``kv_utilization``), and the CSV files: one row a request (:func:`per_request_csv`) or the run's one row
(:func:`summary_csv`). Pure: a run's figures in, plain data or text out."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import scheduler
from .slo import Slo

STATISTICS = (("mean", "mean"), ("p50", "p50"), ("p90", "p90"), ("p99", "p99"))  # (summary's key, vLLM's prefix)
SUMMARY_METRICS = (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "itl"), ("e2e", "e2el"))  # (summary's, vLLM's)
PER_REQUEST_COLUMNS = (
    "index", "arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "e2el_s", "preemptions",
)  # fmt: skip


@dataclass(frozen=True)
class Check:
    """A percentile target against the run: the metric's percentile over the run (seconds), and whether it met it."""

    slo: Slo
    value: float

    @property
    def met(self) -> bool:
        return self.slo.met(self.value)

    def as_dict(self) -> dict[str, Any]:
        s = self.slo
        return {
            "metric": s.metric,
            "percentile": s.percentile,
            "target": s.seconds,
            "value": self.value,
            "met": self.met,
        }


@dataclass(frozen=True)
class Goodput:
    """Of ``completed`` requests, the ``good`` ones met every target; ``requests_per_s`` of them over the run
    (vLLM's ``request_goodput``); each target's percentile judged in ``checks``."""

    good: int
    completed: int
    requests_per_s: float
    checks: tuple[Check, ...]

    @property
    def met(self) -> bool:
        return all(c.met for c in self.checks)

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests_per_s": self.requests_per_s, "good_requests": self.good,
            "share": self.good / self.completed if self.completed else 0.0,
            "met": self.met, "targets": [c.as_dict() for c in self.checks],
        }  # fmt: skip


def _latencies(r: scheduler.Request) -> dict[str, float]:
    """One request's latencies in seconds; TPOT 0 and no gap for an answer of one token (as vLLM feeds them to
    its goodput); ``itl`` the longest gap between two of its tokens."""
    times = np.frombuffer(r.token_times)
    gaps = np.diff(times)
    return {
        "ttft": times[0] - r.arrival, "e2el": times[-1] - r.arrival,
        "tpot": (times[-1] - times[0]) / (r.output - 1) if r.output > 1 else 0.0,
        "itl": float(gaps.max()) if gaps.size else 0.0,
    }  # fmt: skip


def goodput(run: scheduler.Run, duration: float, slos: Sequence[Slo]) -> Goodput:
    """The requests a second meeting every target, as ``vllm bench serve --goodput`` counts them
    (``calculate_metrics`` in vllm/benchmarks/serve.py: a request is good when each of its TTFT, TPOT and E2EL
    is at most its target; goodput is the good requests over the run's duration). A target on ITL, which vLLM's
    ``--goodput`` does not take, holds a request to every gap between its tokens. Each target's percentile
    (p50 unless written ``p90:2s``) over the run is judged beside it: TPOT over the requests of more than one
    token, ITL over every gap, as the percentiles of the metrics are."""
    per_request = [_latencies(r) for r in run.requests]
    good = sum(all(s.met(row[s.metric]) for s in slos) for row in per_request)
    checks = []
    for s in slos:
        if s.metric == "itl":
            # one gap a step that brought tokens, as the metrics' ITL (a verify's tokens stream as one chunk)
            values = np.concatenate([np.diff(np.unique(np.frombuffer(r.token_times))) for r in run.requests])
        else:
            kept = (row for row, r in zip(per_request, run.requests, strict=True) if s.metric != "tpot" or r.output > 1)
            values = np.asarray([row[s.metric] for row in kept])
        checks.append(Check(s, float(np.percentile(values, s.percentile)) if values.size else 0.0))
    return Goodput(good, len(run.requests), good / duration, tuple(checks))


def summary(metrics: Mapping[str, float], devices: int, found: Goodput | None) -> dict[str, Any]:
    """Issue 38's block: the count of requests, each latency's mean and percentiles in seconds (vLLM's
    milliseconds over 1000), throughput (and per device), goodput (None without a target), preemptions and
    the KV cache's use (the mean share of its blocks in use over the run, and the peak)."""
    m = metrics
    out: dict[str, Any] = {"requests": int(m["completed"])}
    for name, vllm in SUMMARY_METRICS:
        out[name] = {key: m[f"{prefix}_{vllm}_ms"] / 1e3 for key, prefix in STATISTICS}
    rates = {
        "requests_per_s": m["request_throughput"],
        "input_tokens_per_s": m["total_input_tokens"] / m["duration"],
        "output_tokens_per_s": m["output_throughput"],
        "total_tokens_per_s": m["total_token_throughput"],
    }
    out["throughput"] = rates | {"per_device": {k: v / devices for k, v in rates.items()}}
    out["goodput"] = None if found is None else found.as_dict()
    out["preemptions"] = int(m["preemptions"])
    out["kv_utilization"] = {"mean": m["kv_utilization"], "peak": m["peak_kv_utilization"]}
    return out


def per_request_csv(rows: Sequence[Mapping[str, float]]) -> str:
    """One row a request, in the order they were sent: :data:`PER_REQUEST_COLUMNS`, times in seconds from the
    run's start (the first arrival)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(PER_REQUEST_COLUMNS)
    for row in rows:
        writer.writerow([
            int(row["index"]), row["arrival"], int(row["prompt"]), int(row["output"]), row["ttft"], row["tpot"],
            row["e2el"], int(row["preempted"]),
        ])  # fmt: skip
    return buffer.getvalue()


def summary_csv(workload: Mapping[str, object], metrics: Mapping[str, float]) -> str:
    """The run as one CSV row under a header: the workload's settings, then the metrics under vLLM's names
    (milliseconds for latencies): rows of several runs, each its own file, stack into one table."""
    fields = {**workload, **metrics}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(fields)
    writer.writerow(["" if v is None else v for v in fields.values()])
    return buffer.getvalue().rstrip("\n")
