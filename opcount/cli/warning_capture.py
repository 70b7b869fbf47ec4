"""The warnings the ``opcount`` commands print: opcount's and transformers' log records held back
while the progress line is drawn (:func:`captured_warnings`), and the unsupported-operator
warnings, one per operator, naming the shown columns that do not count it (:func:`unsupported_warnings`).

transformers logs to stderr through a handler of its own (a rejected ``rope_scaling`` logs its
reason, then the constructor raises): under the command its records are collected with opcount's,
attributed (``transformers: ...``), printed once after the run or before its error line, and
silenced by ``-q``.

Each analysis knows which operators it has no formula for, and they differ: fvcore's activation
convention counts the outputs of convolutions and matrix products only, so its analysis reports
``batch_norm`` unsupported while the flop count has a formula for it. A warning is only about a
column the report shows, and says which one.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from .. import report
from .analyze import Analyses


class Collect(logging.Handler):
    """Holds opcount's warnings until the progress line is gone, then they print as one block."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if not record.name.startswith("opcount"):  # the other logger it is attached to: say whose
            message = f"transformers: {message}"
        self.messages.append(message)


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
        from transformers.utils import logging as hf_logging
    except ImportError:
        return None
    return hf_logging.get_logger()  # the first call adds its handler: now, so that it can be swapped


def unsupported_warnings(analyses: Analyses, columns: Sequence[str]) -> list[str]:
    """``Unsupported operator aten::x encountered n time(s): not counted in flops, activations``,
    once per operator some shown column misses (each column reads the analyses its ``needs`` names)."""
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
    return [
        f"Unsupported operator {op} encountered {calls[op]} time(s): not counted in {', '.join(keys)}"
        for op, keys in sorted(missed.items())
    ]
