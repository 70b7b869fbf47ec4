"""``--mode train --sweep``: training layouts, ZeRO stages and recomputations priced from one trace of the
micro-batch, one row per point (a table, CSV rows, or JSON points), with each point's memory per device, whether
it fits, its two times and MFU; and ``--devices N``: the layouts of ``N`` devices searched the same way, those that
fit ranked fastest first (at a price per device-hour, the fastest is also the cheapest)."""

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
from .options import LLMOptions, Options, TrainingOptions

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
    search = train.devices is not None
    points = search_points(llm, flags, train) if search else sweep_points(train)
    for point in points:  # every layout against the model before the trace
        try:
            check_layout(llm, layout(flags, _options(train, point), point), flags.seq_len)
        except OpcountError as e:
            where = ", ".join(f"{k}={v}" for k, v in point.items())
            named = f"--devices {train.devices}: the layout {where}" if search else f"--sweep point {where}"
            raise OpcountError(f"{e} ({named})") from None
    status(f"tracing {label}: training step, batch {flags.batch}, {flags.seq_len} tokens")
    traced = trace_step(
        llm,
        seq_len=flags.seq_len,
        batch=flags.batch,
        flops_per_mac=options.analysis.flops_per_mac,
        preset=options.analysis.preset,
    )
    if search and traced.saved.kept("selective") == traced.saved.total:
        # no score matrix saved (a fused attention kernel): selective recomputation is no recomputation
        points = [p for p in points if p["recompute"] != "selective"]
    rows: list[dict[str, Any]] = []
    for i, point in enumerate(points):
        status(f"pricing point {i + 1} of {len(points)}")
        here = _options(train, point)
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
    if search:  # those that fit, fastest first
        rows = sorted((r for r in rows if r["fits"]), key=lambda r: r["training"].get("step_time") or 0.0)
        if not rows:
            raise OpcountError(f"--devices {train.devices}: no layout searched fits the device's memory")
        rows = rows[:SHOWN]
    fmt = options.rendering.format
    if fmt == "json":
        return json.dumps({"model": label, "batch": flags.batch, "seq_len": flags.seq_len, "points": rows}, indent=2)
    keys = list(points[0]) if search else [k for k, _ in train.sweep]
    table = [_flat(row, keys) for row in rows]
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(table[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(table)
        return out.getvalue().rstrip("\n")
    what = f"the layouts of {train.devices} devices that fit, fastest first" if search else "one row per point"
    return _markdown(table, f"{label}: training steps, micro-batch {flags.batch} x {flags.seq_len} tokens, {what}")


SHOWN = 10  # the fastest layouts a search lists
RECOMPUTES = ("none", "selective", "full")


def _options(train: TrainingOptions, point: dict[str, Any]) -> TrainingOptions:
    """The training options of one point: its ZeRO stage and recomputation, sequence parallelism with --tp in a
    search (Megatron-LM's practice)."""
    here = replace(
        train, zero=int(point.get("zero", train.zero)), recompute=str(point.get("recompute", train.recompute))
    )
    if train.devices is not None:
        here = replace(here, sequence_parallel=int(point["tp"]) > 1)
    return here


def search_points(llm: CausalLM, flags: LLMOptions, train: TrainingOptions) -> list[dict[str, Any]]:
    """The layouts of ``--devices N`` a search prices: ``tp`` within a node (1 to 8, dividing the heads and the
    key/value heads), ``pp`` dividing the layers' count or not above it, ``cp`` dividing the sequence (up to 8),
    ``dp`` the devices left (dividing ``--global-batch`` where given), each recomputation (or the one given)."""
    n = train.devices
    assert n is not None
    config = llm.config
    heads = getattr(config, "num_attention_heads", 1) or 1
    kv = getattr(config, "num_key_value_heads", None) or heads
    layers = getattr(config, "num_hidden_layers", 1) or 1
    powers = [2**i for i in range(17) if 2**i <= n]
    modes = RECOMPUTES if "--recompute" not in train.given else (train.recompute,)
    points: list[dict[str, Any]] = []
    for tp in (t for t in powers if t <= 8 and heads % t == 0 and kv % t == 0):
        for pp in (p for p in powers if p <= layers):
            for cp in (c for c in powers if c <= 8 and flags.seq_len % c == 0):
                dp, left = divmod(n, tp * pp * cp)
                if left or dp < 1 or (train.global_batch is not None and train.global_batch % (dp * flags.batch)):
                    continue
                if train.zero and dp * cp == 1:
                    continue
                points += [{"tp": tp, "pp": pp, "cp": cp, "dp": dp, "recompute": r} for r in modes]
    if not points:
        raise OpcountError(f"--devices {n}: no layout of tp, pp, cp and dp fills them (with --global-batch, --batch)")
    return points


def _flat(row: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    t = row["training"]
    out = {k: row[k] for k in keys}
    out |= {"devices": t["layout"]["devices"], "memory": row["memory"]["total"], "fits": row["fits"]}
    for key in ("step_time", "step_time_bound", "bubble_fraction", "mfu", "mfu_bound", "tokens_per_s_per_device"):
        out[key] = t.get(key)
    return out


def _markdown(table: list[dict[str, Any]], title: str) -> str:
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
    return title + "\n\n" + "\n".join(lines)
