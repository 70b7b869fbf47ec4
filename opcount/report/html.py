"""The HTML report: one self-contained page (inline CSS, script and SVG charts, nothing fetched)
with the summary, what the numbers were computed from, the module tree (collapsible, with bars
scaled to the model) and a sortable operator table; with a roofline report, its charts.

Pure: the analyses in, the page's text out. The numbers come from :func:`~opcount.report.to_dict`
(the same rows as the JSON export); every name a model supplies (modules, classes, operators) is
escaped, so a module named ``<script>`` is shown, never run. The style sheet and the script are
package data beside this module (``html_report.css``, ``html_report.js``).
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from ..errors import OpcountTypeError, OpcountValueError
from ..units import seconds, si, size
from .columns import flops_unit
from .exports import ROOT, to_dict
from .rows import check_kind, check_max_depth

__all__ = ["html_report"]

# The columns the page shows when none are named, in this order, each with the analysis it needs.
_DEFAULT_COLUMNS = {
    "params": "flops",
    "flops": "flops",
    "activations": "activations",
    "bytes": "memory",
    "time": "roofline",
    "time_share": "roofline",
    "bound": "roofline",
}
_BARS = ("flops", "bytes", "time")  # the statistics drawn as bars, each scaled to the model's total
_HEADERS = {
    "params": "params",
    "flops": "FLOPs",
    "activations": "activations",
    "bytes": "bytes",
    "bytes_read": "bytes read",
    "bytes_written": "bytes written",
    "time": "time",
    "time_share": "% time",
    "bound": "bound",
}
_OPEN_DEPTH = 1  # the page opens with the model and its direct children shown
_UNCALLED = " (never called in the traced forward)"


def html_report(
    analysis: Any,
    roofline: Any = None,
    *,
    memory: Any = None,
    activations: Any = None,
    columns: Sequence[str] | None = None,
    max_depth: int | None = None,
    model: str | None = None,
    meta: Mapping[str, Any] | bool = True,
    charts: bool = True,
    title: str | None = None,
) -> str:
    """The report of ``analysis`` (a :class:`~opcount.FlopCountAnalysis`) as one HTML page.

    ``roofline``: a :class:`~opcount.roofline.RooflineReport` adds the time, its share and the
    bound, and (``charts=True``, matplotlib installed) the roofline and time charts as inline SVG;
    without matplotlib the page says so. ``memory`` (a :class:`~opcount.MemoryTrafficAnalysis`)
    adds bytes moved, ``activations`` the activation counts. ``columns``: the tree's columns
    (keys of :data:`~opcount.report.COLUMNS`), by default every one of params, flops,
    activations, bytes, time, % time and bound whose analysis is given. ``max_depth``: the
    tree's depth (default: every module). ``model``: the name the page gives the model (default
    its class); ``meta`` as in :func:`~opcount.report.to_dict`.
    """
    check_max_depth(max_depth, optional=True)
    _check_arguments(analysis, roofline, memory, activations, meta)
    extra = {"roofline": roofline} if roofline is not None else {}
    given = {"flops": analysis, "activations": activations, "memory": memory, "roofline": roofline}
    if columns is None:
        columns = [c for c in _DEFAULT_COLUMNS if given[_DEFAULT_COLUMNS[c]] is not None]
    if meta is True:
        from .provenance import export_meta

        meta = export_meta(analysis, model=model, roofline=roofline)
    data = to_dict(
        analysis,
        columns=columns,
        max_depth=max_depth,
        activations=activations,
        memory=memory,
        extra=extra,
        meta=meta,
    )
    described = data.get("meta") or {}
    name = model or described.get("model") or data["model"]
    parts = [
        _summary(data, roofline),
        _unsupported(data["unsupported_ops"]),
        _tree(data),
        _operators(data),
        _charts(roofline) if roofline is not None and charts else "",
        _meta(described),
    ]
    return _page(title or f"opcount: {name}", name, "\n".join(p for p in parts if p))


def _check_arguments(analysis: Any, roofline: Any, memory: Any, activations: Any, meta: Any) -> None:
    check_kind("analysis", analysis, ("module_tree", "by_module", "flops_per_mac"), "a FlopCountAnalysis")
    if roofline is not None:
        check_kind("roofline", roofline, ("hardware", "layers", "total_time"), "a RooflineReport (opcount.roofline)")
    if memory is not None:
        check_kind("memory", memory, ("module_tree", "traffic_per_call"), "a MemoryTrafficAnalysis")
    if activations is not None:
        check_kind("activations", activations, ("module_tree", "by_module"), "an ActivationCountAnalysis")
    if not isinstance(meta, (Mapping, bool)):
        raise OpcountTypeError(f"meta must be a mapping or a bool, got {type(meta).__name__}")


# ----- the page ------------------------------------------------------------------------------


def _asset(name: str) -> str:
    return resources.files(__package__ or "opcount.report").joinpath(name).read_text(encoding="utf-8")


def _page(title: str, name: str, body: str) -> str:
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>\n{_asset('html_report.css')}</style>\n</head>\n<body>\n"
        f'<header><h1>{_e(name)}</h1><p class="sub">what it costs, module by module and operator by '
        "operator (opcount)</p></header>\n"
        f"<main>\n{body}\n</main>\n<script>\n{_asset('html_report.js')}</script>\n</body>\n</html>"
    )


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _section(ident: str, heading: str, content: str, note: str = "") -> str:
    note_html = f'<p class="note">{note}</p>' if note else ""
    return f'<section id="{ident}">\n<h2>{_e(heading)}</h2>{note_html}\n{content}\n</section>'


# ----- numbers -------------------------------------------------------------------------------


def _head(key: str, data: Mapping[str, Any]) -> str:
    """A column's header; a count says its unit (MACs or FLOPs, by the export's convention)."""
    if key == "flops":
        return flops_unit((data.get("meta") or {}).get("flops_per_mac"))
    return _HEADERS.get(key, key)


def _cell_text(key: str, value: Any) -> str:
    """A value as its column writes it: 3 significant figures with a prefix, times in seconds."""
    if value is None:
        return ""
    if key == "bound":
        return str(value)
    if key == "time_share" or key == "percent":
        return f"{value:.1f}%"
    if key == "time":
        return seconds(value)
    if key.startswith("bytes"):
        return size(value)
    if key == "intensity":
        return f"{value:.3g}"
    return si(value)


def _exact(value: Any) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


# ----- sections ------------------------------------------------------------------------------


def _summary(data: Mapping[str, Any], roofline: Any) -> str:
    total = data["total"]
    described = data.get("meta") or {}
    per_mac = described.get("flops_per_mac")
    cards: list[tuple[str, str, Any, str]] = []  # label, text, exact value, hint
    if "flops" in total:
        convention = f"{per_mac} per multiply-add" if per_mac else ""
        unit = flops_unit(per_mac)
        cards.append((unit, si(total["flops"], unit=unit.rstrip("s")), total["flops"], convention))
    if "params" in total:
        cards.append(("parameters", si(total["params"]), total["params"], ""))
    if "activations" in total:
        cards.append(("activations", si(total["activations"]), total["activations"], "elements written"))
    if "bytes" in total:
        cards.append(("bytes moved", size(total["bytes"]), total["bytes"], "read + written"))
    if roofline is not None:
        time = roofline.total_time
        cards.append(("roofline time", seconds(time), time, f"speed of light, {roofline.dtype}"))
        cards.append(("bound", roofline.total().limited_by or "n/a", None, roofline.hardware.name))
    items = "".join(
        f'<div class="card"><div class="label">{_e(label)}</div>'
        f'<div class="value" title="{_e(_exact(value))}">{_e(text)}</div><div class="hint">{_e(hint)}</div></div>'
        for label, text, value, hint in cards
    )
    line = f'<p class="roofline">{_e(roofline.summary())}</p>' if roofline is not None else ""
    return _section("summary", "Summary", f'<div class="cards">{items}</div>{line}')


def _unsupported(found: Mapping[str, Mapping[str, int]]) -> str:
    ops: dict[str, int] = {}
    for counts in found.values():
        for op, n in counts.items():
            ops[op] = max(ops.get(op, 0), n)
    if not ops:
        return ""
    listed = ", ".join(f"<code>{_e(op)}</code> ({n}&times;)" for op, n in sorted(ops.items()))
    return (
        '<section id="unsupported" class="warning"><h2>Not counted</h2><p>These operators have no '
        f"formula and are left out of every number on this page: {listed}.</p></section>"
    )


def _tree(data: Mapping[str, Any]) -> str:
    modules = data["modules"]
    keys = list(data["columns"])
    root = next((m for m in modules if m["parent"] is None), None)  # named ROOT, "." as in every export
    if root is None:
        raise OpcountValueError("the export has no row for the model itself")
    scale = {k: root.get(k) for k in _BARS if k in keys}
    children: dict[str, list[Mapping[str, Any]]] = {}
    for m in modules:
        if m["parent"] is not None:
            children.setdefault(m["parent"], []).append(m)
    heads = "".join(f'<span class="num">{_e(_head(k, data))}</span>' for k in keys)
    header = f'<div class="row head"><span class="name">module</span><span class="type">type</span>{heads}</div>'
    # Children before their parents, from a stack: a model may nest deeper than Python's recursion limit.
    order, pending = [], [root]
    while pending:
        row = pending.pop()
        order.append(row)
        pending.extend(reversed(children.get(row["name"], ())))
    html: dict[str, str] = {}
    for row in reversed(order):
        inner = [html.pop(kid["name"]) for kid in children.get(row["name"], ())]
        html[row["name"]] = _node(row, inner, keys, scale)
    body = html[root["name"]]
    buttons = (
        '<div class="tools"><button type="button" data-tree="expand">expand all</button>'
        '<button type="button" data-tree="collapse">collapse all</button></div>'
    )
    bars = ", ".join(_head(k, data) for k in scale)
    note = f"Click a module to show or hide its children. Bars: {bars}, as a share of the whole model." if bars else ""
    grid = f"--cols: {len(keys)}"
    content = f'{buttons}<div class="tree" id="tree" style="{grid}">{header}{body}</div>'
    return _section("modules", "Modules", content, _e(note))


def _node(row: Mapping[str, Any], kids: Sequence[str], keys: Sequence[str], scale: Mapping[str, Any]) -> str:
    """One module's row, around ``kids``, its children's rows already written."""
    name, depth = row["name"], row["depth"]
    parent = row["parent"]
    label = name[len(parent) + 1 :] if parent and parent != ROOT else name
    cells = "".join(_tree_cell(k, row.get(k), scale.get(k)) for k in keys)
    called = "" if row["called"] else " uncalled"
    line = (
        f'<span class="name" style="--depth: {depth}" title="{_e(name if parent is not None else "the whole model")}'
        f'{_UNCALLED if called else ""}">'
        f'<span class="twisty"></span>{_e(label) if parent is not None else "<b>model</b>"}</span>'
        f'<span class="type">{_e(row["type"])}</span>{cells}'
    )
    if not kids:
        return f'<div class="row leaf{called}" data-module="{_e(name)}">{line}</div>'
    inner = "".join(kids)
    opened = " open" if depth < _OPEN_DEPTH else ""
    return (
        f'<details class="node" data-module="{_e(name)}"{opened}>'
        f'<summary class="row{called}">{line}</summary>{inner}</details>'
    )


def _tree_cell(key: str, value: Any, total: Any) -> str:
    text = _e(_cell_text(key, value))
    exact = _e(_exact(value))
    if key not in _BARS or not total or value is None:
        return f'<span class="num" title="{exact}">{text}</span>'
    share = max(0.0, min(100.0, 100 * value / total))
    return (
        f'<span class="num bar {key}" title="{exact} ({share:.1f}% of the model)">'
        f'<span class="fill" style="width: {share:.2f}%"></span><span class="val">{text}</span></span>'
    )


def _operators(data: Mapping[str, Any]) -> str:
    """One row per operator over the whole model (the model's own module x operator rows)."""
    keys = [k for k in data["operator_columns"] if k != "time_share"]
    total = data["total"]
    rows = [r for r in data["operators"] if r["module"] == ROOT]
    columns: list[tuple[str, str, str]] = [("operator", "operator", "text")]
    for k in keys:
        columns.append((k, _head(k, data), "text" if k == "bound" else "number"))
        if k in ("flops", "bytes", "time"):
            columns.append((f"{k}%", f"% {_head(k, data)}", "number"))
    # The slowest operator first; without a roofline the heaviest, without a count the names in order.
    first = next((k for k in ("time", "flops", "bytes") if k in keys), None)
    if first is None:
        rows.sort(key=lambda r: r["operator"])
    else:
        rows.sort(key=lambda r: -(r.get(first) or 0))
    order = {first or "operator": "descending" if first else "ascending"}
    head = "".join(
        f'<th data-key="{_e(key)}" data-type="{kind}" scope="col"'
        + (f' aria-sort="{order[key]}"' if key in order else "")
        + f">{_e(label)}</th>"
        for key, label, kind in columns
    )
    body = []
    for r in rows:
        cells = [f'<td data-v="{_e(r["operator"])}"><code>{_e(r["operator"])}</code></td>']
        for key, _, kind in columns[1:]:
            if key.endswith("%"):
                base = key[:-1]
                whole = total.get(base)
                value = 100 * r[base] / whole if whole and r.get(base) is not None else None
                text = "" if value is None else f"{value:.1f}%"
            else:
                value = r.get(key)
                text = _cell_text(key, value)
            bad = value is None or (isinstance(value, float) and not math.isfinite(value))
            v = "" if bad else _exact(value) if kind == "number" else str(value)
            cells.append(f'<td data-v="{_e(v)}" title="{_e(_exact(value))}">{_e(text)}</td>')
        body.append(f"<tr>{''.join(cells)}</tr>")
    table = (
        f'<table class="sortable" id="operators"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    )
    note = "Every operator over the whole model. Click a column's header to sort by it; click again to reverse."
    return _section("operators", "Operators", table, note)


def _charts(roofline: Any) -> str:
    try:
        import matplotlib  # noqa: F401  (plot.py imports it lazily; its absence is said here)
    except ImportError:
        note = "The roofline and time charts need matplotlib: <code>pip install 'opcount[plot]'</code>."
        return _section("charts", "Charts", "", note)
    from ..roofline.plot import roofline_chart, time_chart

    figures = [("roofline", roofline_chart(roofline)), ("time", time_chart(roofline))]
    inner = "".join(f'<figure class="chart" id="chart-{key}">{_svg(fig)}</figure>' for key, fig in figures)
    return _section("charts", "Charts", inner)


def _svg(figure: Any) -> str:
    """A matplotlib figure as inline SVG: text kept as text (small, searchable), ids salted the
    same on every run so one model's page is the same file twice."""
    import matplotlib

    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "opcount"}):
        figure.savefig(out, format="svg", metadata={"Date": None})
    text = out.getvalue()
    return text[text.index("<svg") :]  # the XML declaration and DOCTYPE are not allowed inside HTML


def _meta(described: Mapping[str, Any]) -> str:
    if not described:
        return ""
    rows = []
    for key, value in described.items():
        if key == "inputs":
            text = "; ".join(f"{i['name']}: {'×'.join(map(str, i['shape'])) or 'scalar'} {i['dtype']}" for i in value)  # noqa: RUF001 -- the page writes shapes with a multiplication sign
        else:
            text = "—" if value is None else str(value)
        rows.append(f'<tr><th scope="row">{_e(key)}</th><td>{_e(text)}</td></tr>')
    table = f'<table class="meta">{"".join(rows)}</table>'
    return _section("meta", "What these numbers were computed from", table)
