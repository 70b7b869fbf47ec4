"""``opcount compare MODEL [MODEL ...]``: several models side by side.

Each model is built, traced and analyzed as ``opcount MODEL`` would (the same loaders, inputs,
analyses and flags), then reduced to its totals: one row per model, or with ``--by-operator``
one row per operator. Text formats (table, md) put the models in columns there, so an operator
reads across the models; machine formats (json, csv) stay long, one row per model and operator,
the shape pandas pivots (``df.pivot(index="operator", columns="model")``).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any, TextIO

import tabulate
import torch

from .. import report
from ..errors import OpcountError
from ..messages import first_line
from ..report.provenance import export_meta
from . import models as cli_models
from .analyze import analyze, local_hardware
from .args import UsageError, check_counts, check_output_paths
from .progress import Progress
from .render import number_format, write_csv_meta
from .warning_capture import Caught, captured_warnings, unsupported, warning_lines

# The fields of an export's meta that differ from model to model; the others (versions, tracer,
# preset, flops per mac, hardware) are the same for every model, since the flags are shared.
MODEL_FIELDS = ("model", "model_class", "inputs", "roofline_dtype")
TEXT_FORMATS = ("table", "md")


@dataclass(frozen=True)
class Measured:
    """One model's analyses, ready to report."""

    spec: str
    sources: report.Sources
    meta: dict[str, Any]

    def total(self, column: report.Column) -> Any:
        return column.modules(self.sources).get("", 0 if column.additive else None)

    def operators(self, column: report.Column) -> dict[str, Any]:
        assert column.operators is not None
        return dict(column.operators(self.sources).get("", {}))


def compare(args: argparse.Namespace, stderr: TextIO) -> str:
    """Analyze every model of ``args.models`` and report them side by side."""
    _check(args)
    spinner = Progress(stderr, enabled=False if args.debug else None)
    measured: list[Measured] = []
    caught: list[Caught] = []
    uses_transformers = any(str(spec).startswith(("hf:", "llm:")) for spec in args.models)
    with captured_warnings(args.debug, uses_transformers) as collect:
        try:
            if isinstance(args.hardware, str):  # --hardware local, measured once for every model
                args.hardware = local_hardware(args, spinner)
            elif getattr(args, "recalibrate", False):
                raise UsageError("--recalibrate applies to --hardware local")
            shared = collect.take()  # the calibration's, if any: said once, not per model
            for spec in args.models:
                measured.append(_measure(spec, args, spinner))
                caught.append(collect.take())
        finally:
            spinner.close()
    keys = args.columns or _default_columns(measured[0].sources)
    if not args.quiet:  # as `opcount MODEL` warns, each line naming its model
        verbose = args.verbose or args.debug
        lines = warning_lines(shared, None, verbose)
        for m, one in zip(measured, caught, strict=True):
            for line in warning_lines(one, unsupported(m.sources, keys), verbose):
                kind, _, text = line.partition(": ")
                lines.append(f"{kind}: {m.spec}: {text}")
        stderr.writelines(f"opcount: {line}\n" for line in lines)
    columns = report.resolve_columns(keys, measured[0].sources)
    if args.by_operator:
        columns = [c for c in columns if c.operators is not None]
        if not columns:
            raise UsageError("--by-operator: the columns chosen have no per-operator breakdown")
    return _render(measured, columns, args)


def _check(args: argparse.Namespace) -> None:
    if args.format not in (*TEXT_FORMATS, "json", "csv"):
        raise UsageError(f"opcount compare prints table, md, json or csv, not {args.format}")
    refused = {
        "--depth": args.depth is not None,
        "--no-param-shapes": args.no_param_shapes,
        "--profile": args.profile,
        "--plot": args.plot is not None,
    }
    if any(refused.values()):
        flags = [flag for flag, given in refused.items() if given]
        verb = "applies" if len(flags) == 1 else "apply"
        raise UsageError(
            f"opcount compare reports each model's totals: {', '.join(flags)} {verb} to one model's report"
        )
    if args.format in ("json", "csv") and (args.units or args.decimals is not None or args.sig_figs is not None):
        raise UsageError("--units, --decimals and --sig-figs apply to text formats; json and csv are exact")
    check_counts(args)
    from .llm import LLM_FLAGS

    llm = [spec for spec in args.models if spec.startswith("llm:")]
    llm_flags = [f"--{f.replace('_', '-')}" for f in LLM_FLAGS if getattr(args, f, None) is not None]
    if llm or llm_flags:
        raise UsageError(
            f"opcount compare analyzes whole models, not LLM phases ({', '.join(llm + llm_flags)}): "
            "compare points with opcount llm:NAME --sweep KEY=V1,V2"
        )
    twice = sorted({spec for spec in args.models if args.models.count(spec) > 1})
    if twice:
        raise UsageError(f"model {', '.join(twice)} named twice")
    check_output_paths(args)  # as `opcount MODEL` does: a folder given to -o should not cost the analyses


def _measure(spec: str, args: argparse.Namespace, spinner: Any) -> Measured:
    """``spec`` built and analyzed as ``opcount spec`` does; errors name the model."""
    one = argparse.Namespace(**{**vars(args), "model": spec})
    torch.manual_seed(0)  # each model sees the inputs and weights it would see alone
    try:
        spinner.update(f"building {spec}")
        loaded = cli_models.load(spec, one)
        with torch.no_grad():
            found = analyze(loaded, one, spinner)
    except (OpcountError, ValueError, OSError) as e:
        raise UsageError(f"{spec}: {first_line(e, type(e).__name__)}") from e
    extra: dict[str, Any] = {role: found[role] for role in ("roofline", "sparsity") if role in found}
    sources = report.Sources(found["flops"], found.get("activations"), found.get("memory"), extra)
    return Measured(spec, sources, export_meta(found["flops"], model=spec, roofline=extra.get("roofline")))


