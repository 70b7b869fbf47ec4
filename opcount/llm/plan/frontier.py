"""The throughput-interactivity frontier of a plan's configurations: for each device type, output tokens a second
per device against output tokens a second per user (1 / mean TPOT), the chart InferenceX draws, with the Pareto
set marked (:func:`pareto`), written as CSV, JSON, a static chart (PNG, SVG) or an interactive page (HTML,
:mod:`.frontier_page`) by the file's ending (:func:`write`).

A configuration is on the frontier when no other of its device type is at least as fast per user and per
device and faster in one; along the frontier, by rising speed per user, the throughput per device falls.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...errors import OpcountValueError
from ...files import save_figure, write_text
from .frontier_page import page
from .points import Point

KINDS = ("csv", "json", "png", "svg", "html")
# the CSV's columns: the point's fields as Point.as_dict names them, then whether it is on its frontier
COLUMNS = (
    "hardware", "precision", "layout", "devices", "concurrency", "rate", "tokens_per_s_per_user",
    "tokens_per_s_per_device", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s", "cost_per_m_tokens",
    "joules_per_token", "tokens_per_s_per_mw", "meets_slo", "binds", "pareto",
)  # fmt: skip


def kind(path: str | Path) -> str:
    """The format ``path``'s ending names; one of :data:`KINDS`, else an error naming them."""
    found = Path(path).suffix.lstrip(".").lower()
    if found not in KINDS:
        raise OpcountValueError(f"{path}: a frontier file ends in {', '.join('.' + k for k in KINDS)}")
    return found


def pareto(points: Sequence[Point]) -> list[Point]:
    """Each device type's configurations that no other of its type dominates on (tokens/s per user, tokens/s
    per device), both to maximise; by device type, then by rising speed per user."""
    kept: list[Point] = []
    for hardware in sorted({p.hardware for p in points}):
        best = -1.0
        mine = [p for p in points if p.hardware == hardware]
        # fastest per user first: a point is kept when it beats every faster one's throughput per device
        for p in sorted(mine, key=lambda q: (-q.tokens_per_s_per_user, -q.tokens_per_s_per_device)):
            if p.tokens_per_s_per_device > best:
                kept.append(p)
                best = p.tokens_per_s_per_device
    return sorted(kept, key=lambda p: (p.hardware, p.tokens_per_s_per_user))


def rows(points: Sequence[Point]) -> list[dict[str, Any]]:
    """Every point as a row of :data:`COLUMNS`, by device type and rising speed per user."""
    front = {id(p) for p in pareto(points)}
    ordered = sorted(points, key=lambda p: (p.hardware, p.tokens_per_s_per_user, -p.tokens_per_s_per_device))
    found = [p.as_dict() | {"pareto": id(p) in front} for p in ordered]
    return [{k: row[k] for k in COLUMNS} for row in found]


def as_csv(points: Sequence[Point]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows(points):
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def as_json(points: Sequence[Point], slo_tpot_s: float | None = None) -> str:
    return json.dumps({"slo_tpot_s": slo_tpot_s, "axes": AXES, "points": rows(points)}, indent=2)


AXES = {"x": "output tokens/s per user (1 / mean TPOT)", "y": "output tokens/s per device"}


def save_chart(points: Sequence[Point], path: str | Path, *, title: str, slo_tpot_s: float | None = None) -> Path:
    """Each device type's points and its frontier line; where a TPOT target is given, the interactivity it
    asks for (``1 / TPOT`` and faster) shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.2), layout="constrained")
    front = pareto(points)
    for i, hardware in enumerate(sorted({p.hardware for p in points})):
        color = f"C{i % 10}"
        mine = [p for p in points if p.hardware == hardware]
        ax.scatter([p.tokens_per_s_per_user for p in mine], [p.tokens_per_s_per_device for p in mine],
                   s=18, alpha=0.45, color=color)  # fmt: skip
        line = [p for p in front if p.hardware == hardware]
        ax.plot([p.tokens_per_s_per_user for p in line], [p.tokens_per_s_per_device for p in line],
                marker="o", color=color, label=f"{hardware} (Pareto)")  # fmt: skip
    if slo_tpot_s:
        right = max([p.tokens_per_s_per_user for p in points] + [1 / slo_tpot_s]) * 1.05
        ax.axvspan(1 / slo_tpot_s, right, color="green", alpha=0.08, label=f"TPOT <= {slo_tpot_s * 1e3:g} ms")
    ax.set_xlabel(AXES["x"])
    ax.set_ylabel(AXES["y"])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)


def write(points: Sequence[Point], path: str | Path, *, title: str = "", slo_tpot_s: float | None = None) -> Path:
    """``points`` in the format ``path``'s ending names (:data:`KINDS`), written whole or not at all."""
    if not points:
        raise OpcountValueError(f"{path}: no configuration ran, so there is no frontier to write")
    found = kind(path)
    if found in ("png", "svg"):
        return save_chart(points, path, title=title, slo_tpot_s=slo_tpot_s)
    text = {
        "csv": lambda: as_csv(points),
        "json": lambda: as_json(points, slo_tpot_s),
        "html": lambda: page(rows(points), title=title, axes=AXES, slo_tpot_s=slo_tpot_s),
    }[found]()
    return write_text(path, text)
