"""Request traces as people publish them, read into a workload's requests (:class:`.workload.Sent`):

- **Mooncake JSONL** (``.jsonl``; the FAST'25 Mooncake traces, replayed by NVIDIA's AIPerf and Dynamo): one JSON
  object a line, ``timestamp`` (milliseconds since the first request), ``input_length``, ``output_length`` and
  ``hash_ids`` (one id a block of 512 prompt tokens; two prompts with the same first ids share those blocks);
- **CSV** (``.csv``) with a header: ``arrival_s,input_tokens,output_tokens`` (seconds), the Azure LLM inference
  trace's ``TIMESTAMP,ContextTokens,GeneratedTokens`` (a date and time), or BurstGPT's ``Timestamp,...,Request
  tokens,Response tokens,...`` (seconds);
- **``vllm bench serve`` results** (``.json``; written with ``--save-result --save-detailed``): its
  ``input_lens`` and ``output_lens``, one a request, and no arrival times: its ``max_concurrency`` or its finite
  ``request_rate`` sends them, unless a rate or a concurrency is given.

Every row is checked: a row that is not one, a length that is not a whole number from 1, a time that is not
a finite number from 0 (or goes back in a JSONL trace) is one line naming the file and the row.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ...errors import OpcountValueError
from ...files.read import parse_json, read_text
from .workload import MAX_REQUESTS, MAX_TOKENS, Sent

MOONCAKE_BLOCK = 512  # tokens a Mooncake hash id covers (the traces' README; AIPerf's default)
MAX_TRACE_BYTES = 512 * 2**20  # a trace of MAX_REQUESTS short rows, not a file of any size
MAX_HASHES = 1 << 20  # hash ids of one row: a prompt of 512 Mi tokens
CSV_COLUMNS = {  # (arrival, prompt, answer) headers, and how the arrival reads
    "plain": ("arrival_s", "input_tokens", "output_tokens"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}


@dataclass(frozen=True)
class Trace:
    """A trace's requests, the tokens each of its hashes covers (0: none), and the rate or concurrency a
    benchmark result says it ran at (None: its rows' own times, or none)."""

    rows: tuple[Sent, ...]
    hash_block: int = 0
    rate: float | None = None
    concurrency: int | None = None


def read(path: str | os.PathLike[str], hash_block: int = MOONCAKE_BLOCK) -> Trace:
    """The trace in ``path``, its format by its name's extension (``.jsonl``, ``.csv``, ``.json``)."""
    name = os.fspath(path)
    kind = os.path.splitext(name)[1].lower()
    if kind not in (".jsonl", ".csv", ".json"):
        raise OpcountValueError(f"{name}: a trace is .jsonl (Mooncake), .csv or .json (vllm bench serve results)")
    text = read_text(name, "a trace", MAX_TRACE_BYTES)
    trace = (
        _mooncake(name, text, hash_block)
        if kind == ".jsonl"
        else _csv(name, text)
        if kind == ".csv"
        else _bench(name, text)
    )
    if not trace.rows:
        raise OpcountValueError(f"{name}: the trace has no request")
    return trace


def _tokens(name: str, row: int, what: str, value: Any) -> int:
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise OpcountValueError(f"{name}:{row}: {what} {value!r} is not a whole number") from None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_TOKENS:
        raise OpcountValueError(f"{name}:{row}: {what} must be a whole number of tokens from 1, got {value!r}")
    return value


def _seconds(name: str, row: int, what: str, value: Any) -> float:
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise OpcountValueError(f"{name}:{row}: {what} {value!r} is not a number") from None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
        raise OpcountValueError(f"{name}:{row}: {what} must be a finite number from 0, got {value!r}")
    return float(value)


def _count(name: str, rows: int) -> None:
    if rows > MAX_REQUESTS:
        raise OpcountValueError(f"{name}: more than {MAX_REQUESTS:,} requests (the limit)")


def _mooncake(name: str, text: str, hash_block: int) -> Trace:
    rows: list[Sent] = []
    last = 0.0
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        _count(name, len(rows) + 1)
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            raise OpcountValueError(f"{name}:{number}: not a JSON object") from None
        if not isinstance(item, dict):
            raise OpcountValueError(f"{name}:{number}: not a JSON object")
        unknown = sorted(set(item) - {"timestamp", "input_length", "output_length", "hash_ids"})
        if unknown:
            raise OpcountValueError(
                f"{name}:{number}: unknown field {unknown[0]!r} (a Mooncake trace has timestamp, input_length, output_length, hash_ids)"
            )
        for field in ("timestamp", "input_length", "output_length"):
            if field not in item:
                raise OpcountValueError(f"{name}:{number}: no {field}")
        at = _seconds(name, number, "timestamp", item["timestamp"]) / 1000.0
        if at < last:
            raise OpcountValueError(f"{name}:{number}: timestamp {item['timestamp']} is before the row above's")
        last = at
        hashes = item.get("hash_ids", [])
        if (
            not isinstance(hashes, list)
            or len(hashes) > MAX_HASHES
            or not all(isinstance(h, int) and not isinstance(h, bool) for h in hashes)
        ):
            raise OpcountValueError(
                f"{name}:{number}: hash_ids must be a list of whole numbers (at most {MAX_HASHES:,})"
            )
        prompt = _tokens(name, number, "input_length", item["input_length"])
        output = _tokens(name, number, "output_length", item["output_length"])
        rows.append(Sent(at, prompt, output, tuple(hashes)))
    return Trace(tuple(rows), hash_block if any(s.hashes for s in rows) else 0)


def _csv(name: str, text: str) -> Trace:
    try:
        table = list(csv.reader(io.StringIO(text)))
    except csv.Error as e:
        raise OpcountValueError(f"{name}: not a CSV file ({e})") from None
    header = [h.strip() for h in (table[0] if table else [])]
    kind = next((k for k, columns in CSV_COLUMNS.items() if all(c in header for c in columns)), None)
    if kind is None:
        known = "; ".join(",".join(c) for c in CSV_COLUMNS.values())
        raise OpcountValueError(f"{name}:1: unknown header {','.join(header)!r}; a trace's CSV has the columns {known}")
    columns = CSV_COLUMNS[kind]
    at, inp, out = (header.index(c) for c in columns)
    rows: list[Sent] = []
    start: datetime | None = None
    for number, cells in enumerate(table[1:], 2):
        if not any(c.strip() for c in cells):
            continue
        _count(name, len(rows) + 1)
        if len(cells) != len(header):
            raise OpcountValueError(f"{name}:{number}: {len(cells)} cells, the header has {len(header)}")
        if kind == "azure":
            try:
                when = datetime.fromisoformat(cells[at].strip())
            except ValueError:
                raise OpcountValueError(f"{name}:{number}: TIMESTAMP {cells[at]!r} is not a date and time") from None
            start = start or when
            arrival = (when - start).total_seconds()
            if arrival < 0:
                raise OpcountValueError(f"{name}:{number}: TIMESTAMP {cells[at]!r} is before the first row's")
        else:
            arrival = _seconds(name, number, columns[0], cells[at])
        rows.append(
            Sent(arrival, _tokens(name, number, columns[1], cells[inp]), _tokens(name, number, columns[2], cells[out]))
        )
    return Trace(tuple(rows))


def _bench(name: str, text: str) -> Trace:
    data = parse_json(text, name)
    if not isinstance(data, dict) or "input_lens" not in data or "output_lens" not in data:
        raise OpcountValueError(
            f"{name}: not a vllm bench serve result with its requests (input_lens, output_lens: --save-detailed)"
        )
    inputs, outputs, errors = data["input_lens"], data["output_lens"], data.get("errors") or []
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs):
        raise OpcountValueError(f"{name}: input_lens and output_lens must be two lists of one length")
    _count(name, len(inputs))
    rows = []
    for i, (p, o) in enumerate(zip(inputs, outputs, strict=True)):
        if isinstance(errors, list) and i < len(errors) and errors[i]:
            raise OpcountValueError(
                f"{name}: request {i + 1} failed in the benchmark ({str(errors[i])[:80]}): its lengths are not a request served"
            )
        rows.append(Sent(None, _tokens(name, i + 1, "input_lens", p), _tokens(name, i + 1, "output_lens", o)))
    c, r = data.get("max_concurrency"), data.get("request_rate")
    concurrency = c if isinstance(c, int) and not isinstance(c, bool) and c >= 1 else None
    rate = float(r) if concurrency is None and isinstance(r, (int, float)) and math.isfinite(r) and r > 0 else None
    return Trace(tuple(rows), 0, rate, concurrency)
