"""One model's analyses as the report ``--format`` names (table, tree, md, repr, json, csv, html),
with the ``--columns``, ``--depth`` and number flags applied; the roofline's summary follows the
text formats. :func:`number_format` is shared with ``opcount compare``.
"""

from __future__ import annotations

import argparse
from typing import Any

from .. import report
from ..report.provenance import export_meta


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
