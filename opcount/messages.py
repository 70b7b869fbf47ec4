"""An exception as the one line a message quotes, the first of two failures kept, and a list of
names as a warning line holds it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

E = TypeVar("E", bound=BaseException)


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
