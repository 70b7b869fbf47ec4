"""An exception as the one line a message quotes, the first of two failures kept, a list of
names as a warning line holds it, and which failures of the user's code opcount reports as its own.

An analysis runs code the user gave it (a model's forward, a handle, a loss function, a roofline
scale, a measurement), so whatever that code raises is the code's failure, reported naming the code
and the operator or module it ran for: ``except FAILURES``. That includes the two
``BaseException``s that are not ``Exception``s and would otherwise pass every handler:
``SystemExit`` (``sys.exit()`` in a forward or a handle would end the caller's process) and
``GeneratorExit`` (which only a generator being closed should see). ``KeyboardInterrupt`` is left
out on purpose: Ctrl-C stops an analysis as it stops any Python code.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, TypeVar

E = TypeVar("E", bound=BaseException)

# What ``except FAILURES`` catches around the user's code: everything but KeyboardInterrupt.
FAILURES: tuple[type[BaseException], ...] = (Exception, SystemExit, GeneratorExit)


def callable_name(fn: Any) -> str:
    """A user callable as a message names it: its qualified name (``my_flops``, ``Net.handle``,
    ``<lambda>``), a ``functools.partial``'s function's, else its type's name (an instance with
    ``__call__``)."""
    name = getattr(fn, "__qualname__", None) or getattr(getattr(fn, "func", None), "__qualname__", None)
    return name if isinstance(name, str) else type(fn).__name__


def one_line(e: BaseException) -> str:
    """An exception as one line, its type first: ``ValueError: bad size``."""
    first = first_line(e)
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def first_line(e: BaseException, default: str = "") -> str:
    """The first line of an exception's message, or ``default`` when it has none. A first line
    that only announces what follows (ends with a colon, as huggingface_hub's validation errors
    do) takes the next line with it, else the message would stop before saying what is wrong."""
    lines = [line.strip() for line in _text(e).strip().splitlines() if line.strip()]
    if not lines:
        return default
    return f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]


def first_failure(first: E, second: BaseException) -> E:
    """``first``, to be raised where a second attempt (another tensor kind, other inputs) failed
    too: the first failure is the user's; the second is kept as a note under its traceback and
    as its context."""
    first.add_note(f"a second attempt failed too: {one_line(second)}")
    first.__context__ = second
    return first


def _text(e: BaseException) -> str:
    # a SystemExit's message is its exit code alone ("0"): say where it came from
    if isinstance(e, SystemExit):
        return "exited (sys.exit)" if e.code is None else f"exited with code {e.code!r} (sys.exit)"
    if isinstance(e, GeneratorExit) and not str(e):  # raised where no generator was being closed
        return "raised outside a generator being closed"
    return str(e)


def names_in_brief(names: Sequence[str], width: int) -> tuple[str, bool]:
    """``names`` as a list a warning line can hold: all of them when they fit in ``width``
    characters, else grouped by their last dotted part with counts (``out_proj x32``), cut at
    ``width`` with ``...``. Second item: whether the text leaves some name out, so that the
    message can say where the full list is."""
    whole = ", ".join(names)
    if len(whole) <= width:
        return whole, False
    groups = Counter(name.rpartition(".")[2] for name in names)  # a message, not a scope walk
    parts = [f"{leaf} x{n}" if n > 1 else leaf for leaf, n in groups.most_common()]
    shown: list[str] = []
    for part in parts:
        if len(", ".join([*shown, part, "..."])) > width:
            shown.append("...")
            break
        shown.append(part)
    return ", ".join(shown), True


def brief_list(names: Sequence[str], width: int, whole: str) -> str:
    """:func:`names_in_brief`'s text, saying how many there are and ``whole`` (where the full
    list is) when some are left out."""
    listing, cut = names_in_brief(names, width)
    return listing + (f" ({len(names)} in all; {whole})" if cut else "")
