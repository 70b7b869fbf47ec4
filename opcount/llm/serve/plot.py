"""A simulation's latencies over time, as a chart (``opcount simulate --plot FILE``): TTFT and TPOT at p50,
p90 and p99 over a sliding window of arrivals (:func:`windows`, the percentiles; :func:`save_latency_chart`,
the chart, drawn by matplotlib as opcount's other charts are)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...files import save_figure

PERCENTILES = (50, 90, 99)
MAX_WINDOW = 100  # requests a window holds: a tenth of the run where that is fewer


def window_size(requests: int) -> int:
    """The window: the last 100 arrivals, or a tenth of the requests if fewer (one at least)."""
    return max(1, min(MAX_WINDOW, requests // 10))


def windows(arrivals: Sequence[float], values: Sequence[float], size: int) -> tuple[np.ndarray, dict[int, np.ndarray]]:
    """Each window of ``size`` consecutive arrivals (in arrival order): the last arrival's time, and the
    values' :data:`PERCENTILES` over the window (numpy's linear interpolation, as the metrics)."""
    order = np.argsort(np.asarray(arrivals, dtype=float), kind="stable")
    times, data = np.asarray(arrivals, dtype=float)[order], np.asarray(values, dtype=float)[order]
    size = max(1, min(size, data.size))
    slid = sliding_window_view(data, size)
    return times[size - 1 :], {p: np.percentile(slid, p, axis=1) for p in PERCENTILES}


def save_latency_chart(rows: Sequence[Mapping[str, float]], path: str | Path, *, title: str) -> Path:
    """TTFT and TPOT (ms) of the simulation's ``rows`` (a request each: arrival, TTFT, TPOT, output tokens) at
    their percentiles over a window of arrivals (:func:`window_size`) against time, written to ``path``; TPOT
    over the requests of more than one token (none: its panel says so)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = window_size(len(rows))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    for ax, metric, label in zip(axes, ("ttft", "tpot"), ("TTFT", "TPOT"), strict=True):
        kept = [r for r in rows if metric != "tpot" or r["output"] > 1]
        ax.set_title(label)
        ax.set_xlabel("arrival (s)")
        ax.set_ylabel(f"{label} (ms), over the last {size} arrivals")
        ax.grid(True, alpha=0.3)
        if not kept:
            ax.text(0.5, 0.5, "answers of one token: no TPOT", ha="center", va="center", transform=ax.transAxes)
            continue
        times, found = windows([r["arrival"] for r in kept], [r[metric] for r in kept], size)
        for p, values in found.items():
            ax.plot(times, values * 1e3, label=f"p{p}")
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)
