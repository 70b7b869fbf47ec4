"""The frontier as one self-contained HTML page (:func:`page`): an inline SVG chart drawn here, one ``circle`` a
configuration, each device type's Pareto line, the interactivity a TPOT target asks for shaded, and a small
script showing a point's layout, latencies and cost where the pointer (or the keyboard's focus) rests. Nothing
is fetched: no font, no script, no style from elsewhere, so the page opens offline and as a file."""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
WIDTH, HEIGHT = 760, 460
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 50  # the plot area's margins, in pixels

STYLE = """body{font:14px system-ui,sans-serif;margin:24px;color:#222}h1{font-size:18px}
svg{background:#fff;border:1px solid #ddd}.point{cursor:pointer;stroke:#fff;stroke-width:1}
.point.pareto{stroke:#000;stroke-width:1.5}.point:focus{outline:none;stroke:#000;stroke-width:3}
.axis{stroke:#999}.grid{stroke:#eee}.tick{font-size:11px;fill:#555}
#tip{position:absolute;display:none;background:#fffffa;border:1px solid #aaa;padding:6px 8px;font-size:12px;
pointer-events:none;white-space:pre}.legend span{display:inline-block;margin-right:16px}
.swatch{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:5px}"""

SCRIPT = """(function () {
  var rows = JSON.parse(document.getElementById("frontier-data").textContent);
  var tip = document.getElementById("tip");
  function ms(s) { return s === null ? "-" : (s * 1e3).toPrecision(3) + " ms"; }
  function num(v, d) { return v === null ? "-" : Number(v).toPrecision(d); }
  function text(r) {
    return [r.hardware + "  " + r.layout + "  (" + r.devices + " devices" + (r.precision ? ", " + r.precision : "") + ")",
      (r.concurrency !== null ? r.concurrency + " clients" : r.rate + " requests/s") + (r.pareto ? "  - on the frontier" : ""),
      "per user " + num(r.tokens_per_s_per_user, 4) + " tok/s, per device " + num(r.tokens_per_s_per_device, 4) + " tok/s",
      "TTFT p50 " + ms(r.ttft_p50_s) + ", p90 " + ms(r.ttft_p90_s),
      "TPOT p50 " + ms(r.tpot_p50_s) + ", p90 " + ms(r.tpot_p90_s),
      "$ per M output tokens " + num(r.cost_per_m_tokens, 3) + ", J/token " + num(r.joules_per_token, 3),
      (r.meets_slo ? "meets the targets" : "misses the targets") + "; binds: " + r.binds].join("\\n");
  }
  function show(e) {
    var r = rows[Number(e.target.getAttribute("data-i"))];
    tip.textContent = text(r);
    var box = e.target.getBoundingClientRect();
    tip.style.left = (window.scrollX + box.right + 8) + "px";
    tip.style.top = (window.scrollY + box.top - 8) + "px";
    tip.style.display = "block";
  }
  function hide() { tip.style.display = "none"; }
  document.querySelectorAll("circle.point").forEach(function (c) {
    c.addEventListener("mouseenter", show); c.addEventListener("focus", show);
    c.addEventListener("mouseleave", hide); c.addEventListener("blur", hide);
  });
})();"""


