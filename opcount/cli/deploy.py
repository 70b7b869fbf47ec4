"""The command line's deployment flags on the LLM path: ``--tp --pp --ep --dp --micro-batches``
(a parallel layout), ``--price`` (dollars per device-hour), ``--max-batch`` and ``--reserve``; their
checks, and the lines and JSON fields they add to a report (:mod:`opcount.llm.deploy` computes)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from typing import Any

from ..errors import OpcountError
from ..hardware.lookup import Hardware
from ..llm.deploy import DEFAULT_RESERVE, MAX_PRICE, Deployment
from ..llm.parallel import Parallel
from ..units import seconds, size
from .args import positive_int
from .options import DeployOptions

# The flags by their argparse names (opcount compare's help hides them, as the other LLM flags).
DEPLOY_FLAGS = ("tp", "pp", "ep", "dp", "micro_batches", "price", "max_batch", "reserve")
# --sweep keys: a layout per point
SWEEPABLE = {"tp": "tp", "pp": "pp", "ep": "ep", "dp": "dp"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The deployment flags, in their own help group."""
    g = parser.add_argument_group(
        "LLM deployment (llm: and causal hf: models; per device: memory, fit, communication, time, cost; deploy.md)"
    )
    for name, what in (
        ("tp", "tensor-parallel devices (the model's tp_plan splits heads and channels)"),
        ("pp", "pipeline stages (contiguous layers)"),
        ("ep", "expert-parallel devices: 1 or --tp x --dp"),
        ("dp", "data-parallel replicas"),
    ):
        g.add_argument(f"--{name}", type=positive_int, metavar="N", help=f"{what} (default 1)")
    g.add_argument(
        "--micro-batches", type=positive_int, metavar="M", help="with --pp: micro-batches in flight (default 1)"
    )
    g.add_argument("--price", type=_price, metavar="USD", help="dollars per device-hour: the cost per million tokens")
    g.add_argument(
        "--max-batch",
        action="store_true",
        help="the largest --batch whose weights, KV cache (--kv-len + --gen-len) and activations fit a device",
    )
    g.add_argument(
        "--reserve",
        type=_fraction,
        metavar="F",
        help=f"fraction of a device's memory kept for the engine's workspace (default {DEFAULT_RESERVE:g}, "
        "as vLLM's gpu_memory_utilization 0.9)",
    )


def _price(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected dollars per device-hour, got {text!r}") from None
    if not math.isfinite(value) or not 0 < value <= MAX_PRICE:
        raise argparse.ArgumentTypeError(
            f"expected dollars per device-hour above 0 and up to {MAX_PRICE:g}, got {text}"
        )
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to 0.99, got {text!r}") from None
    if not 0 <= value <= 0.99:
        raise argparse.ArgumentTypeError(f"expected a fraction from 0 to 0.99, got {text}")
    return value


def options(ns: Mapping[str, Any]) -> DeployOptions:
    """The deployment flags of the parsed command line (argparse's names -> values)."""
    return DeployOptions(
        **{name: ns.get(name) for name in DEPLOY_FLAGS if name != "max_batch"}, max_batch=bool(ns.get("max_batch"))
    )


def layout(flags: DeployOptions, values: Mapping[str, int]) -> Parallel:
    """The layout of one point: the flags, a swept value in its place; bad values name their flag."""
    try:
        return Parallel(
            **{k: values.get(k, getattr(flags, k) or 1) for k in SWEEPABLE},
            micro_batches=flags.micro_batches or 1,
        )
    except OpcountError as e:
        raise OpcountError(str(e)) from None


def wanted(flags: DeployOptions, swept: bool) -> bool:
    """Whether the run reports a deployment: a deployment flag given or a layout key swept."""
    return bool(flags.given()) or swept


def check(flags: DeployOptions, hardware: Hardware | None, gen_len: int | None, phase: str | None) -> None:
    """Combinations refused before anything is built."""
    if flags.micro_batches is not None and (flags.pp or 1) == 1:
        raise OpcountError("--micro-batches applies to a pipeline: give --pp")
    for name, value in (("price", flags.price), ("max-batch", flags.max_batch or None)):
        if value is not None and hardware is None:
            raise OpcountError(f"--{name} needs --hardware (the time per token, the device's memory)")
    if flags.max_batch and hardware is not None and hardware.memory_bytes is None:
        raise OpcountError(f"--max-batch: {hardware.name} does not say its memory (memory_bytes)")
    try:
        parallel = layout(flags, {})
    except OpcountError:
        raise
    if not parallel.single and hardware is not None and hardware.interconnect is None:
        raise OpcountError(
            f"{' '.join(f for f in flags.given() if f in ('--tp', '--pp', '--ep', '--dp'))}: {hardware.name} has no "
            "interconnect figures to price the communication (a hardware file can give them: hardware.md)"
        )


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------
def summary_lines(d: Deployment) -> list[str]:
    """The deployment in a few lines: layout, memory per device against capacity, communication, time, cost."""
    m = d.per_device
    lines = [
        f"  layout: {d.parallel.label()}; per device: weights {size(m.weights)}, KV cache {size(m.kv_cache)}, "
        f"activations {size(m.activations)}, total {size(m.total)}"
    ]
    if d.capacity is not None:
        verdict = "fits" if d.fits else f"does not fit: needs >= {d.needs} x {d.hardware}"
        lines.append(
            f"  capacity: {size(d.capacity)} per device ({d.reserve:g} kept for the engine's workspace): {verdict}"
        )
    if d.communication_time is not None:
        lines.append(
            f"  communication: {size(d.communication_bytes)} sent per device per step, {seconds(d.communication_time)}"
        )
    if d.time is not None:
        lines.append(
            f"  per step: compute/memory {seconds(d.compute_time)} + communication {seconds(d.communication_time)} "
            f"= {seconds(d.time)}, {d.tokens_per_s:,.1f} tokens/s on {d.parallel.devices} devices"
        )
    if d.cost is not None:
        lines.append("  cost: " + ", ".join(f"${v:,.4g} per 1M {k} tokens" for k, v in d.cost.items()))
    if d.max_batch is not None:
        lines.append(f"  max batch: {d.max_batch} sequences fit a device")
    return lines


def json_fields(d: Deployment) -> dict[str, Any]:
    """The deployment's JSON: ``parallel``, ``memory`` per device, ``communication``, ``cost``, ``max_batch``."""
    out: dict[str, Any] = {
        "parallel": d.parallel.as_dict(),
        "per_device": d.per_device.as_dict(),
        "capacity": d.capacity,
        "fits": d.fits,
        "communication": {"bytes_per_device": d.communication_bytes, "time": d.communication_time},
    }
    if d.time is not None:
        out["time_per_device"] = {"compute": d.compute_time, "communication": d.communication_time, "total": d.time}
    if d.cost is not None:
        out["cost"] = {"per_million_tokens": d.cost, "usd_per_device_hour": d.price}
    if d.max_batch is not None:
        out["max_batch"] = d.max_batch
    return out
