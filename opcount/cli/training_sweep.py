"""``--mode train --sweep``: training layouts, ZeRO stages and recomputations priced from one trace of the
micro-batch, one row per point (a table, CSV rows, or JSON points), with each point's memory per device, whether
it fits, its two times and MFU."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ..errors import OpcountError
from ..hardware.lookup import Hardware
from ..llm.causal_lm import CausalLM
from ..llm.training import TrainingCost, check_layout, trace_step, train_step
from ..units import seconds, size
from .flags.training import layout, sweep_points
from .options import LLMOptions, Options

Status = Callable[[str], None]


def run(
    llm: CausalLM,
    options: Options,
    flags: LLMOptions,
    label: str,
    hardware: Hardware | None,
    status: Status,
    as_json: Callable[[TrainingCost], dict[str, Any]],
) -> str:
    """Each point of the sweep priced on the micro-batch traced once; ``as_json``: a point's ``training`` JSON."""
    train = options.training
    points = sweep_points(train)
    for point in points:  # every layout against the model before the trace
        try:
            check_layout(llm, layout(flags, train, point), flags.seq_len)
        except OpcountError as e:
            where = ", ".join(f"{k}={v}" for k, v in point.items())
            raise OpcountError(f"{e} (--sweep point {where})") from None
    status(f"tracing {label}: training step, batch {flags.batch}, {flags.seq_len} tokens")
    traced = trace_step(
        llm,
        seq_len=flags.seq_len,
        batch=flags.batch,
        flops_per_mac=options.analysis.flops_per_mac,
        preset=options.analysis.preset,
    )
    rows: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        status(f"pricing point {i + 1} of {len(points)}")
        here = replace(
            train,
            zero=int(point.get("zero", train.zero)),
            recompute=str(point.get("recompute", train.recompute)),
        )
        cost = train_step(
            llm,
            seq_len=flags.seq_len,
            batch=flags.batch,
            optimizer=here.optimizer,
            zero=here.zero,
            recompute=here.recompute,
            hardware=hardware,
            flops_per_mac=options.analysis.flops_per_mac,
            preset=options.analysis.preset,
            layout=layout(flags, here, point),
            traced=traced,
        )
        memory = cost.memory()
        capacity = None if cost.roofline is None else cost.roofline.hardware.memory_bytes
        rows.append(
            {
                **point,
                "memory": memory,
                "fits": None if capacity is None else memory["total"] <= capacity,
                "training": as_json(cost),
            }
        )
    fmt = options.rendering.format
    if fmt == "json":
        return json.dumps({"model": label, "batch": flags.batch, "seq_len": flags.seq_len, "points": rows}, indent=2)
    keys = [k for k, _ in train.sweep]
    table = [_flat(row, keys) for row in rows]
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(table[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
        return out.getvalue().rstrip("\n")
    return _markdown(table, label, flags)


def _flat(row: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    t = row["training"]
    out = {k: row[k] for k in keys}
    out |= {"devices": t["layout"]["devices"], "memory": row["memory"]["total"], "fits": row["fits"]}
    for key in ("step_time", "step_time_bound", "bubble_fraction", "mfu", "mfu_bound", "tokens_per_s_per_device"):
        out[key] = t.get(key)
    return out


def _markdown(table: list[dict[str, Any]], label: str, flags: LLMOptions) -> str:
    def cell(key: str, value: Any) -> str:
        if value is None:
            return "-"
        if key == "memory":
            return size(value)
        if key in ("step_time", "step_time_bound"):
            return seconds(value)
        if key in ("bubble_fraction", "mfu", "mfu_bound"):
            return f"{value:.1%}"
        if key == "tokens_per_s_per_device":
            return f"{value:,.0f}"
        if key == "fits":
            return "yes" if value else "no"
        return str(value)

    names = {
        "memory": "memory per device", "step_time": "step", "step_time_bound": "bound", "bubble_fraction": "bubble",
        "mfu": "MFU", "mfu_bound": "MFU bound", "tokens_per_s_per_device": "tokens/s per device",
    }  # fmt: skip
    header = [names.get(k, k) for k in table[0]]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(k, v) for k, v in row.items()) + " |" for row in table]
    title = f"{label}: training steps, micro-batch {flags.batch} x {flags.seq_len} tokens, one row per point"
    return title + "\n\n" + "\n".join(lines)
