"""``opcount compare MODEL [MODEL ...]``: several models side by side.

Each model is built, traced and analyzed as ``opcount MODEL`` would (the same loaders, inputs,
analyses and flags), then reduced to its totals: one row per model, or with ``--by-operator``
one row per operator. Text formats (table, md) put the models in columns there, so an operator
reads across the models; machine formats (json, csv) stay long, one row per model and operator,
the shape pandas pivots (``df.pivot(index="operator", columns="model")``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, TextIO

import tabulate
import torch

from .. import report
from ..errors import OpcountError
from ..hardware.lookup import Hardware
from ..messages import first_line
from ..report.provenance import export_meta
from . import models as cli_models
from .analyze import analyze
from .args import UsageError
from .options import CompareOptions, Rendering
from .progress import Progress
from .render import number_format, write_csv_meta
from .warning_capture import Caught, captured_warnings, note, unsupported, warning_lines

# The fields of an export's meta that differ from model to model; the others (versions, tracer,
# preset, flops per mac, hardware) are the same for every model, since the flags are shared.
MODEL_FIELDS = ("model", "model_class", "inputs", "roofline_dtype")


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


def compare(options: CompareOptions, stderr: TextIO) -> str:
    """Analyze every model of ``options.models`` and report them side by side."""
    spinner = Progress(stderr, enabled=False if options.debug else None)
    measured: list[Measured] = []
    caught: list[Caught] = []
    uses_transformers = any(spec.startswith(("hf:", "llm:")) for spec in options.models)
    with captured_warnings(options.debug, uses_transformers) as collect:
        try:
            # --hardware local: measured once, for every model
            hardware = None if options.hardware is None else options.hardware.resolve(spinner.update, note)
            shared = collect.take()  # the calibration's, if any: said once, not per model
            for spec in options.models:
                measured.append(_measure(spec, options, hardware, spinner))
                caught.append(collect.take())
        finally:
            spinner.close()
    rendering = options.rendering
    keys = list(rendering.columns) if rendering.columns is not None else _default_columns(measured[0].sources)
    if not options.quiet:  # as `opcount MODEL` warns, each line naming its model
        lines = warning_lines(shared, None, options.verbose)
        for m, one in zip(measured, caught, strict=True):
            for line in warning_lines(one, unsupported(m.sources, keys), options.verbose):
                kind, _, text = line.partition(": ")
                lines.append(f"{kind}: {m.spec}: {text}")
        stderr.writelines(f"opcount: {line}\n" for line in lines)
    columns = report.resolve_columns(keys, measured[0].sources)
    if rendering.by_operator:
        columns = [c for c in columns if c.operators is not None]
        if not columns:
            raise UsageError("--by-operator: the columns chosen have no per-operator breakdown")
    return _render(measured, columns, rendering)


def _measure(spec: str, options: CompareOptions, hardware: Hardware | None, spinner: Progress) -> Measured:
    """``spec`` built and analyzed as ``opcount spec`` does; errors name the model."""
    torch.manual_seed(0)  # each model sees the inputs and weights it would see alone
    try:
        spinner.update(f"building {spec}")
        loaded = cli_models.load(spec, options.inputs)
        with torch.no_grad():
            found = analyze(loaded, spec, options.analysis, hardware, spinner)
    except (OpcountError, ValueError, OSError) as e:
        raise UsageError(f"{spec}: {first_line(e, type(e).__name__)}") from e
    return Measured(spec, found.sources(), export_meta(found.flops, model=spec, roofline=found.roofline))


def _default_columns(sources: report.Sources) -> list[str]:
    if sources.get("sparsity") is not None:
        return ["params", "flops", "sparse_flops", "time", "sparse_time", "speedup"]
    if sources.get("roofline") is not None:
        return ["params", "flops", "time", "bound"]
    return ["params", "flops"]


# ================================================================================================
# Rendering
# ================================================================================================
def _render(measured: list[Measured], columns: list[report.Column], rendering: Rendering) -> str:
    if rendering.format == "json":
        return json.dumps(_to_dict(measured, columns, rendering.by_operator), indent=2)
    if rendering.format == "csv":
        return _to_csv(measured, columns, rendering).rstrip("\n")
    fmt = number_format(rendering, significant=rendering.format == "md")
    by_operator = rendering.by_operator
    headers, rows = _operator_rows(measured, columns, fmt) if by_operator else _model_rows(measured, columns, fmt)
    # md right-aligns numbers as to_markdown does; the table keeps fvcore's left-aligned cells
    aligns = ["left", *(["right"] * (len(headers) - 1))] if rendering.format == "md" else None
    text: str = tabulate.tabulate(rows, headers=headers, tablefmt="pipe", colalign=aligns, disable_numparse=True)
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


def _to_csv(measured: list[Measured], columns: list[report.Column], rendering: Rendering) -> str:
    """A header line, then the rows (``model,<columns>`` or ``model,operator,<columns>``); what they
    were computed from goes to ``--csv-meta FILE``, the JSON's ``meta`` and each model's own."""
    keys = [c.key for c in columns]
    write_csv_meta(rendering.csv_meta, {**_shared_meta(measured), "models": {m.spec: _model_meta(m) for m in measured}})
    names = report.csv_fields(keys, measured[0].meta["flops_per_mac"])
    if rendering.by_operator:
        return report.csv_rows(
            ["model", "operator", *keys], _long_operator_rows(measured, columns), names, raw=rendering.csv_raw
        )
    rows = [{"model": m.spec, **{c.key: report.export_number(m.total(c)) for c in columns}} for m in measured]
    return report.csv_rows(["model", *keys], rows, names, raw=rendering.csv_raw)
