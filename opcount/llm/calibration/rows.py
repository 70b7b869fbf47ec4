"""Serving measurements as rows (:class:`Row`): docs/measured/serving_2026.csv's columns, read from a CSV of
them or from the JSON ``vllm bench serve --save-result`` writes, each row checked, each failure one line naming
the file and its row.

A row's figure is kept as seconds of something, so that a smaller figure is always a faster engine and the
bound is always at most the measurement: a latency in seconds (``tpot_ms``, ``itl_ms``, ``ttft_ms``,
``e2el_ms``), a rate as its inverse (``out_tok_s`` as seconds per output token, ``req_s`` as seconds per
request, the per-GPU rates per token per GPU).
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...errors import OpcountValueError
from ...files.read import parse_json, read_text
from ..models.limits import MAX_BATCH, MAX_POSITIONS

COLUMNS = (
    "case", "source", "engine", "version", "model", "hardware", "devices", "tp", "ep", "dp_attention", "weight",
    "act", "kv", "concurrency", "rate", "requests", "input", "output", "lengths", "max_model_len", "kv_tokens",
    "metric", "stat", "measured", "note",
)  # fmt: skip
LATENCIES = ("tpot_ms", "itl_ms", "ttft_ms", "e2el_ms")
RATES = ("out_tok_s_per_gpu", "total_tok_s_per_gpu", "out_tok_s", "req_s")
METRICS = (*LATENCIES, *RATES)
STATS = ("mean", "p50", "p90", "p99", "total")
# the engines' names as measurements write them -> a profile's
ENGINE_NAMES = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trtllm", "trtllm": "trtllm"}
# the engines' architecture changes, below which a release is another engine: vLLM's V1 engine is its default
# from 0.8.0 (the v0.8.0 release notes), TensorRT-LLM's PyTorch backend from 1.0 (the v1.0 notes)
OLDER_LINES = {"vllm": ((0, 8), "V0"), "trtllm": ((1, 0), "TensorRT engines")}


@dataclass(frozen=True)
class Row:
    """One measurement: what ran (engine, model, hardware and layout, precision), under which workload
    (``concurrency`` clients in a closed loop, or requests at ``rate`` a second, ``inf``: all at once), what was
    measured (``metric``, ``stat``, ``measured`` in the metric's unit) and the text of the row as read."""

    case: str
    engine: str  # a profile's name: vllm, sglang, trtllm
    model: str
    hardware: str
    devices: int
    tp: int
    ep: int
    dp: int
    weight: str
    act: str
    kv: str
    concurrency: int | None
    rate: float
    requests: int
    input: float
    output: float
    max_model_len: int | None  # the server's --max-model-len; None: the model's context
    kv_tokens: int | None  # the KV cache a replica holds, in tokens, as the engine logged it; None: not stated
    metric: str
    stat: str
    measured: float
    text: Mapping[str, str]

    @property
    def seconds(self) -> float:
        """The measurement as seconds of something (the module's docstring)."""
        return seconds(self.metric, self.measured)

    @property
    def lockstep(self) -> bool:
        """Requests of one fixed length (``lengths`` ``fixed`` or ``random ratio 0``: ``vllm bench serve
        --random-range-ratio 0``, trtllm-bench's synthetic sets): those that start together end in the same
        step, so the prompts keep arriving in waves, each round of a closed loop and each batch of slots all at
        once."""
        lengths = " ".join(self.text.get("lengths", "").lower().split())
        return lengths == "fixed" or re.fullmatch(r"random ratio 0(\.0*)?", lengths) is not None

    @property
    def release(self) -> tuple[int, int] | None:
        """The engine's major and minor version as the row's ``version`` starts (``v0.11.0``, ``0.7.3.dev138``,
        ``1.0 (...)``); None where it names none (``NIM 1.8.0``, ``not stated``)."""
        found = re.match(r"v?(\d+)\.(\d+)", self.text.get("version", ""))
        return None if found is None else (int(found[1]), int(found[2]))

    @property
    def line(self) -> str:
        """The row's engine, and its older architecture where its version names one (:data:`OLDER_LINES`):
        ``vllm V0`` for vLLM 0.7, ``trtllm TensorRT engines`` for TensorRT-LLM 0.17."""
        if self.engine in OLDER_LINES and self.release is not None:
            since, older = OLDER_LINES[self.engine]
            if self.release < since:
                return f"{self.engine} {older}"
        return self.engine


def seconds(metric: str, value: float) -> float:
    """``value`` of ``metric`` as seconds (a latency) or seconds per unit (a rate's inverse)."""
    return value / 1e3 if metric in LATENCIES else 1 / value


def value(metric: str, secs: float) -> float:
    """The inverse of :func:`seconds`: seconds back in the metric's own unit."""
    return secs * 1e3 if metric in LATENCIES else 1 / secs


def _number(text: str, what: str, whole: bool = False, low: float = 0.0) -> Any:
    try:
        number = int(text) if whole else float(text)
    except ValueError:
        raise OpcountValueError(f"{what}: expected a {'whole ' if whole else ''}number, got {text!r}") from None
    # a rate may be inf (all at once); NaN is no number of anything, a rate's included
    if math.isnan(number) or not (math.isfinite(number) or what.endswith("rate")) or number < low:
        raise OpcountValueError(f"{what}: expected a number from {low:g}, got {text!r}")
    return number


def _tokens(text: str, what: str, most: int) -> int | None:
    """A column of tokens (``max_model_len``, ``kv_tokens``): empty (not stated) or a whole number up to ``most``."""
    if not text:
        return None
    tokens: int = _number(text, what, True, 1)
    if tokens > most:
        raise OpcountValueError(f"{what}: at most {most} tokens, got {text}")
    return tokens


def row(data: Mapping[str, str]) -> Row:
    """One row of the CSV's columns, checked (an error names the column)."""
    missing = [c for c in ("case", "engine", "model", "hardware", "metric", "measured") if not data.get(c)]
    if missing:
        raise OpcountValueError(f"missing {', '.join(missing)}")
    engine = ENGINE_NAMES.get(data["engine"].strip().lower())
    if engine is None:
        raise OpcountValueError(f"engine {data['engine']!r}: expected vLLM, SGLang or TensorRT-LLM")
    if data["metric"] not in METRICS:
        raise OpcountValueError(f"metric {data['metric']!r}: expected one of {', '.join(METRICS)}")
    stat = data.get("stat") or "mean"
    if stat not in STATS:
        raise OpcountValueError(f"stat {stat!r}: expected one of {', '.join(STATS)}")
    tp = _number(data.get("tp") or "1", "tp", True, 1)
    concurrency = _number(data["concurrency"], "concurrency", True, 1) if data.get("concurrency") else None
    rate = _number(data.get("rate") or "inf", "rate", low=0.0)
    if concurrency is None and rate == 0:
        raise OpcountValueError("a workload needs a concurrency or a rate above 0")
    return Row(
        case=data["case"],
        engine=engine,
        model=data["model"],
        hardware=data["hardware"],
        devices=_number(data.get("devices") or str(tp), "devices", True, 1),
        tp=tp,
        ep=_number(data.get("ep") or "1", "ep", True, 1),
        dp=_number(data.get("dp_attention") or "1", "dp_attention", True, 1),
        weight=data.get("weight") or "bfloat16",
        act=data.get("act") or "bfloat16",
        kv=data.get("kv") or "",
        concurrency=concurrency,
        rate=rate,
        requests=_number(data.get("requests") or str(concurrency or 1), "requests", True, 1),
        input=_number(data.get("input") or "", "input", low=1.0),
        output=_number(data.get("output") or "", "output", low=1.0),
        max_model_len=_tokens(data.get("max_model_len") or "", "max_model_len", MAX_POSITIONS),
        kv_tokens=_tokens(data.get("kv_tokens") or "", "kv_tokens", MAX_POSITIONS * MAX_BATCH),  # a batch of contexts
        metric=data["metric"],
        stat=stat,
        measured=_number(data["measured"], "measured", low=1e-12),
        text=dict(data),
    )


def load(path: str | Path) -> list[Row]:
    """The rows of a CSV in :data:`COLUMNS` (``note`` and ``source`` may be empty), or of ``vllm bench serve``'s
    result JSON (:func:`from_bench`); a bad row is one line, ``FILE:ROW: what``."""
    text = read_text(path, "a measurements file")
    if str(path).endswith(".json"):
        return from_bench(parse_json(text, path), str(path))
    reader = csv.DictReader(io.StringIO(text))
    needed = {"case", "engine", "model", "hardware", "metric", "measured", "input", "output"}
    if reader.fieldnames is None or not needed <= set(reader.fieldnames):
        lacking = sorted(needed - set(reader.fieldnames or ()))
        raise OpcountValueError(f"{path}:1: the header lacks {', '.join(lacking)} (columns: {', '.join(COLUMNS)})")
    rows = []
    for number, data in enumerate(reader, start=2):
        try:
            rows.append(row({k: (v or "").strip() for k, v in data.items() if k is not None}))
        except OpcountValueError as e:
            raise OpcountValueError(f"{path}:{number}: {e}") from None
    if not rows:
        raise OpcountValueError(f"{path}: no rows")
    return rows


# vllm bench serve's result keys (vllm/benchmarks/serve.py, its saved JSON) -> a metric and a stat
_BENCH = {
    "mean_tpot_ms": ("tpot_ms", "mean"),
    "median_tpot_ms": ("tpot_ms", "p50"),
    "mean_itl_ms": ("itl_ms", "mean"),
    "mean_ttft_ms": ("ttft_ms", "mean"),
    "median_ttft_ms": ("ttft_ms", "p50"),
    "mean_e2el_ms": ("e2el_ms", "mean"),
    "output_throughput": ("out_tok_s", "total"),
    "request_throughput": ("req_s", "total"),
}


def from_bench(data: Any, path: str) -> list[Row]:
    """The figures of one ``vllm bench serve`` result (``--save-result``), with the run's own settings:
    ``model``, ``hardware``, ``engine`` and the layout (``tp``...) are not in vLLM's JSON and must be added
    to it as keys of the same names (the CSV's columns), and may be ``version`` (the engine's), ``lengths``
    (``fixed`` for ``--random-range-ratio 0``: the prompts then arrive in waves), ``max_model_len`` (the
    server's ``--max-model-len``) and ``kv_tokens`` (the KV cache in tokens as the server logged it: vLLM's "GPU
    KV cache size"); the lengths are the run's means."""
    where = f"{path}:1"
    if not isinstance(data, Mapping):
        raise OpcountValueError(f"{where}: expected vllm bench serve's result object")
    completed = data.get("completed")
    if not isinstance(completed, int) or completed < 1:
        raise OpcountValueError(f"{where}: 'completed' must be the requests the run finished")
    for key in ("total_input_tokens", "total_output_tokens", "model", "hardware"):
        if key not in data:
            raise OpcountValueError(f"{where}: lacks {key!r} (model and hardware are added to vLLM's JSON by hand)")
    concurrency = data.get("max_concurrency")
    rate = data.get("request_rate", "inf")
    base = {
        "engine": str(data.get("engine", "vllm")), "model": str(data["model"]), "hardware": str(data["hardware"]),
        "tp": str(data.get("tp", 1)), "ep": str(data.get("ep", 1)), "dp_attention": str(data.get("dp_attention", 1)),
        "devices": str(data.get("devices", data.get("tp", 1))), "weight": str(data.get("weight", "bfloat16")),
        "act": str(data.get("act", "bfloat16")), "kv": str(data.get("kv", "")),
        "concurrency": "" if concurrency is None else str(concurrency), "rate": str(rate),
        "requests": str(completed), "input": str(data["total_input_tokens"] / completed),
        "output": str(data["total_output_tokens"] / completed), "source": path,
        "lengths": str(data.get("lengths", "")), "version": str(data.get("version", "")),
        "max_model_len": str(data.get("max_model_len", "")), "kv_tokens": str(data.get("kv_tokens", "")),
    }  # fmt: skip
    rows = []
    for key, (metric, stat) in _BENCH.items():
        if isinstance(data.get(key), (int, float)) and data[key] > 0:
            try:
                rows.append(row(base | {"case": f"{Path(path).stem}-{key}", "metric": metric, "stat": stat,
                                        "measured": str(data[key])}))  # fmt: skip
            except OpcountValueError as e:
                raise OpcountValueError(f"{where}: {e}") from None
    if not rows:
        raise OpcountValueError(f"{where}: no figures ({', '.join(_BENCH)})")
    return rows
