"""Charts of a roofline report: the classic roofline and a per-module time bar chart.

matplotlib is an optional dependency (``pip install opcount[plot]``), imported on first use.
Figures are built with ``matplotlib.figure.Figure`` directly, not pyplot, so no global backend or
figure state is touched; the format follows the file suffix (``.png``, ``.svg``, ``.pdf``).
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OpcountValueError
from ..files import save_figure
from ..units import seconds, si, time_unit, unprefixed
from . import RooflineReport, Summary
from .chart_labels import Label, freeze_figure, place_labels, plain

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Text

__all__ = ["roofline_chart", "time_chart"]

_COLORS = {"tensor": "tab:blue", "vector": "tab:orange"}
_OTHER_COLORS = ("tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive")
BYS = ("layer", "module", "operator")
TITLE_CHARS = 90  # about what an 8-inch figure holds at 10 points


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'opcount[plot]'") from e
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _color(unit: str, units: Sequence[str]) -> str:
    if unit in _COLORS:
        return _COLORS[unit]
    others = [u for u in units if u not in _COLORS]
    return _OTHER_COLORS[others.index(unit) % len(_OTHER_COLORS)] if unit in others else "tab:gray"


def _save(fig: Figure, path: str | Path | None) -> None:
    if path is not None:
        save_figure(fig, path, dpi=fig.dpi)


def _points(report: RooflineReport, by: str) -> list[tuple[str, str, float, float, float]]:
    """(label, unit, intensity, FLOP/s, time) of every plottable point."""
    if by == "layer":
        raw = [
            (f"{t.layer.module or '(model)'}:{t.layer.op}", t.layer.unit, t.intensity, t.throughput, t.time)
            for t in report.layers
        ]
    elif by in ("module", "operator"):
        rows: dict[str, Summary] = report.leaf_modules() if by == "module" else report.by_operator()
        raw = [
            (s.name or "(model)", s.units[0] if s.units else "", s.intensity, s.throughput, s.time)
            for s in rows.values()
        ]
    else:
        raise OpcountValueError(f"by must be one of {', '.join(BYS)}, got {by!r}")
    # Log axes: points without flops or without bytes have no place on the chart.
    return [p for p in raw if p[3] > 0 and math.isfinite(p[2]) and p[2] > 0]


def roofline_chart(
    report: RooflineReport,
    path: str | Path | None = None,
    *,
    by: str = "layer",
    label_top: int = 5,
    title: str | None = None,
    subject: str = "",
) -> Figure:
    """Arithmetic intensity (FLOP/byte) against attainable FLOP/s, log-log: one roof per unit and
    precision the report used, its ridge point marked, and one point per layer / innermost module /
    operator (``by``), its area proportional to its time; the ``label_top`` slowest are named."""
    points = _points(report, by)
    hw = report.hardware
    roofs = sorted({(t.layer.unit, t.layer.precision) for t in report.layers}, key=lambda r: -hw.peak[r[0]][r[1]])
    units = sorted({u for u, _ in roofs})
    fig = _figure(8, 5.5)
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")

    ridges = [hw.peak[u][p] / hw.bandwidth for u, p in roofs]
    xs = [p[2] for p in points] + ridges
    lo = min(xs, default=1.0) / 4
    hi = max(xs, default=1.0) * 4
    for (u, precision), ridge in zip(roofs, ridges, strict=True):
        peak = hw.peak[u][precision]
        color = _color(u, units)
        ax.plot(
            [lo, ridge, hi],
            [lo * hw.bandwidth, peak, peak],
            color=color,
            lw=1.8,
            label=plain(f"{u} {precision}: {si(peak, unit='FLOP/s')}, ridge {unprefixed(ridge)} FLOP/B"),
        )
        ax.plot([ridge], [peak], marker="o", color=color, ms=5)
        ax.axvline(ridge, color=color, lw=0.6, ls=":")

    total = sum(p[4] for p in points) or 1.0
    for u in units:
        mine = [p for p in points if p[1] == u]
        if mine:
            ax.scatter(
                [p[2] for p in mine],
                [p[3] for p in mine],
                s=[10 + 600 * p[4] / total for p in mine],
                color=_color(u, units),
                alpha=0.55,
                edgecolors="black",
                linewidths=0.4,
                zorder=3,
            )
    ax.set_xlim(lo, hi)
    ys = [p[3] for p in points] + [hw.peak[u][p] for u, p in roofs]
    ax.set_ylim(min(min(ys), lo * hw.bandwidth) / 2, max(ys) * 2)
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("attainable throughput (FLOP/s)")
    text = title or plain(
        (f"{subject}: " if subject else "")
        + f"{hw.name}, {report.dtype}: {len(points)} {by}s, "
        + f"{seconds(report.total_time)} speed of light ({si(hw.bandwidth, unit='B/s')})"
    )
    ax.set_title("\n".join(textwrap.wrap(text, TITLE_CHARS)), fontsize=10)  # wrapped: never cut at the edges
    ax.grid(True, which="major", lw=0.4, alpha=0.5)
    legend = ax.legend(fontsize=7, loc="upper left")  # above the memory roof: no point is ever there
    renderer = freeze_figure(fig)
    notes = _ridge_notes(ax, [(ridge, _color(u, units)) for (u, _), ridge in zip(roofs, ridges, strict=True)], renderer)
    slowest = [Label(_short(p[0]), p[2], p[3]) for p in sorted(points, key=lambda p: -p[4])]
    place_labels(ax, slowest, limit=label_top, renderer=renderer, obstacles=[legend, *notes])
    _save(fig, path)
    return fig


def time_chart(
    report: RooflineReport,
    path: str | Path | None = None,
    *,
    top: int = 20,
    max_depth: int | None = None,
    within: str = "",
    title: str | None = None,
    subject: str = "",
) -> Figure:
    """Horizontal bars of the ``top`` slowest innermost modules (or modules down to ``max_depth``;
    inside module ``within`` only), each split into the time of its compute-bound and its
    memory-bound layers."""
    rows = sorted(report.modules(max_depth, within), key=lambda s: -s.time)[:top][::-1]  # slowest on top
    fig = _figure(8, 1.2 + 0.28 * max(len(rows), 1))
    ax = fig.add_subplot()
    names = [plain((s.name[len(within) + 1 :] if within else s.name) or "(model)") for s in rows]
    # Effective time split in the proportion of the module's own compute- and memory-bound time.
    unit, scale = time_unit(max((s.time for s in rows), default=0.0))
    compute, memory = [], []
    for s in rows:
        own = s.compute_limited_time + s.memory_limited_time
        share = s.compute_limited_time / own if own > 0 else 0.0
        compute.append(s.time * share / scale)
        memory.append(s.time * (1 - share) / scale)
    ax.barh(names, compute, color="tab:blue", label="compute bound")
    ax.barh(names, memory, left=compute, color="tab:orange", label="memory bound")
    ax.set_xlabel(f"speed-of-light time ({unit})")
    ax.tick_params(axis="y", labelsize=7)
    scope = f" in {within}" if within else ""
    text = title or plain(
        (f"{subject}: " if subject else "")
        + f"{report.hardware.name}, {report.dtype}: time per module{scope} (model total {seconds(report.total_time)})"
    )
    # wrapped to the figure's width (a long module name or hardware file name was cut at the edges)
    fig.suptitle("\n".join(textwrap.wrap(text, TITLE_CHARS)), fontsize=10)
    # below the axes, never over a bar: the longest bars reach the right edge at any row
    fig.legend(*ax.get_legend_handles_labels(), loc="outside lower center", ncols=2, fontsize=7, frameon=False)
    ax.grid(True, axis="x", lw=0.4, alpha=0.5)
    _save(fig, path)
    return fig


def _short(label: str, width: int = 32) -> str:
    """A long ``module:operator`` label keeps the operator and the module's last two components."""
    if len(label) <= width:
        return label
    module, sep, op = label.rpartition(":")
    parts = (module if sep else label).split(".")
    short = ".".join(parts[-2:])
    return f"...{short}{sep}{op}" if sep else f"...{short}"


