"""A file written whole or not at all: what ``-o``, ``--csv-meta``, ``--plot``, the chart functions and
the calibration cache write.

The text is encoded before anything is opened, the bytes go to a new file in the target's folder, which
is flushed to disk (``fsync``) and then renamed over the target (``os.replace``, atomic on one file
system). A failure at any step (a full disk, an unencodable name, an interrupt) removes the new file and
leaves an existing target byte-identical. The target keeps its permission bits; a new one gets the
umask's, as ``open`` would give it. A symlink is followed and its target written, as a shell's ``>``
does: a dangling link creates its target. A target that is not a regular file (``/dev/stdout``, a pipe)
cannot be renamed over and holds nothing to keep: it is written in place.

Text is UTF-8. A character UTF-8 cannot encode (a lone surrogate: Python decodes a file name that is not
UTF-8 into one) is written as its escape, ``\\udcff``: a module's name never makes a report unwritable,
and a JSON reader reads the escape back as the same character.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import stat
from pathlib import Path
from typing import Any

ENCODING = "utf-8"
_ESCAPE = "backslashreplace"  # a lone surrogate as \udcff: readable, and the same character to JSON
_TRIES = 16  # names for the temporary file: 16 random collisions in a row means something else is wrong


def encoded(text: str) -> bytes:
    """``text`` as UTF-8 bytes, a character UTF-8 cannot encode as its backslash escape."""
    return text.encode(ENCODING, _ESCAPE)


def printable(text: str, encoding: str | None) -> str:
    """``text`` with what ``encoding`` (a stream's; None: UTF-8) cannot encode as backslash escapes, so
    that writing it to the stream cannot fail part way."""
    codec = encoding or ENCODING
    return text.encode(codec, _ESCAPE).decode(codec)


def write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` as UTF-8 (see :func:`encoded`), whole or not at all; returns the file
    written (a symlink's target)."""
    return write_bytes(path, encoded(text))


def write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` whole or not at all (the module's docstring); returns the file
    written (a symlink's target). Raises ``OSError`` with the target untouched."""
    target = Path(os.path.realpath(path))  # a symlink's target, a dangling one's too
    try:
        before: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        before = None
    if before is not None and not stat.S_ISREG(before.st_mode):
        with open(target, "wb") as stream:  # a device or a pipe: no rename, nothing to keep
            stream.write(data)
        return target
    descriptor, temporary = _new_file(target)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())  # on disk before the rename: a crash leaves the old file or the new
        if before is not None:
            os.chmod(temporary, stat.S_IMODE(before.st_mode))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _sync_folder(target.parent)
    return target


def save_figure(figure: Any, path: str | os.PathLike[str], **options: Any) -> Path:
    """A matplotlib ``figure`` drawn in memory in the format ``path``'s ending names (matplotlib's
    default without one), then written whole (:func:`write_bytes`); ``options`` go to ``savefig``."""
    buffer = io.BytesIO()
    kind = Path(path).suffix.lstrip(".").lower() or None
    figure.savefig(buffer, format=kind, **options)
    write_bytes(path, buffer.getvalue())
    return Path(path)


def _new_file(target: Path) -> tuple[int, str]:
    """A new file beside ``target``, open for writing, and its name. Made with mode 0o666 so that the
    umask decides its permissions, as for any new file (``tempfile`` would make it 0o600). The folder must
    take a new file: a writable file in a read-only folder is not written."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(_TRIES):
        name = str(target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp"))
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue
        except OSError as e:  # a folder that takes no new file (read-only, /proc): the system's words alone misled
            raise OSError(e.errno, f"{e.strerror} making a new file beside it in {target.parent}") from e
    raise FileExistsError(f"{target.parent}: no free name for a temporary file after {_TRIES} tries")


def _sync_folder(folder: Path) -> None:
    """The rename itself on disk. Not every system opens a folder (Windows) or syncs one: the file is
    written either way, so a refusal here is no failure."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)
