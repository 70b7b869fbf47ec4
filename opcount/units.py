"""Numbers with SI prefixes, byte sizes and times, written one way everywhere.

Every table, summary and chart label that shows a time goes through :func:`seconds` (and chart
axes through :func:`time_unit`), so a time reads the same in the roofline, sparsity and profile
reports: three significant figures and one of ``s``, ``ms``, ``µs``, ``ns``.

Microseconds are written ``µs`` with U+00B5 MICRO SIGN, the SI symbol. It is in Latin-1 and in
the Windows and DOS code pages (cp1252, cp437, cp850), so it prints on terminals that are not
UTF-8, and Python 3.10 writes UTF-8 under the C locale (PEP 538, PEP 540). The machine formats
(JSON, CSV, ``--units exact``) carry times as plain seconds, never as text with a unit.

fvcore's own layouts (``flop_count_table``'s ``4.112G``, ``parameter_count_table``'s ``1.2M``)
have their own rounding rules and stay in :mod:`opcount.report`.
"""

from __future__ import annotations

import math

__all__ = ["MICROSECONDS", "TIME_UNITS", "seconds", "si", "size", "time_unit"]

MICROSECONDS = "\u00b5s"
# Largest first; the last is used for anything smaller.
TIME_UNITS: tuple[tuple[str, float], ...] = (("s", 1.0), ("ms", 1e-3), (MICROSECONDS, 1e-6), ("ns", 1e-9))
_PREFIXES: tuple[tuple[str, float], ...] = (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("K", 1e3), ("", 1.0))
DIGITS = 3


def _rounded(x: float, digits: int) -> float:
    return float(f"{x:.{digits}g}")


def _pick(x: float, scales: tuple[tuple[str, float], ...], digits: int) -> tuple[str, float]:
    # Choose the scale after rounding: 999.96 us is "1 ms", not "1e+03 us".
    magnitude = _rounded(abs(x), digits)
    for name, scale in scales:
        if magnitude >= scale:
            return name, scale
    return scales[-1]


def _number(x: float, digits: int) -> str:
    # "%g" switches to exponent notation from 10**digits on; past the largest scale write it whole.
    return f"{x:.0f}" if abs(_rounded(x, digits)) >= 10**digits else f"{x:.{digits}g}"


def si(x: float, digits: int = DIGITS) -> str:
    """A count with an SI prefix and ``digits`` significant figures: ``si(8.22e9) == "8.22G"``,
    ``si(512) == "512"``."""
    if not math.isfinite(x):
        return f"{x}"
    prefix, scale = _pick(x, _PREFIXES, digits)
    if not prefix:  # below 1000: as it is, small fractions included
        return _number(x, digits)
    return _number(x / scale, digits) + prefix


def size(n: float, digits: int = DIGITS) -> str:
    """A byte count with a decimal SI prefix (as hardware datasheets give bandwidth and memory):
    ``size(213e6) == "213MB"``."""
    return f"{si(n, digits)}B"


def time_unit(s: float, digits: int = DIGITS) -> tuple[str, float]:
    """The unit a time of ``s`` seconds is written in, and its length in seconds:
    ``time_unit(2.5e-4) == ("µs", 1e-6)``. Charts use it to scale an axis to its largest value."""
    if s == 0 or not math.isfinite(s):
        return TIME_UNITS[0]
    return _pick(s, TIME_UNITS, digits)


def seconds(s: float | None, digits: int = DIGITS) -> str:
    """A time in seconds as text: ``seconds(6.36e-5) == "63.6 µs"``, ``seconds(0) == "0 s"``,
    negative times keep their sign, ``None`` (unknown) is ``""``."""
    if s is None:
        return ""
    if not math.isfinite(s):
        return f"{s} s"
    if s == 0:
        return "0 s"
    unit, scale = time_unit(s, digits)
    return f"{_number(s / scale, digits)} {unit}"