def _ridge_notes(ax: Axes, ridges: Sequence[tuple[float, str]], renderer: RendererBase) -> list[Text]:
    """Each ridge point's intensity written up its dotted line, at the foot of the axes where the
    points rarely are; a note that would touch the one before is left to the legend."""
    notes: list[Text] = []
    for ridge, color in sorted(ridges):
        note = ax.annotate(
            f"ridge {unprefixed(ridge)} FLOP/B",
            (ridge, 0),
            xycoords=("data", "axes fraction"),
            xytext=(2, 4),
            textcoords="offset points",
            rotation=90,
            ha="left",
            va="bottom",
            fontsize=7,
            color=color,
        )
        note.set_in_layout(False)
        if notes and note.get_window_extent(renderer).overlaps(notes[-1].get_window_extent(renderer)):
            note.remove()
            continue
        notes.append(note)
    return notes


def save_charts(report: RooflineReport, path: str | Path, *, subject: str = "", **options: Any) -> list[Path]:
    """The roofline chart at ``path`` and the time chart beside it (``name.time.png``);
    ``subject`` starts both titles (``sparse weights, 2:4``: which case the charts show)."""
    path = Path(path)
    roofline_chart(report, path, subject=subject, **options)
    second = path.with_name(f"{path.stem}.time{path.suffix}")
    time_chart(report, second, subject=subject)
    return [path, second]
