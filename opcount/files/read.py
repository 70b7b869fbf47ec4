"""A JSON or TOML file a user names (``hf:path/config.json``, a hardware file), read within a size cap,
every failure one :class:`~opcount.errors.OpcountValueError` line naming the file.

The cap, :data:`MAX_READ_BYTES` (16 MiB), is far above any config (DeepSeek-V3's ``config.json`` is
under 2 KB, a hardware file a few hundred bytes) and checked before the file is read, and again while it
is, so neither a multi-gigabyte file nor one that grows (``/dev/zero`` is no regular file, and refused)
is read into memory. The parsers' own failures are one line too: nesting too deep for the parser
(``RecursionError``), an integer of more digits than Python converts (``ValueError``), text that is not
UTF-8, and a syntax error with its line and column.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

from ..errors import OpcountValueError
from ..messages import first_line

MAX_READ_BYTES = 16 * 2**20


def read_text(path: str | os.PathLike[str], what: str = "a config file", limit: int = MAX_READ_BYTES) -> str:
    """The UTF-8 text of the regular file ``path`` (``what`` it is, for the message on a file over
    ``limit`` bytes, :data:`MAX_READ_BYTES` unless a reader of larger files says otherwise)."""
    file = Path(path)
    try:
        size = os.stat(file).st_size
        if not file.is_file():
            raise OpcountValueError(f"{file}: not a regular file")
        if size > limit:
            raise _too_big(file, size, what, limit)
        with open(file, "rb") as stream:
            data = stream.read(limit + 1)  # a file grown since its size was read
    except OSError as e:
        raise OpcountValueError(f"{file}: cannot read it ({e.strerror or first_line(e, type(e).__name__)})") from None
    if len(data) > limit:
        raise _too_big(file, None, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:  # a binary file: the codec's message alone names no file
        raise OpcountValueError(f"{file}: not a text file ({e.reason} at byte {e.start})") from None


def parse_json(text: str, path: str | os.PathLike[str]) -> Any:
    """``text`` (the file ``path``'s) as JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise OpcountValueError(f"{path}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except (RecursionError, ValueError) as e:
        raise OpcountValueError(f"{path}: not valid JSON: {_unreadable(e)}") from None


def parse_toml(text: str, path: str | os.PathLike[str]) -> Any:
    """``text`` (the file ``path``'s) as TOML."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise OpcountValueError(f"{path}: not valid TOML: {first_line(e, type(e).__name__)}") from None
    except (RecursionError, ValueError) as e:
        raise OpcountValueError(f"{path}: not valid TOML: {_unreadable(e)}") from None


def _too_big(file: Path, size: int | None, what: str, limit: int) -> OpcountValueError:
    cap = f"the {limit // 2**20} MiB {what} may hold (the limit)"
    return OpcountValueError(f"{file}: more than {cap}" if size is None else f"{file}: {size:,} bytes, more than {cap}")


def _unreadable(e: BaseException) -> str:
    """What a parser could not read, without Python's advice to the programmer."""
    if isinstance(e, RecursionError):
        return "nested too deep to read"
    if "integer string conversion" in str(e):
        return f"an integer of more than {sys.get_int_max_str_digits():,} digits"
    return first_line(e, type(e).__name__)
