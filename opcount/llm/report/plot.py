"""Charts of an LLM analysis: a sweep's time and memory curves, or one phase's roofline."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import OpcountError
from ...files import save_figure
from ...roofline.chart_labels import plain


def save_llm_chart(points: Sequence[Any], path: str | Path, *, model: str, sweep: Sequence[str] = ()) -> list[Path]:
    """Charts of ``points`` (the analyzed phases of ``model``, a name for the title) written to ``path``.

    One point: the phase's roofline charts (as the main command draws them: one device's operators). A
    sweep (``sweep``: the swept keys, ``seq-len`` or ``seq_len``, in the order of the grid): time (or time
    per output token) and memory against the first swept key, one curve per value of the others; a
    point with a ``deployment`` (a layout) is drawn as the layout runs it: its time, a device's memory."""
    if len(points) == 1:
        from ...roofline.plot import save_charts

        roofline = points[0].phase.roofline
        if roofline is None:
            raise OpcountError("--plot needs --hardware")
        return save_charts(roofline, path)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [key.replace("-", "_") for key in sweep]
    x_key, others = keys[0], keys[1:]
    fig, (time_ax, memory_ax) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    curves: dict[tuple[int, ...], list[Any]] = {}
    for point in points:
        curves.setdefault(tuple(point.values[k] for k in others), []).append(point)
    for label_values, members in curves.items():
        label = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in zip(others, label_values, strict=True)) or None
        xs = [p.values[x_key] for p in members]
        times = [_time_of(p) for p in members]
        time_ax.plot(xs, [t * 1e3 for t in times], marker="o", label=label)
        memory_ax.plot(xs, [_memory_of(p) / 1e9 for p in members], marker="o", label=label)
    gen = points[0].generation is not None
    layout = getattr(points[0], "deployment", None) is not None
    time_ax.set_ylabel(
        f"time per output token (ms), {points[0].phase.kernels} kernels"
        if gen
        else f"time (ms), {points[0].phase.kernels} kernels"
    )
    memory_ax.set_ylabel(f"memory{' per device' if layout else ''}: weights + KV cache + activations (GB)")
    for ax in (time_ax, memory_ax):
        ax.set_xlabel(x_key.replace("_", "-"))
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    if others:  # one legend for both panels, outside them: inside, it sat on the curves
        fig.legend(*time_ax.get_legend_handles_labels(), loc="outside right upper", fontsize=8)
    first = points[0].phase  # a fitted sweep's PhaseValues names its hardware, a traced PhaseCost its roofline's
    hw = first.hardware.name if hasattr(first, "hardware") else first.roofline.hardware.name
    fig.suptitle("\n".join(textwrap.wrap(plain(f"{model} on {hw}, {points[0].phase.precision.label()}"), 110)))
    out = Path(path)
    try:
        save_figure(fig, out, dpi=120, bbox_inches="tight")  # nothing cut at the edges, whatever the labels
    finally:
        plt.close(fig)
    return [out]


def _time_of(point: Any) -> float:
    """The point's time (a generation's per output token): its layout's where it has one."""
    deployment = getattr(point, "deployment", None)
    gen = point.generation
    figures = deployment if deployment is not None and deployment.step_time is not None else gen or point.phase
    value = figures.time_per_output_token if gen is not None else figures.time
    return float(value or 0.0)


def _memory_of(point: Any) -> float:
    """Bytes the point holds: a device's under a layout, else the single device's footprint."""
    deployment = getattr(point, "deployment", None)
    if deployment is not None:
        return float(deployment.per_device.total)
    return float(point.phase.memory.total)
