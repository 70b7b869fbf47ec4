"""Charts of sparsity configurations: the Sparsity Roofline (Shinn et al.) and speedup by level.

The Sparsity Roofline puts each configuration (a pattern at a level) at its accuracy against its
theoretical speedup over the dense model, one line per pattern. opcount cannot know accuracy:
the user measures it (fine-tuned pruned models) and passes it in. Without accuracies,
:func:`speedup_chart` plots the speedup against the sparsity level instead.

matplotlib is imported on first use, and figures are built without pyplot (no global state).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import OpcountValueError
from ..files import save_figure
from ..roofline.chart_labels import Label, freeze_figure, place_labels, plain

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

__all__ = ["SparsityResult", "sparsity_roofline_chart", "speedup_chart"]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


@dataclass(frozen=True)
class SparsityResult:
    """One configuration: its ``series`` (pattern, e.g. ``"2:4"``, ``"block 16"``), theoretical
    ``speedup``, the user's ``accuracy`` (None when unknown), the weights' zero ``level``, what
    FLOPs alone would promise (``flop_speedup``) and an optional point ``label``."""

    series: str
    speedup: float
    accuracy: float | None = None
    level: float = 0.0
    flop_speedup: float | None = None
    label: str = ""


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'opcount[plot]'") from e
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _by_series(points: Iterable[SparsityResult]) -> dict[str, list[SparsityResult]]:
    series: dict[str, list[SparsityResult]] = {}
    for p in points:
        series.setdefault(p.series, []).append(p)
    return series


def _finish(
    fig: Figure, ax: Axes, title: str, note: str | None, path: str | Path | None, labels: Sequence[Label] = ()
) -> None:
    ax.set_title(f"{title}\n{note}" if note else title, fontsize=9)
    ax.grid(True, lw=0.4, alpha=0.5)
    legend = ax.legend(fontsize=8, loc="best")
    if labels:  # after the layout and the legend: labels clear of both and of each other
        renderer = freeze_figure(fig)
        place_labels(ax, labels, limit=len(labels), renderer=renderer, obstacles=[legend], fontsize=6, color="dimgray")
    if path is not None:
        save_figure(fig, path, dpi=fig.dpi)


def _speedup_ticks(values: Sequence[float]) -> list[float]:
    """Readable ticks (0.5x, 1x, 1.5x, 2x, ...) over the range of ``values`` and 1x."""
    lo, hi = min([*values, 1.0]), max([*values, 1.0])
    nice = (0.125, 0.25, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
    return [t for t in nice if lo / 1.15 <= t <= hi * 1.15]


def sparsity_roofline_chart(
    points: Sequence[SparsityResult],
    path: str | Path | None = None,
    *,
    dense_accuracy: float | None = None,
    accuracy_label: str = "accuracy (%)",
    title: str = "Sparsity Roofline",
    note: str | None = None,
) -> Figure:
    """Accuracy against theoretical speedup over dense (log2 axis), one line per series, points
    labeled by sparsity level; 1x (dense) marked, and ``dense_accuracy`` as a reference line.
    ``note`` is printed under the chart (say where the accuracies come from)."""
    missing = [p for p in points if p.accuracy is None]
    if missing:
        raise OpcountValueError(
            f"{len(missing)} point(s) have no accuracy (first: {missing[0].series} at "
            f"{100 * missing[0].level:.3g}%); pass accuracies, or use speedup_chart()"
        )
    fig = _figure(7, 4.8)
    ax = fig.add_subplot()
    ax.set_xscale("log", base=2)
    labels: list[Label] = []
    for i, (name, mine) in enumerate(_by_series(points).items()):
        mine = sorted(mine, key=lambda p: p.speedup)
        ax.plot(
            [p.speedup for p in mine],
            [float(p.accuracy or 0.0) for p in mine],
            marker=_MARKERS[i % len(_MARKERS)],
            lw=1.4,
            ms=5,
            label=plain(name),
        )
        labels += [Label(p.label or f"{100 * p.level:.3g}%", p.speedup, float(p.accuracy or 0.0)) for p in mine]
    ax.axvline(1.0, color="black", lw=0.8, ls=":")
    if dense_accuracy is not None:
        ax.axhline(dense_accuracy, color="black", lw=0.8, ls="--", label=f"dense ({dense_accuracy:g})")
    ax.set_xlabel("theoretical speedup over dense (speed of light)")
    ax.set_ylabel(accuracy_label)
    ax.set_xticks(_speedup_ticks([p.speedup for p in points]))
    ax.xaxis.set_major_formatter(_times_formatter())
    ax.xaxis.set_minor_formatter(_blank_formatter())
    _finish(fig, ax, title, note, path, labels)
    return fig


def speedup_chart(
    points: Sequence[SparsityResult],
    path: str | Path | None = None,
    *,
    title: str = "Speedup by sparsity level",
    show_flops: bool = True,
    note: str | None = None,
) -> Figure:
    """Theoretical speedup against the weights' sparsity level, one line per series; with
    ``show_flops``, dotted lines give what the FLOP count alone would promise."""
    fig = _figure(7, 4.8)
    ax = fig.add_subplot()
    ax.set_yscale("log", base=2)
    for i, (name, mine) in enumerate(_by_series(points).items()):
        mine = sorted(mine, key=lambda p: p.level)
        line = ax.plot(
            [100 * p.level for p in mine],
            [p.speedup for p in mine],
            marker=_MARKERS[i % len(_MARKERS)],
            lw=1.4,
            ms=5,
            label=plain(name),
        )[0]
        flops = [(100 * p.level, p.flop_speedup) for p in mine if p.flop_speedup is not None]
        if show_flops and flops:
            ax.plot(*zip(*flops, strict=True), ls=":", lw=1, marker=".", ms=4, color=line.get_color())
    if show_flops and any(p.flop_speedup is not None for p in points):
        ax.plot([], [], ls=":", lw=1, marker=".", ms=4, color="gray", label="FLOPs alone (dotted)")
    ax.axhline(1.0, color="black", lw=0.8, ls="--")
    ax.set_xlabel("zeros in the weight layers (%)")
    ax.set_ylabel("speedup over dense")
    shown = [p.speedup for p in points] + [p.flop_speedup for p in points if show_flops and p.flop_speedup]
    ax.set_yticks(_speedup_ticks(shown))
    ax.yaxis.set_major_formatter(_times_formatter())
    ax.yaxis.set_minor_formatter(_blank_formatter())
    _finish(fig, ax, title, note, path)
    return fig


def _times_formatter() -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _: f"{x:g}x")


def _blank_formatter() -> FuncFormatter:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda x, _: "")
