"""``opcount calibrate MEASUREMENTS``: an engine profile fitted to a user's own serving runs.

MEASUREMENTS is a CSV in docs/measured/serving_2026.csv's columns or the JSON ``vllm bench serve --save-result``
writes (with ``model`` and ``hardware`` added); each row is priced (:mod:`opcount.llm.calibration.evaluate`),
the profile's parameters fitted by bounded least squares on the log error (:mod:`opcount.llm.calibration.fit`),
its leave-one-out error reported, and the profile written where ``--write`` says, for ``--engine-profile``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from ..errors import OpcountValueError
from ..files.write import write_text
from ..llm.calibration import evaluate, fit, rows, steady
from ..llm.engines.profile import BUILTIN, ENGINES, RANGES, EngineProfile, dumps
from .args import UsageError
from .parser import command_parser
from .progress import Progress


def build_parser() -> argparse.ArgumentParser:
    p = command_parser(
        prog="opcount calibrate",
        description="Fit an engine profile to measured serving runs: each row's estimate from the model traced "
        "on its layout and hardware, the profile's parameters fitted by bounded least squares on the log error, "
        "the leave-one-out error reported, the profile written for --engine-profile (llm.md).",
    )
    p.add_argument(
        "measurements", metavar="MEASUREMENTS", help="a CSV of serving_2026.csv's columns, or vllm bench serve's JSON"
    )
    p.add_argument("--engine", choices=ENGINES, help="the built-in profile to start from (default: the rows' engine)")
    p.add_argument(
        "--fit",
        metavar="NAMES",
        help=f"comma-separated parameters to fit (default: {', '.join(fit.FITTED)}); the others keep their start",
    )
    p.add_argument("--write", metavar="FILE", help="write the fitted profile's JSON to FILE")
    p.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout")
    return p


def run(argv: Sequence[str], stderr: TextIO) -> tuple[str, str | None]:
    """The report ``opcount calibrate ARGV`` prints, and the file ``-o`` names (None: stdout)."""
    args = build_parser().parse_args(list(argv))
    names = tuple(n.strip() for n in args.fit.split(",")) if args.fit else fit.FITTED
    unknown = [n for n in names if n not in RANGES]
    if unknown:
        raise UsageError(f"--fit: unknown parameters {', '.join(unknown)}; known: {', '.join(RANGES)}")
    _check_outputs(args.write, args.output)
    measured = rows.load(args.measurements)
    engines = sorted({r.engine for r in measured})
    engine = args.engine or engines[0]
    if args.engine is None and len(engines) > 1:
        raise UsageError(f"{args.measurements}: rows of {', '.join(engines)}: give --engine to fit one profile to them")
    spinner = Progress(stderr)
    try:
        found = evaluate.price(measured, evaluate.Tracer(spinner.update))
    finally:
        spinner.close()
    priced = [p for p in found if isinstance(p, steady.Priced)]
    if not priced:  # every row unmodelled: the first reason is the user's answer, as the report would show it
        first = next(p for p in found if isinstance(p, evaluate.Unmodelled))
        raise OpcountValueError(
            f"{args.measurements}: no row opcount can price to fit a profile to ({first.row.case}: {first.reason})"
        )
    start = BUILTIN[engine]
    fitted = fit.fit(priced, start, names)
    loo = fit.leave_one_out(priced, start, names) if len(priced) >= 2 else None
    profile = fitted.profile.with_parameters(
        {},
        name=engine,
        sources={n: f"fitted by opcount calibrate to {args.measurements}" for n in names}
        | {k: v for k, v in start.sources.items() if k not in names},
        fit={"measurements": str(args.measurements), "rows": len(priced), "fitted": list(names),
             "error": fitted.error, "leave_one_out_error": loo},
    )  # fmt: skip
    if args.write:
        write_text(args.write, dumps(profile))
    return report(found, profile, start, fitted.error, loo, args.write), args.output


def _check_outputs(write: str | None, output: str | None) -> None:
    """``--write`` and ``-o`` are written after every row is traced: a folder, a missing folder or one file for
    both is refused before that work, not after it."""
    for flag, value in (("--write", write), ("-o", output)):
        if value is None:
            continue
        if not value.strip():
            raise UsageError(f"{flag} needs a file name, got {value!r}")
        if Path(value).is_dir():
            raise UsageError(f"{flag} {value}: a folder, not a file: name a file in it")
        if not Path(value).resolve().parent.is_dir():
            raise UsageError(f"{flag} {value}: no folder {str(Path(value).parent)!r} to write it in")
    if write and output and Path(write).resolve() == Path(output).resolve():
        raise UsageError(f"--write {write}: -o writes the same file: give each output its own")


def report(
    found: Sequence[steady.Priced | evaluate.Unmodelled],
    profile: EngineProfile,
    start: EngineProfile,
    error: float,
    loo: float | None,
    written: str | None,
) -> str:
    """The rows, the estimate before and after, the parameters and the errors."""
    lines = [f"{'case':60} {'measured':>12} {'bound':>11} {'start':>11} {'fitted':>11}"]
    for p in found:
        if isinstance(p, evaluate.Unmodelled):
            lines.append(f"{p.row.case[:60]:60} not modelled: {p.reason}")
            continue
        m, metric = p.row.measured, p.row.metric
        values = (rows.value(metric, steady.bound(p)), rows.value(metric, steady.predict(p, start)))
        fitted = rows.value(metric, steady.predict(p, profile))
        lines.append(
            f"{p.row.case[:60]:60} {m:12.4g} {values[0]:11.4g} {values[1]:11.4g} {fitted:11.4g}  {metric}"
            f"  {steady.workload(p)}"
        )
    lines.append("")
    lines.append(f"profile {profile.name}:")
    lines += [f"  {k} = {v:.6g}" for k, v in profile.parameters().items()]
    kept = sum(isinstance(p, steady.Priced) for p in found)
    lines.append(f"geometric-mean error over the {kept} rows priced: {error:.1%} fitted")
    if loo is not None:
        lines.append(f"leave-one-out error (each row under the profile fitted to the others): {loo:.1%}")
    if written:
        lines.append(f"written to {written} (--engine-profile {written})")
    return "\n".join(lines)
