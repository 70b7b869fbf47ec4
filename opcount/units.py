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

Significant figures (:func:`si`, :func:`size`, :func:`seconds`, :func:`unprefixed`, ``COMPACT``)
follow one rule: the number in decimal (a count exactly, a float as its 15 reliable digits)
rounded half up, so 4165 is ``4.17K`` and 9705 is ``9.71K``, whatever the nearest double of
4.165 or 9.705 is. fvcore's layouts keep fvcore's own rule (scale as a float, then a fixed number
of decimals) so that their tables match fvcore's character for character.

Text a person reads puts a space between a number and its unit, SI style (``41.7 ms``,
``141 GB``, ``18.1 KFLOP``, ``1.66 FLOP/B``); counts without a unit keep fvcore's ``8.22G``.
Byte sizes use decimal prefixes (1 GB = 1e9 B), as hardware datasheets quote memory and bandwidth.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Context, Decimal
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
# A float64 holds 15 significant decimal digits reliably (DBL_DIG); past them a fixed-point
# rendering writes binary noise (472 / 1000 is 0.47199999999999997513...).
FLOAT_DIGITS = 15


def _context(digits: int) -> Context:
    # Room for any count and the digits asked for, so that quantize and scaleb never round.
    return Context(prec=max(digits, 40) + 40)


def _decimal(x: float) -> Decimal:
    # The number as a person reads it: an integer exactly, a float as its 15 reliable digits.
    try:
        # the TypeError is the integer test: anything with __index__ (numpy's and torch's ints too)
        return Decimal(operator.index(x))  # type: ignore[arg-type]
    except TypeError:
        return Decimal(f"{float(x):.{FLOAT_DIGITS}g}")


def _significant(x: float, digits: int) -> Decimal:
    """``x`` rounded to ``digits`` significant figures, half up, in decimal: the one rounding rule
    of everything written with significant figures (4165 -> 4.17K, 9705 -> 9.71K)."""
    d = _decimal(x)
    if d == 0:
        return Decimal(0)
    step = Decimal(1).scaleb(d.adjusted() - digits + 1)
    return d.quantize(step, rounding=ROUND_HALF_UP, context=_context(digits))


def _plain(d: Decimal) -> str:
    """Fixed point, trailing zeros dropped: never an exponent (1.23E+3 is 1230)."""
    text = f"{d:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _power(scale: float) -> int:
    return round(math.log10(scale))


def _pick(rounded: Decimal, scales: tuple[tuple[str, float], ...]) -> tuple[str, float]:
    # Choose the scale after rounding: 999.96 us is "1 ms", not "1000 us".
    for name, scale in scales:
        if rounded != 0 and rounded.copy_abs().adjusted() >= _power(scale):
            return name, scale
    return scales[-1]


def _scaled(x: float, scales: tuple[tuple[str, float], ...], digits: int) -> tuple[str, str]:
    """``x`` to ``digits`` significant figures in the largest scale it reaches: (number, scale name)."""
    rounded = _significant(x, digits)
    name, scale = _pick(rounded, scales)
    return _plain(rounded.scaleb(-_power(scale), _context(digits))), name


def si(x: float, digits: int = DIGITS, unit: str = "") -> str:
    """A count with an SI prefix and ``digits`` significant figures: ``si(8.22e9) == "8.22G"``,
    ``si(512) == "512"``; with a ``unit``, SI style, a space before the prefixed unit:
    ``si(18.1e3, unit="FLOP") == "18.1 KFLOP"``. Past the largest prefix the number is written
    whole (``1230P``), never with an exponent."""
    if not math.isfinite(x):
        return f"{x} {unit}" if unit else f"{x}"
    number, prefix = _scaled(x, _PREFIXES, digits)
    return f"{number} {prefix}{unit}" if unit else number + prefix


def size(n: float, digits: int = DIGITS) -> str:
    """A byte count with a decimal SI prefix (1 GB = 1e9 B, as hardware datasheets give bandwidth
    and memory): ``size(213e6) == "213 MB"``, ``size(64) == "64 B"``."""
    return si(n, digits, unit="B")


def time_unit(s: float, digits: int = DIGITS) -> tuple[str, float]:
    """The unit a time of ``s`` seconds is written in, and its length in seconds:
    ``time_unit(2.5e-4) == ("µs", 1e-6)``. Charts use it to scale an axis to its largest value."""
    if s == 0 or not math.isfinite(s):
        return TIME_UNITS[0]
    return _pick(_significant(s, digits), TIME_UNITS)


def seconds(s: float | None, digits: int = DIGITS) -> str:
    """A time in seconds as text: ``seconds(6.36e-5) == "63.6 µs"``, ``seconds(0) == "0 s"``,
    negative times keep their sign, ``None`` (unknown) is ``""``."""
    if s is None:
        return ""
    if not math.isfinite(s):
        return f"{s} s"
    if s == 0:
        return "0 s"
    number, unit = _scaled(s, TIME_UNITS, digits)
    return f"{number} {unit}"


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
    if not math.isfinite(x):
        return f"{x}"
    if fmt.significant:
        return si(x, fmt.digits) if fmt.unit == "auto" else _significant_in(x, fmt.unit, fmt.digits)
    prefix = _auto_prefix(x) if fmt.unit == "auto" else fmt.unit
    if not prefix and (fmt.unit == "auto" or float(x).is_integer()):
        # fvcore writes numbers up to 100 as they are; so does a fixed empty prefix a whole count.
        return str(x) if fmt.unit == "auto" else str(exact(x))
    # fvcore's rule (_format_size): scale as a float, then a fixed number of decimals. A fixed
    # unit keeps its trailing zeros: the column lines up and 9408 in M is 0.0M, not 0M.
    return _fixed(x / _SCALE[prefix], fmt.digits, strip=fmt.unit == "auto") + prefix


def _significant_in(x: float, prefix: str, digits: int) -> str:
    # Trailing zeros kept (1000 in K to 3 figures is 1.00K): a fixed unit's column lines up.
    scaled = _significant(x, digits).scaleb(-_power(_SCALE[prefix]), _context(digits))
    return f"{scaled:f}{prefix}"


def _auto_prefix(x: float) -> str:
    # fvcore switches a decade early: 128 -> "0.128K".
    for prefix, scale in _PREFIXES:
        if abs(x) > scale / 10:
            return prefix
    return ""


def _fixed(value: float, decimals: int, strip: bool = True) -> str:
    # Decimals past a double's 15 significant digits are binary noise: they are written as zeros.
    held = decimals
    if value != 0:
        held = max(0, min(decimals, FLOAT_DIGITS - 1 - math.floor(math.log10(abs(value)))))
    text = f"{value:.{held}f}"
    if strip:
        return text.rstrip("0").rstrip(".") if "." in text else text
    if decimals > held:
        text += ("" if "." in text else ".") + "0" * (decimals - held)
    return text


def unprefixed(x: float, digits: int = DIGITS) -> str:
    """``x`` without a prefix, to ``digits`` significant figures (at least its whole part),
    rounded half up, trailing zeros dropped (a ratio such as flops per byte):
    ``unprefixed(12.345) == "12.3"``, ``unprefixed(1234.56) == "1235"``."""
    if not math.isfinite(x):
        return f"{x}"
    d = _decimal(x)
    if d == 0:
        return "0"
    step = Decimal(1).scaleb(min(0, d.adjusted() - digits + 1))
    return _plain(d.quantize(step, rounding=ROUND_HALF_UP, context=_context(digits)))


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
