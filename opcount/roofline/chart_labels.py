"""Text labels on a chart that overlap neither each other nor the chart's own notes.

Labels are placed one at a time, the most important first. Each tries positions around its
point, nearest first, and takes the first whose box (in display coordinates, measured with the
figure's renderer) lies inside the axes and clear of every box already taken: earlier labels,
the legend, fixed notes such as the ridge-point text, and every point offered for a label. A
label placed away from its point gets a thin leader line, which crosses no other label, and
no label is put across an earlier leader line. A label with no free place is left out rather
than drawn over another, so a chart may name fewer points than asked.

Placement needs the final axes position, so the figure is laid out first and its layout
engine switched off afterwards: saving to any format then draws exactly what was measured.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.backend_bases import RendererBase
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation
    from matplotlib.transforms import Bbox

__all__ = ["Label", "crosses", "freeze_figure", "place_labels", "plain"]

_GAP = 3.0  # points between a label and its point, or between two labels
_NEAR = 6.0  # points: a label farther than this from its point (past the first ring) gets a leader line
_SAME_POINT = 4.0  # pixels: points this close are one place on the chart, named once
_MARK = 3.0  # pixels: half the side of the square kept clear around a point
_PAD = 3.0  # pixels kept clear around every box: two labels on one row read as two


@dataclass(frozen=True)
class Label:
    """``text`` to write next to the point ``(x, y)`` in data coordinates."""

    text: str
    x: float
    y: float


def plain(text: str) -> str:
    """``text`` (a module's, model's or device's name) drawn as it reads. matplotlib draws what stands
    between two ``$`` as math (``$\\foo{x}$`` fails, ``price$5 .. $6`` turns italic), so every ``$`` is
    escaped; a character no font draws (a tab, a lone surrogate that no file can encode either) is drawn
    as its escape, ``\\t``, ``\\udcff``."""
    shown = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
    return shown.replace("$", r"\$")


Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in display pixels
Segment = tuple[float, float, float, float]  # a leader line: x0, y0 (the label's centre), x1, y1 (its point)


def freeze_figure(fig: Figure) -> RendererBase:
    """Lay ``fig`` out once (constrained layout included), then keep that layout: labels placed
    in display coordinates stay where they were measured. Returns the renderer that measured."""
    canvas = fig.canvas
    if not hasattr(canvas, "get_renderer"):  # a Figure built without pyplot has no drawing canvas yet
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        canvas = FigureCanvasAgg(fig)
    canvas.draw()
    fig.set_layout_engine("none")
    # matplotlib's stubs leave get_renderer off FigureCanvasBase (typed by the hasattr above)
    renderer: RendererBase = canvas.get_renderer()
    return renderer


def place_labels(
    ax: Axes,
    labels: Iterable[Label],
    *,
    limit: int,
    renderer: RendererBase,
    obstacles: Sequence[Artist] = (),
    fontsize: float = 7,
    color: str = "black",
) -> list[Annotation]:
    """Place up to ``limit`` of ``labels`` (most important first) without overlaps; points
    outside the axes, or on top of a point already named, are skipped. The figure's layout must
    be frozen first (``renderer`` is what :func:`freeze_figure` returns). Each label's text is drawn
    as it reads (:func:`plain`). Returns the texts drawn."""
    frame = _box(ax.get_window_extent(renderer))
    taken = [_box(a.get_window_extent(renderer)) for a in obstacles if a.get_visible()]
    px_per_pt = ax.figure.dpi / 72
    placed: list[Annotation] = []
    named: list[tuple[float, float]] = []
    lines: list[Segment] = []
    points: list[tuple[Label, float, float]] = []
    for label in labels:
        px, py = (float(v) for v in ax.transData.transform((label.x, label.y)))
        if frame[0] <= px <= frame[2] and frame[1] <= py <= frame[3]:
            points.append((label, px, py))
    # Every point, named or not: no label covers one; a leader line may pass over it.
    marks = [(px - _MARK, py - _MARK, px + _MARK, py + _MARK) for _, px, py in points]
    for i, (label, px, py) in enumerate(points):
        if len(placed) >= limit:
            break
        if any(math.hypot(px - qx, py - qy) < _SAME_POINT for qx, qy in named):
            continue
        shown = plain(label.text)
        probe = ax.text(0.5, 0.5, shown, fontsize=fontsize, transform=ax.transAxes)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        width, height = extent.width / px_per_pt, extent.height / px_per_pt
        others = marks[:i] + marks[i + 1 :]  # its own point is kept clear by the gap alone
        spot = _first_free(px, py, width, height, px_per_pt, frame, taken, others, lines)
        if spot is None:
            continue
        dx, dy = spot
        far = _distance(dx, dy, width, height) > _NEAR
        if far:
            lines.append((px + (dx + width / 2) * px_per_pt, py + (dy + height / 2) * px_per_pt, px, py))
        text = ax.annotate(
            shown,
            (label.x, label.y),
            xytext=spot,
            textcoords="offset points",
            ha="left",
            va="bottom",
            fontsize=fontsize,
            color=color,
            annotation_clip=True,
            arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.45", "shrinkA": 0, "shrinkB": 2} if far else None,
        )
        text.set_in_layout(False)  # a long name must not move the axes
        taken.append(_at(px, py, dx, dy, width, height, px_per_pt))
        named.append((px, py))
        placed.append(text)
    return placed


def _first_free(
    px: float,
    py: float,
    width: float,
    height: float,
    px_per_pt: float,
    frame: Box,
    taken: list[Box],
    marks: list[Box],
    lines: list[Segment],
) -> tuple[float, float] | None:
    """The offset (points, lower-left corner from the point) nearest the point whose box is free
    and, for a label with a leader line, whose line crosses no box taken."""
    for dx, dy in _candidates(width, height):
        box = _at(px, py, dx, dy, width, height, px_per_pt)
        inside = frame[0] <= box[0] and box[2] <= frame[2] and frame[1] <= box[1] and box[3] <= frame[3]
        if not inside or any(_overlap(box, other) for other in (*taken, *marks)) or any(crosses(s, box) for s in lines):
            continue
        if _distance(dx, dy, width, height) > _NEAR:
            line = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2, px, py)
            if any(crosses(line, other) for other in taken):
                continue
        return dx, dy
    return None


def _candidates(width: float, height: float) -> list[tuple[float, float]]:
    """Offsets around the point, nearest first (distances in steps of a text row): right of the
    point before left before centred, below before above; farther out, spread sideways too, so
    that a leader line can pass beside the labels nearer the point."""
    step = height + 1
    sideways = [_GAP + j * 30 for j in range(8)] + [-_GAP - width - j * 30 for j in range(8)]
    xs = [*sideways[:1], sideways[8], -width / 2, *sideways[1:8], *sideways[9:]]
    offsets = [(dx, dy) for k in range(16) for dy in (-_GAP - height - k * step, _GAP + k * step) for dx in xs]
    order = {o: i for i, o in enumerate(offsets)}
    return sorted(offsets, key=lambda o: (math.ceil(_distance(o[0], o[1], width, height) / step), order[o]))


def _at(px: float, py: float, dx: float, dy: float, width: float, height: float, px_per_pt: float) -> Box:
    """The box of a label ``width`` x ``height`` points at offset (dx, dy) points from pixel (px, py)."""
    return (px + dx * px_per_pt, py + dy * px_per_pt, px + (dx + width) * px_per_pt, py + (dy + height) * px_per_pt)


def _distance(dx: float, dy: float, width: float, height: float) -> float:
    """From the point (the origin) to the nearest point of the box at offset (dx, dy)."""
    gx = max(dx, 0.0, -(dx + width))
    gy = max(dy, 0.0, -(dy + height))
    return math.hypot(gx, gy)


def _box(bbox: Bbox) -> Box:
    x0, y0, x1, y1 = bbox.x0, bbox.y0, bbox.x1, bbox.y1
    return (float(x0), float(y0), float(x1), float(y1))


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] + _PAD and b[0] < a[2] + _PAD and a[1] < b[3] + _PAD and b[1] < a[3] + _PAD


def crosses(line: Segment, box: Box, pad: float = _PAD) -> bool:
    """Whether the segment passes through ``box`` grown by ``pad`` (Liang-Barsky clipping)."""
    x0, y0, x1, y1 = line
    dx, dy = x1 - x0, y1 - y0
    enter, leave = 0.0, 1.0
    for p, q in (
        (-dx, x0 - (box[0] - pad)),
        (dx, (box[2] + pad) - x0),
        (-dy, y0 - (box[1] - pad)),
        (dy, (box[3] + pad) - y0),
    ):
        if p == 0:
            if q < 0:
                return False  # parallel to this edge and outside it
        elif p < 0:
            enter = max(enter, q / p)
        else:
            leave = min(leave, q / p)
    return enter <= leave
