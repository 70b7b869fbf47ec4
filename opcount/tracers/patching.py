"""Process-wide patches for a trace (``nn.Module.__call__``, ``Function.apply``), made safe to
share a process with other threads and other analyses.

A class attribute replaced for a trace is seen by every thread, as is the other process state a
trace changes for its duration (warning filters, the garbage collector). So each trace, and
each patched window in it, runs under one process-wide lock (re-entrant: an analysis started inside another's forward, in the
same thread, nests), and a replaced attribute is put back only if it is still the one this
window set: a replacement made meanwhile by the user's code is kept, never clobbered. The
replacements themselves pass calls from other threads straight to the original after one
thread check, so work elsewhere is neither recorded nor held up by the lock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

_LOCK = threading.RLock()


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Hold the lock of the patched windows: one analysis's patches at a time."""
    lock = _LOCK  # looked up per window, so that it can be instrumented
    with lock:
        yield


@contextlib.contextmanager
def replaced(owner: type, name: str, make: Callable[[Any], Any]) -> Iterator[None]:
    """Set ``owner.name`` to ``make(original)`` for the window; afterwards restore the original
    only if the attribute is still what was set. Takes the lock (:func:`exclusive`)."""
    with exclusive():
        original = owner.__dict__[name]
        new = make(original)
        setattr(owner, name, new)
        try:
            yield
        finally:
            if owner.__dict__.get(name) is new:
                setattr(owner, name, original)
