"""Measure this machine's peaks: the ``"local"`` hardware.

A short calibration turns the device torch runs on into a :class:`~opcount.hardware.lookup.Hardware`:

- **compute**: the FLOP/s of a square matrix product per dtype (2 FLOPs per multiply-add, as the
  presets count), best of a few runs at a size that takes tens of milliseconds. On a CUDA GPU:
  float32 with TF32 off (the CUDA cores: ``vector``), float32 with TF32 on (``tensor``/``tf32``),
  float16 and bfloat16 (``tensor``). On the CPU: float32 and bfloat16 (``vector``: the roofline then
  runs every operator at the rate a well-blocked matrix product reaches, an upper bound for the rest);
- **bandwidth**: a large tensor copy, bytes read + bytes written over the time, far larger than the
  last-level cache.

A measured peak is what this machine reaches through PyTorch, not the datasheet's: % of speed of
light against it says how far a model is from what the same kernels could do here.

The result is cached as JSON in ``$OPCOUNT_CACHE_DIR``, else ``$XDG_CACHE_HOME/opcount``, else
``~/.cache/opcount``, keyed by host name, torch version, device name and thread count, so that a
new machine, a torch upgrade or another ``torch.set_num_threads`` measures again.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
import os
import platform
import socket
import statistics
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from ..errors import OpcountError
from ..files import write_text
from ..messages import FAILURES, one_line
from ..units import si
from .spec import TENSOR, VECTOR, Hardware

logger = logging.getLogger("opcount")
CACHE_FILE = "local-hardware.json"
TARGET_SECONDS = 0.05  # one timed matrix product: long enough to dwarf launch and timer overhead
REPEATS = 3
COPY_REPEATS = 5  # a copy is cheap, and the bandwidth is what moves most between runs on a busy machine
MIN_SIDE = {"cpu": 512, "cuda": 2048}  # smaller products measure overheads, not the peak
MAX_SIDE = {"cpu": 2048, "cuda": 16384}
COPY_BYTES = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}  # many times any last-level cache

Matmul = Callable[[torch.dtype, torch.device], float]
Copy = Callable[[torch.device], float]


class CalibrationError(OpcountError):
    """The local device could not be measured; the message names the device and the step."""


# ================================================================================================
# Measurements
# ================================================================================================
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run_times(fn: Callable[[], Any], device: torch.device, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        _sync(device)
        start = time.perf_counter()
        fn()
        _sync(device)
        times.append(time.perf_counter() - start)
    return times


def _best_time(fn: Callable[[], Any], device: torch.device, repeats: int) -> float:
    return min(_run_times(fn, device, repeats))


class Rate(float):
    """The best of several timed runs (the figure the roofline uses), with every run's rate in
    ``runs``: a busy machine moves the best between calibrations, and the spread shows by how much."""

    runs: tuple[float, ...]

    def __new__(cls, runs: list[float]) -> Rate:
        rate = super().__new__(cls, max(runs))
        rate.runs = tuple(sorted(runs))
        return rate


def spread(value: float) -> tuple[float, float, float]:
    """(min, median, max) of a :class:`Rate`'s runs; a plain number (a stub's) is its own spread."""
    runs = getattr(value, "runs", None) or (float(value),)
    return runs[0], statistics.median(runs), runs[-1]


def matmul_flops(
    dtype: torch.dtype,
    device: torch.device,
    *,
    target: float = TARGET_SECONDS,
    max_side: int | None = None,
    repeats: int = REPEATS,
) -> float:
    """FLOP/s of ``a @ b`` for n x n operands (2 n^3 FLOPs), n doubled from ``MIN_SIDE`` until a
    warmed product takes ``target`` seconds or reaches ``max_side``; the best of ``repeats`` runs
    at that n. A first, cold run decides nothing: on a busy machine one stall at a small n would
    end the search there and cache a peak a thousand times too low."""
    limit = max_side or MAX_SIDE.get(device.type, 2048)
    n = min(MIN_SIDE.get(device.type, 512), limit)
    while True:
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        a @ b  # warm-up: the library's start and the first touch of the pages are not the product
        seconds = _best_time(functools.partial(operator.matmul, a, b), device, 2)  # this n's operands
        if seconds >= target or n * 2 > limit:
            break
        n *= 2
    return Rate([2 * n**3 / t for t in _run_times(lambda: a @ b, device, repeats)])


def copy_bandwidth(device: torch.device, *, nbytes: int | None = None, repeats: int = COPY_REPEATS) -> float:
    """Bytes/s of ``dst.copy_(src)``: ``nbytes`` read plus ``nbytes`` written, best of ``repeats``
    (a :class:`Rate`: every run's bandwidth in ``runs``)."""
    size = nbytes or COPY_BYTES.get(device.type, COPY_BYTES["cpu"])
    src = torch.ones(size // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)  # touch every page before timing
    return Rate([2 * src.numel() * 4 / t for t in _run_times(lambda: dst.copy_(src), device, repeats)])


# ================================================================================================
# The device and its Hardware
# ================================================================================================
def default_device() -> torch.device:
    """The GPU when torch sees one, else the CPU."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def measure(device: torch.device, *, matmul: Matmul | None = None, copy: Copy | None = None) -> Hardware:
    """Calibrate ``device`` now (no cache). ``matmul`` and ``copy`` replace the measurements
    (:func:`matmul_flops`, :func:`copy_bandwidth`), e.g. with fixed numbers in tests."""
    matmul = matmul or matmul_flops
    copy = copy or copy_bandwidth
    if device.type not in ("cpu", "cuda"):
        raise CalibrationError(f"cannot calibrate device {device}: expected cpu or cuda")
    peak: dict[str, dict[str, float]]
    try:
        if device.type == "cuda":
            peak = {VECTOR: {"float32": _float32_with_tf32(matmul, device, False)}, TENSOR: {}}
            peak[TENSOR]["tf32"] = _float32_with_tf32(matmul, device, True)
            peak[TENSOR]["float16"] = matmul(torch.float16, device)
            if torch.cuda.is_bf16_supported():
                peak[TENSOR]["bfloat16"] = matmul(torch.bfloat16, device)
        else:
            peak = {VECTOR: {"float32": matmul(torch.float32, device), "bfloat16": matmul(torch.bfloat16, device)}}
        bandwidth = copy(device)
    except FAILURES as e:  # out of memory, a dtype the backend lacks; a measurement given that fails or exits
        raise CalibrationError(f"calibrating {device} ({device_name(device)}) failed: {one_line(e)}") from e
    where = _threads() if device.type == "cpu" else str(device)
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    figures = [("copy bandwidth", bandwidth, "B/s")]
    figures += [(f"{unit}/{dtype}", rate, "FLOP/s") for unit, table in peak.items() for dtype, rate in table.items()]
    return Hardware(
        "local",
        {unit: {dtype: float(rate) for dtype, rate in table.items()} for unit, table in peak.items() if table},
        bandwidth=float(bandwidth),
        description=f"measured {when}: {device_name(device)} ({where}), torch {torch.__version__}; "
        + "; ".join(_spread_text(name, rate, unit) for name, rate, unit in figures),
    )


def _spread_text(name: str, rate: float, unit: str) -> str:
    """``copy bandwidth 53.6 GB/s (runs 34.6 / 41.0 / 53.6 GB/s min / median / max of 5)``."""
    low, middle, high = spread(rate)
    runs = len(getattr(rate, "runs", ())) or 1
    text = f"{name} {si(high, unit=unit)}"
    if runs > 1:
        text += f" (best of {runs}; min / median / max {si(low)} / {si(middle)} / {si(high, unit=unit)})"
    return text


def _float32_with_tf32(matmul: Matmul, device: torch.device, tf32: bool) -> float:
    """float32 matrix products with TF32 tensor cores allowed or not, the caller's setting restored.
    The flag is one per process: under a lock, so that two calibrations in two threads cannot save
    each other's setting and leave it behind."""
    with _TF32:
        old = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            return matmul(torch.float32, device)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = old


_TF32 = threading.Lock()


# ================================================================================================
# The cache
# ================================================================================================
def cache_dir() -> Path:
    """``$OPCOUNT_CACHE_DIR``, else ``$XDG_CACHE_HOME/opcount``, else ``~/.cache/opcount``."""
    if os.environ.get("OPCOUNT_CACHE_DIR"):
        return Path(os.environ["OPCOUNT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opcount"


def cache_key(device: torch.device) -> str:
    """What a measurement depends on: this host, the torch build, the device and the thread count."""
    return f"{socket.gethostname()} | torch {torch.__version__} | {device_name(device)} | {_threads()}"


def _threads() -> str:
    n = torch.get_num_threads()
    return f"{n} thread{'' if n == 1 else 's'}"


def local_hardware(
    device: str | torch.device | None = None,
    *,
    recalibrate: bool = False,
    matmul: Matmul | None = None,
    copy: Copy | None = None,
) -> Hardware:
    """This machine's device as measured (``device``: ``"cpu"``, ``"cuda"``, default
    :func:`default_device`), from the cache unless ``recalibrate`` or nothing is cached for it."""
    dev = _device(device)
    path = cache_dir() / CACHE_FILE
    entries = _read(path)
    key = cache_key(dev)
    if not recalibrate and key in entries:
        try:
            return Hardware.from_dict(entries[key])
        except (TypeError, ValueError):
            pass  # a damaged entry is measured again and overwritten
    hw = measure(dev, matmul=matmul, copy=copy)
    entries[key] = hw.to_dict()
    _write(path, entries)
    return hw


def _device(device: str | torch.device | None) -> torch.device:
    if device is None:
        return default_device()
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise CalibrationError(f"local:{device}: expected local:cpu or local:cuda") from None
    if dev.type not in ("cpu", "cuda"):
        raise CalibrationError(f"local:{device}: expected local:cpu or local:cuda")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise CalibrationError("local:cuda: torch sees no CUDA device here (use local or local:cpu)")
    return dev


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}  # none yet, or unreadable: measure again
    return data if isinstance(data, dict) else {}


def _write(path: Path, entries: dict[str, Any]) -> None:
    # Written whole or not at all, so two processes calibrating at once never leave half a file.
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps(entries, indent=2, sort_keys=True) + "\n")
    except OSError as e:  # a read-only home: the measurement still stands, only unsaved
        logger.warning("cannot write the calibration cache %s: %s (set OPCOUNT_CACHE_DIR)", path, e)
