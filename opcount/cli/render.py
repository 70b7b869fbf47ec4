"""One model's analyses as the report ``--format`` names (table, tree, md, repr, json, csv, html,
chrome-trace), with the ``--columns``, ``--depth`` and number flags applied; the roofline's summary
follows the text formats. :func:`number_format` and :func:`write_csv_meta` are shared with
``opcount compare`` and ``llm:`` models.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .. import report
from ..files import write_text
from ..messages import one_line
from ..report.provenance import export_meta
from .analyze import Analyses
from .args import UsageError
from .options import Rendering


def render(analyses: Analyses, rendering: Rendering, model: str) -> str:
    """The report of ``analyses`` (``model``: the spec, named in exports) laid out as ``rendering`` says;
    with a roofline and no ``--columns``, its columns are shown by default (:func:`shown_columns`)."""
    if rendering.format == "html":  # one page: its own columns, summary and charts
        return report.html_report(
            analyses.flops,
            analyses.roofline,
            columns=None if rendering.columns is None else list(rendering.columns),
            max_depth=rendering.depth,
            meta=export_meta(analyses.flops, model=model, roofline=analyses.roofline),
            model=model,
            activations=analyses.activations,
            memory=analyses.memory,
        )
    if rendering.format == "chrome-trace":
        from ..report.trace import to_chrome_trace

        if analyses.roofline is None:
            raise UsageError("--format chrome-trace lays out the roofline's times: add --hardware NAME")
        return json.dumps(to_chrome_trace(analyses.roofline, name=model))
    columns = shown_columns(analyses, rendering)
    text = _render(analyses, columns, rendering, model)
    rl, sp = analyses.roofline, analyses.sparsity
    if rl is not None and rendering.format not in ("json", "csv"):
        text += "\n\n" + rl.summary()
        if sp is not None:
            text += "\n" + sp.summary()
    return text


def shown_columns(analyses: Analyses, rendering: Rendering) -> list[str] | None:
    """The columns the report shows: ``--columns``, or with a roofline its default columns; None:
    the format's own default (params and flops; json and csv: every exact statistic computed)."""
    if rendering.columns is not None:
        return list(rendering.columns)
    if rendering.format == "html":  # the page picks its own from the analyses given
        return None
    if analyses.sparsity is not None:
        return ["params", "flops", "sparse_flops", "time", "sparse_time", "speedup", "sparsity"]
    if analyses.roofline is not None:
        columns = ["params", "flops", "time", "time_share", "bound"]
        if rendering.format == "repr":  # the model string gives every additive column its share
            columns.remove("time_share")
        return columns
    return None


def _render(analyses: Analyses, shown: list[str] | None, rendering: Rendering, model: str) -> str:
    flops, fmt = analyses.flops, rendering.format
    common: dict[str, Any] = {"activations": analyses.activations, "memory": analyses.memory}
    extra = analyses.sources().extra
    if extra:
        common["extra"] = extra
    if fmt in ("json", "csv"):
        meta = export_meta(flops, model=model, roofline=analyses.roofline)
        kw = {"columns": shown, "max_depth": rendering.depth, "meta": meta, **common}
        if fmt == "json":
            return report.to_json(flops, **kw)
        write_csv_meta(rendering.csv_meta, meta)
        return report.to_csv(
            flops, level="operators" if rendering.by_operator else "modules", raw=rendering.csv_raw, **kw
        ).rstrip("\n")
    columns = shown or ["params", "flops"]
    depth = 3 if rendering.depth is None else rendering.depth
    numbers = number_format(rendering, significant=fmt in ("tree", "md", "repr"))
    if fmt == "md":
        return report.to_markdown(
            flops,
            level="operators" if rendering.by_operator else "modules",
            columns=columns,
            max_depth=depth,
            number_format=numbers,
            **common,
        )
    if fmt == "repr":
        return report.flop_count_str(flops, columns=columns, number_format=numbers, **common)
    if fmt == "tree":
        return report.tree_str(flops, columns=columns, max_depth=depth, number_format=numbers, **common)
    if rendering.by_operator:
        cols = [c for c in columns if c != "params"] or ["flops"]
        return report.operator_table(flops, columns=cols, max_depth=rendering.depth, number_format=numbers, **common)
    return report.module_table(
        flops,
        columns=columns,
        max_depth=depth,
        number_format=numbers,
        show_param_shapes=rendering.param_shapes,
        **common,
    )


def number_format(rendering: Rendering, significant: bool) -> report.NumberFormat:
    """``--units``, ``--decimals`` and ``--sig-figs`` as a number format; ``significant``: the
    format's default is 3 significant figures rather than 3 decimals."""
    unit = "auto" if rendering.units is None else "" if rendering.units == "1" else rendering.units
    if rendering.sig_figs is not None:
        return report.NumberFormat(unit, rendering.sig_figs, significant=True)
    if rendering.decimals is not None:
        return report.NumberFormat(unit, rendering.decimals)
    return report.NumberFormat(unit, 3, significant=significant)


def write_csv_meta(path: str | None, meta: Mapping[str, Any]) -> None:
    """``--csv-meta FILE`` (``path``): what a CSV export was computed from (its JSON ``meta``), written
    as JSON beside it; the CSV itself is a header and rows only, which tools read as they are."""
    if not path:
        return
    try:
        write_text(path, json.dumps(meta, indent=2) + "\n")
    except OSError as e:
        raise UsageError(f"--csv-meta {path}: cannot write it ({e.strerror or one_line(e)})") from e
