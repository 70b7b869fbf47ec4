"""An exception as the one line a message quotes, and the first of two failures kept."""

from __future__ import annotations

from typing import TypeVar

E = TypeVar("E", bound=BaseException)


def one_line(e: BaseException) -> str:
    """An exception as one line, its type first: ``ValueError: bad size``."""
    text = _text(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def first_line(e: BaseException, default: str = "") -> str:
    """The first line of an exception's message, or ``default`` when it has none."""
    text = _text(e).strip()
    return text.splitlines()[0] if text else default


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
