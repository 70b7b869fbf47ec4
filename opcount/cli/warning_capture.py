"""The warnings the ``opcount`` commands print: opcount's and transformers' log records held back
while the progress line is drawn (:func:`captured_warnings`), then summed up once per run, one line
per kind with a count (:func:`warning_lines`); ``--verbose`` gives each line its whole list.

The kinds: operators some shown column has no formula for (:func:`unsupported`), modules never
called (every analysis of a run finds the same ones: they are merged, not repeated), the
activation convention, and any other message logged. transformers logs to stderr through a handler
of its own (a rejected ``rope_scaling`` logs its reason, then the constructor raises): under the
command its records are collected with opcount's, attributed (``transformers: ...``), printed once
after the run or before its error line, and silenced by ``-q``.

Each analysis knows which operators it has no formula for, and they differ: fvcore's activation
convention counts the outputs of convolutions and matrix products only, so its analysis reports
``batch_norm`` unsupported while the flop count has a formula for it. That is a convention, not
a missing formula: it is said once, as a note, and only when the activations column is shown.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import report
from ..messages import names_in_brief

WIDTH = 300  # the longest warning line without --verbose, prefix included
_LIST_WIDTH = 160  # what a line's list of names may take, leaving room for its words
_CONVENTION_ROLE = "activations"


@dataclass
class Caught:
    """One run's (or one compared model's) logged warnings: the uncalled modules apart, by name."""

    messages: list[str] = field(default_factory=list)
    uncalled: dict[str, None] = field(default_factory=dict)  # an ordered set: merged across analyses
    notes: list[str] = field(default_factory=list)  # not warnings: what a run measured (--hardware local)


class Collect(logging.Handler):
    """Holds opcount's warnings until the progress line is gone, then they print as one block."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.caught = Caught()

    def emit(self, record: logging.LogRecord) -> None:
        names = getattr(record, "opcount_uncalled", None)  # opcount.analysis: the names as data
        message = record.getMessage()
        if not record.name.startswith("opcount"):  # the other logger it is attached to: say whose
            self.caught.messages.append(f"transformers: {message}")
        elif getattr(record, "opcount_note", False):
            self.caught.notes.append(message)
        elif names is not None:
            self.caught.uncalled.update(dict.fromkeys(names))
        else:
            self.caught.messages.append(message)

    def take(self) -> Caught:
        """What was caught since the last take (``opcount compare``: one model's warnings)."""
        caught, self.caught = self.caught, Caught()
        return caught


@contextmanager
def captured_warnings(debug: bool, transformers: bool = False) -> Iterator[Collect]:
    """opcount's logged warnings (and transformers', with ``transformers`` or once it is imported),
    collected in the handler yielded for the caller to print once the progress line is closed;
    torch's deprecation notices silenced unless ``debug``."""
    logger = logging.getLogger("opcount")
    handler = Collect()
    logger.addHandler(handler)
    old_propagate = logger.propagate
    logger.propagate = False
    library = _transformers_logger(transformers)
    library_handlers = library.handlers[:] if library is not None else []
    if library is not None:  # its own stderr handler swapped for ours for the run (it does not propagate)
        library.handlers = [handler]
    try:
        with warnings.catch_warnings():
            if not debug:  # torch.jit's deprecation notices are about our tracer, not the user's model
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
            yield handler
    finally:
        logger.removeHandler(handler)
        logger.propagate = old_propagate
        if library is not None:
            library.handlers = library_handlers


def _transformers_logger(wanted: bool) -> logging.Logger | None:
    """transformers' root logger, its stderr handler in place, when the run uses transformers
    (``wanted``: an ``hf:`` or ``llm:`` model) or it is already imported; else None, so that a
    run without it does not pay for its import."""
    if not wanted and "transformers" not in sys.modules:
        return None
    try:
        from ..transformers_internals import hf_logging
    except ImportError:
        return None
    found = hf_logging.get_logger()  # the first call adds its handler: now, so that it can be swapped
    return found if isinstance(found, logging.Logger) else None  # transformers 5 types it as a protocol


