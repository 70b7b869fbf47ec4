"""One model's analyses as the report ``--format`` names (table, tree, md, repr, json, csv, html,
chrome-trace), with the ``--columns``, ``--depth`` and number flags applied; the roofline's summary
follows the text formats. :func:`number_format` and :func:`write_csv_meta` are shared with
``opcount compare`` and ``llm:`` models.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import report
from ..messages import one_line
from ..report.provenance import export_meta
from .args import UsageError


def render(analyses: dict[str, Any], args: argparse.Namespace) -> str:
    """The report of ``analyses`` (role -> analysis, from :func:`~opcount.cli.analyze.analyze`);
    with a roofline and no ``--columns``, its columns are shown by default."""
    flops = analyses["flops"]
    common: dict[str, Any] = {"activations": analyses.get("activations"), "memory": analyses.get("memory")}
    rl = analyses.get("roofline")
    sp = analyses.get("sparsity")
    if args.format == "html":  # one page: its own columns, summary and charts
        return report.html_report(
            flops,
            rl,
            columns=args.columns,
            max_depth=args.depth,
            meta=export_meta(flops, model=args.model, roofline=rl),
            model=args.model,
            **common,
        )
    if rl is not None:
        common["extra"] = {"roofline": rl} if sp is None else {"roofline": rl, "sparsity": sp}
        if args.columns is None:
            args.columns = ["params", "flops", "time", "time_share", "bound"]
            if args.format == "repr":  # the model string gives every additive column its share
                args.columns.remove("time_share")
            if sp is not None:
                args.columns = ["params", "flops", "sparse_flops", "time", "sparse_time", "speedup", "sparsity"]
    if args.format == "chrome-trace":
        from ..report.trace import to_chrome_trace

        if rl is None:
            raise UsageError("--format chrome-trace lays out the roofline's times: add --hardware NAME")
        return json.dumps(to_chrome_trace(rl, name=args.model))
    text = _render(flops, common, args)
    if rl is not None and args.format not in ("json", "csv"):
        text += "\n\n" + rl.summary()
        if sp is not None:
            text += "\n" + sp.summary()
    return text


def _render(flops: Any, common: dict[str, Any], args: argparse.Namespace) -> str:
    fmt = args.format
    if fmt in ("json", "csv"):
        meta = export_meta(flops, model=args.model, roofline=(common.get("extra") or {}).get("roofline"))
        kw = {"columns": args.columns, "max_depth": args.depth, "meta": meta, **common}
        if fmt == "json":
            return report.to_json(flops, **kw)
        write_csv_meta(args, meta)
        return report.to_csv(flops, level="operators" if args.by_operator else "modules", **kw).rstrip("\n")
    columns = args.columns or ["params", "flops"]
    depth = 3 if args.depth is None else args.depth
    numbers = number_format(args, significant=fmt in ("tree", "md", "repr"))
    if fmt == "md":
        return report.to_markdown(
            flops,
            level="operators" if args.by_operator else "modules",
            columns=columns,
            max_depth=depth,
            number_format=numbers,
            **common,
        )
    if fmt == "repr":
        return report.flop_count_str(flops, columns=columns, number_format=numbers, **common)
    if fmt == "tree":
        return report.tree_str(flops, columns=columns, max_depth=depth, number_format=numbers, **common)
    if args.by_operator:
        cols = [c for c in columns if c != "params"] or ["flops"]
        return report.operator_table(flops, columns=cols, max_depth=args.depth, number_format=numbers, **common)
    return report.module_table(
        flops,
        columns=columns,
        max_depth=depth,
        number_format=numbers,
        show_param_shapes=not args.no_param_shapes,
        **common,
    )


def number_format(args: argparse.Namespace, significant: bool) -> report.NumberFormat:
    """``--units``, ``--decimals`` and ``--sig-figs`` as a number format; ``significant``: the
    format's default is 3 significant figures rather than 3 decimals."""
    unit = {"1": "", None: "auto"}.get(args.units, args.units)
    if args.sig_figs is not None:
        return report.NumberFormat(unit, args.sig_figs, significant=True)
    if args.decimals is not None:
        return report.NumberFormat(unit, args.decimals)
    return report.NumberFormat(unit, 3, significant=significant)


def write_csv_meta(args: argparse.Namespace, meta: Mapping[str, Any]) -> None:
    """``--csv-meta FILE``: what a CSV export was computed from (its JSON ``meta``), written as JSON
    beside it; the CSV itself is a header and rows only, which tools read as they are."""
    path = getattr(args, "csv_meta", None)
    if not path:
        return
    try:
        Path(path).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    except OSError as e:
        raise UsageError(f"--csv-meta {path}: cannot write it ({e.strerror or one_line(e)})") from e