def ticks(low: float, high: float, count: int = 6) -> list[float]:
    """Round tick values covering ``[low, high]`` (1, 2 or 5 times a power of ten apart)."""
    span = max(high - low, 1e-12)
    raw = span / count
    step = min((m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
    start = math.floor(low / step) * step
    return [start + i * step for i in range(math.ceil((high - start) / step - 1e-9) + 1)]


def _scale(values: Sequence[float], extra: Sequence[float] = ()) -> list[float]:
    """The ticks of an axis from 0 past the largest value: its first and last are the axis's ends."""
    found = [*values, *extra]
    high = max(found) if found else 1.0
    return ticks(0.0, high * 1.05 if high > 0 else 1.0)


def page(rows: Sequence[Mapping[str, Any]], *, title: str, axes: Mapping[str, str], slo_tpot_s: float | None) -> str:
    """The page for the frontier's ``rows`` (:func:`.frontier.rows`)."""
    target = 1 / slo_tpot_s if slo_tpot_s else None
    xs = _scale([r["tokens_per_s_per_user"] for r in rows], [target] if target else [])
    ys = _scale([r["tokens_per_s_per_device"] for r in rows])
    (x0, x1), (y0, y1) = (xs[0], xs[-1]), (ys[0], ys[-1])
    w, h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(v: float) -> float:
        return LEFT + (v - x0) / (x1 - x0) * w

    def y(v: float) -> float:
        return TOP + h - (v - y0) / (y1 - y0) * h

    colors = {hw: PALETTE[i % len(PALETTE)] for i, hw in enumerate(sorted({r["hardware"] for r in rows}))}
    parts = [f'<svg id="chart" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="frontier">']
    if target:
        parts.append(
            f'<rect id="slo" x="{x(target):.1f}" y="{TOP}" width="{max(0.0, LEFT + w - x(target)):.1f}" '
            f'height="{h}" fill="#2ca02c" fill-opacity="0.08"><title>TPOT target met: at least {target:.3g} '
            "tokens/s per user</title></rect>"
        )
    for v in xs:
        parts.append(f'<line class="grid" x1="{x(v):.1f}" x2="{x(v):.1f}" y1="{TOP}" y2="{TOP + h}"/>')
        parts.append(f'<text class="tick" x="{x(v):.1f}" y="{TOP + h + 16}" text-anchor="middle">{v:g}</text>')
    for v in ys:
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{LEFT + w}" y1="{y(v):.1f}" y2="{y(v):.1f}"/>')
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    parts += [
        f'<line class="axis" x1="{LEFT}" x2="{LEFT + w}" y1="{TOP + h}" y2="{TOP + h}"/>',
        f'<line class="axis" x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{TOP + h}"/>',
        f'<text x="{LEFT + w / 2}" y="{HEIGHT - 10}" text-anchor="middle">{html.escape(axes["x"])}</text>',
        f'<text transform="translate(16 {TOP + h / 2}) rotate(-90)" text-anchor="middle">{html.escape(axes["y"])}</text>',
    ]
    for hw, color in colors.items():
        line = [r for r in rows if r["hardware"] == hw and r["pareto"]]
        dots = " ".join(f"{x(r['tokens_per_s_per_user']):.1f},{y(r['tokens_per_s_per_device']):.1f}" for r in line)
        parts.append(f'<polyline class="frontier" points="{dots}" fill="none" stroke="{color}" stroke-width="2"/>')
    for i, r in enumerate(rows):
        kind = "point pareto" if r["pareto"] else "point"
        parts.append(
            f'<circle class="{kind}" data-i="{i}" tabindex="0" cx="{x(r["tokens_per_s_per_user"]):.1f}" '
            f'cy="{y(r["tokens_per_s_per_device"]):.1f}" r="{6 if r["pareto"] else 4}" fill="{colors[r["hardware"]]}" '
            f'fill-opacity="{1 if r["meets_slo"] else 0.35}"/>'
        )
    parts.append("</svg>")
    legend = "".join(
        f'<span><i class="swatch" style="background:{c}"></i>{html.escape(hw)}</span>' for hw, c in colors.items()
    )
    data = json.dumps(list(rows)).replace("</", "<\\/")  # no "</script>" inside the data
    heading = html.escape(title or "Throughput against interactivity")
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">', f"<title>{heading}</title>",
        f"<style>{STYLE}</style>", "</head>", "<body>", f"<h1>{heading}</h1>",
        f'<p class="legend">{legend} Ringed: on the frontier (Pareto). Faded: misses the targets.'
        + (f" Shaded: TPOT at most {slo_tpot_s * 1e3:g} ms." if slo_tpot_s else "") + "</p>",
        "".join(parts), '<div id="tip" role="tooltip"></div>',
        f'<script type="application/json" id="frontier-data">{data}</script>', f"<script>{SCRIPT}</script>",
        "</body>", "</html>",
    ])  # fmt: skip