@dataclass(frozen=True)
class Unsupported:
    """Operators without a formula in a shown column: op -> (calls, the column keys that miss it)."""

    missed: dict[str, tuple[int, list[str]]]
    by_convention: list[str]  # missed by the activations column only, and counted by the flop count


def unsupported(analyses: Any, columns: Sequence[str]) -> Unsupported:
    """The operators each shown column misses (``analyses``: role -> analysis or report, anything with ``get``)."""
    missed: dict[str, list[str]] = {}
    calls: Counter[str] = Counter()
    for key in columns:
        for role in report.COLUMNS[key].needs:
            analysis = analyses.get(role)
            if analysis is None:
                continue
            for op, n in analysis.unsupported_ops().items():
                if key not in missed.setdefault(op, []):
                    missed[op].append(key)
                calls[op] = max(calls[op], n)
    flops = analyses.get("flops")
    no_formula = flops.unsupported_ops() if flops is not None else Counter(missed)
    # an operator the flop count prices is known: the activations column leaves it out by design
    convention = sorted(op for op, keys in missed.items() if keys == [_CONVENTION_ROLE] and op not in no_formula)
    real = {op: (calls[op], keys) for op, keys in sorted(missed.items()) if op not in convention}
    return Unsupported(real, convention)


def note(message: str) -> None:
    """A line the command prints as ``opcount: note:``, after the progress line, before the warnings."""
    logging.getLogger("opcount").warning(message, extra={"opcount_note": True})


def warning_lines(caught: Caught, missed: Unsupported | None, verbose: bool) -> list[str]:
    """The run's notes (``note: ...``) and warnings, one line per kind (``opcount: `` is the
    caller's prefix, with ``warning: `` before each warning), each at most :data:`WIDTH`
    characters unless ``verbose``."""
    lines = [f"note: {n}" for n in dict.fromkeys(caught.notes)]
    return lines + [f"warning: {line}" for line in _warnings(caught, missed, verbose)]


def _warnings(caught: Caught, missed: Unsupported | None, verbose: bool) -> list[str]:
    width = 10**9 if verbose else _LIST_WIDTH
    lines: list[str] = []
    if missed is not None and missed.missed:
        lines.append(_unsupported_line(missed.missed, width))
    if caught.uncalled:
        names = list(caught.uncalled)
        listing, cut = names_in_brief(names, width)
        count = f"{len(names)} submodule{'s' if len(names) > 1 else ''}"
        lines.append(
            f"{count} never called during the trace: {listing}{'; --verbose lists them' if cut else ''} "
            "(unused, reached through .forward() or another method, or run inside their parent's fused call: "
            "their cost, if any, is in their caller)"
        )
    if missed is not None and missed.by_convention:
        listing, cut = names_in_brief(missed.by_convention, width)
        lines.append(
            "#activations follows fvcore's convention, the outputs of convolutions and matrix products: "
            f"{len(missed.by_convention)} other operator kind(s) count 0 there ({listing}"
            f"{'; --verbose lists them' if cut else ''})"
        )
    for message in dict.fromkeys(caught.messages):
        if not verbose and len(message) > WIDTH - 40:
            message = message[: WIDTH - 80].rstrip() + "... (--verbose shows it whole)"
        lines.append(message)
    return lines


def _unsupported_line(missed: dict[str, tuple[int, list[str]]], width: int) -> str:
    if len(missed) == 1:
        ((op, (n, keys)),) = missed.items()
        return f"Unsupported operator {op} encountered {n} time(s): not counted in {', '.join(keys)}"
    items = [f"{op} x{n} ({', '.join(keys)})" for op, (n, keys) in missed.items()]
    listing, cut = _cut(items, width)
    return f"{len(missed)} unsupported operators, not counted in the columns named: {listing}" + (
        "; --verbose lists them" if cut else ""
    )


def _cut(items: list[str], width: int) -> tuple[str, bool]:
    shown: list[str] = []
    for item in items:
        if len(", ".join([*shown, item, "..."])) > width:
            return ", ".join([*shown, "..."]), True
        shown.append(item)
    return ", ".join(shown), False
