"""Numbers with SI prefixes, byte sizes and times, written one way everywhere.

Every table, summary and chart label that shows a time goes through :func:`seconds` (and chart
axes through :func:`time_unit`), so a time reads the same in the roofline, sparsity and profile
reports: three significant figures and one of ``s``, ``ms``, ``µs``, ``ns``.

Microseconds are written ``µs`` with U+00B5 MICRO SIGN, the SI symbol. It is in Latin-1 and in
the Windows and DOS code pages (cp1252, cp437, cp850), so it prints on terminals that are not
UTF-8, and Python 3.10 writes UTF-8 under the C locale (PEP 538, PEP 540). The machine formats
(JSON, CSV, ``--units exact``) carry times as plain seconds, never as text with a unit.

Report cells are written by :func:`format_number` under a :class:`NumberFormat`: fvcore's
layouts (``flop_count_table``'s ``4.112G``, ``flop_count_str``'s ``4.11G``) keep fvcore's
rounding rules, ``COMPACT`` gives three significant figures, ``EXACT`` the number as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from .errors import OpcountValueError

__all__ = [
    "COMPACT",
    "EXACT",
    "FVCORE_STR",
    "FVCORE_TABLE",
    "MICROSECONDS",
    "TIME_UNITS",
    "UNITS",
    "NumberFormat",
    "exact",
    "format_number",
    "seconds",
    "si",
    "size",
    "time_unit",
    "unprefixed",
]

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


# Report cells: fvcore's rounding rules, or significant figures, or the number as it is.
_SCALE = dict(_PREFIXES)
UNITS = ("auto", "exact", "", "K", "M", "G", "T", "P")


@dataclass(frozen=True)
class NumberFormat:
    """How a count is written.

    ``unit``: ``"auto"`` picks K/M/G/T/P by magnitude; ``"K"`` ... ``"P"`` or ``""`` fixes one
    scale for every cell (easier to compare down a column); ``"exact"`` writes the number as is.
    ``digits``: decimals kept after scaling with trailing zeros dropped (fvcore's convention:
    4111514624 is ``4.112G``), or significant figures when ``significant`` (``4.11G``).
    """

    unit: str = "auto"
    digits: int = 3
    significant: bool = False

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise OpcountValueError(f"unknown unit {self.unit!r}; choose one of {', '.join(map(repr, UNITS))}")
        if isinstance(self.digits, bool) or not isinstance(self.digits, int) or self.digits < int(self.significant):
            raise OpcountValueError(f"digits must be an integer >= {int(self.significant)}, got {self.digits!r}")


FVCORE_TABLE = NumberFormat(digits=3)  # fvcore's flop_count_table
FVCORE_STR = NumberFormat(digits=2)  # fvcore's flop_count_str
COMPACT = NumberFormat(digits=3, significant=True)
EXACT = NumberFormat(unit="exact")


def format_number(x: float, fmt: NumberFormat = FVCORE_TABLE) -> str:
    """``x`` as text: ``format_number(4111514624) == "4.112G"``; with ``COMPACT``, ``"4.11G"``."""
    if fmt.unit == "exact":
        return str(exact(x))
    if fmt.significant:
        x = _round_significant(x, fmt.digits)
    prefix = _auto_prefix(x, fmt.significant) if fmt.unit == "auto" else fmt.unit
    if not prefix and fmt.unit == "auto" and not fmt.significant:
        return str(x)  # fvcore writes numbers up to 100 as they are
    value = x / _SCALE[prefix]
    decimals = _significant_decimals(value, fmt.digits) if fmt.significant else fmt.digits
    # A fixed unit keeps its trailing zeros: the column lines up and 9408 in M is 0.0M, not 0M.
    return _fixed(value, decimals, strip=fmt.unit == "auto") + prefix


def _auto_prefix(x: float, significant: bool) -> str:
    # fvcore switches a decade early (128 -> "0.128K"); significant figures read best in [1, 1000).
    for prefix, scale in _PREFIXES:
        if (abs(x) >= scale) if significant else (abs(x) > scale / 10):
            return prefix
    return ""


def _round_significant(x: float, digits: int) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - math.floor(math.log10(abs(x))))


def _significant_decimals(value: float, digits: int) -> int:
    if value == 0 or not math.isfinite(value):
        return 0
    return max(0, digits - 1 - math.floor(math.log10(abs(value))))


def _fixed(value: float, decimals: int, strip: bool = True) -> str:
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if strip and "." in text else text


def unprefixed(x: float, digits: int = DIGITS) -> str:
    """``x`` without a prefix, to ``digits`` significant figures, trailing zeros dropped (a
    ratio such as flops per byte): ``unprefixed(12.345) == "12.3"``, ``unprefixed(1234.56) == "1235"``."""
    return _fixed(x, _significant_decimals(x, digits))


def exact(x: Any) -> Any:
    """A number as a plain Python int when it is integral (numpy and torch scalars too), else a
    float; machine formats write these unrounded."""
    if x is None or isinstance(x, (bool, int)):
        return x
    if hasattr(x, "item"):
        x = x.item()
    if isinstance(x, float) and x.is_integer():
        return int(x)
    return x