def _default_columns(sources: report.Sources) -> list[str]:
    if sources.get("sparsity") is not None:
        return ["params", "flops", "sparse_flops", "time", "sparse_time", "speedup"]
    if sources.get("roofline") is not None:
        return ["params", "flops", "time", "bound"]
    return ["params", "flops"]


# ================================================================================================
# Rendering
# ================================================================================================
def _render(measured: list[Measured], columns: list[report.Column], args: argparse.Namespace) -> str:
    if args.format == "json":
        return json.dumps(_to_dict(measured, columns, args.by_operator), indent=2)
    if args.format == "csv":
        return _to_csv(measured, columns, args).rstrip("\n")
    fmt = number_format(args, significant=args.format == "md")
    headers, rows = _operator_rows(measured, columns, fmt) if args.by_operator else _model_rows(measured, columns, fmt)
    # md right-aligns numbers as to_markdown does; the table keeps fvcore's left-aligned cells
    aligns = ["left", *(["right"] * (len(headers) - 1))] if args.format == "md" else None
    text = tabulate.tabulate(rows, headers=headers, tablefmt="pipe", colalign=aligns, disable_numparse=True)
    return text + _footer(measured)


def _model_rows(
    measured: list[Measured], columns: list[report.Column], fmt: report.NumberFormat
) -> tuple[list[str], list[list[str]]]:
    rows = []
    for m in measured:
        rows.append([m.spec, *(_cell(c, m.total(c), fmt) for c in columns)])
    return ["model", *(c.header for c in columns)], rows


def _operator_rows(
    measured: list[Measured], columns: list[report.Column], fmt: report.NumberFormat
) -> tuple[list[str], list[list[str]]]:
    """One row per operator, a column per model (and per statistic when there are several)."""
    tables = [{c.key: m.operators(c) for c in columns} for m in measured]
    first = columns[0].key

    def weight(op: str) -> float:  # heaviest first, by the first statistic's largest value
        return max((t[first].get(op) or 0 for t in tables), default=0)

    found = {op for t in tables for values in t.values() for op, v in values.items() if v}
    ops = sorted(found, key=lambda op: (-weight(op), op))
    headers = ["operator"]
    for m in measured:
        headers += [m.spec if len(columns) == 1 else f"{m.spec} {c.header}" for c in columns]
    rows = [[op, *(_cell(c, t[c.key].get(op), fmt) for t in tables for c in columns)] for op in ops]
    return headers, rows


def _cell(column: report.Column, value: Any, fmt: report.NumberFormat) -> str:
    return "" if value is None else column.render(value, fmt)


def _footer(measured: list[Measured]) -> str:
    roofs = {(m.meta["hardware"], m.meta["roofline_dtype"]) for m in measured if m.meta["hardware"]}
    if not roofs:
        return ""
    where = "; ".join(f"{hw}, {dtype}" for hw, dtype in sorted(roofs))
    return f"\n\ntime: speed-of-light latency on {where} (roofline; docs/roofline.md)"


def _shared_meta(measured: list[Measured]) -> dict[str, Any]:
    return {k: v for k, v in measured[0].meta.items() if k not in MODEL_FIELDS}


def _model_meta(m: Measured) -> dict[str, Any]:
    return {k: m.meta[k] for k in MODEL_FIELDS if k != "model"}


def _to_dict(measured: list[Measured], columns: list[report.Column], by_operator: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "meta": _shared_meta(measured),
        "columns": [c.key for c in columns],
        "models": [
            {"model": m.spec, **_model_meta(m), "total": {c.key: report.export_number(m.total(c)) for c in columns}}
            for m in measured
        ],
    }
    if by_operator:
        data["operators"] = _long_operator_rows(measured, columns)
    return data


def _long_operator_rows(measured: list[Measured], columns: list[report.Column]) -> list[dict[str, Any]]:
    rows = []
    for m in measured:
        tables = {c.key: m.operators(c) for c in columns}
        ops = dict.fromkeys(op for t in tables.values() for op, v in t.items() if v)
        first = tables[columns[0].key]
        for op in sorted(ops, key=lambda op: (-(first.get(op) or 0), op)):
            rows.append(
                {"model": m.spec, "operator": op, **{k: report.export_number(t.get(op)) for k, t in tables.items()}}
            )
    return rows


def _to_csv(measured: list[Measured], columns: list[report.Column], args: argparse.Namespace) -> str:
    """A header line, then the rows (``model,<columns>`` or ``model,operator,<columns>``); what they
    were computed from goes to ``--csv-meta FILE``, the JSON's ``meta`` and each model's own."""
    keys = [c.key for c in columns]
    write_csv_meta(args, {**_shared_meta(measured), "models": {m.spec: _model_meta(m) for m in measured}})
    names = report.csv_fields(keys, measured[0].meta["flops_per_mac"])
    if args.by_operator:
        return report.csv_rows(["model", "operator", *keys], _long_operator_rows(measured, columns), names)
    rows = [{"model": m.spec, **{c.key: report.export_number(m.total(c)) for c in columns}} for m in measured]
    return report.csv_rows(["model", *keys], rows, names)
