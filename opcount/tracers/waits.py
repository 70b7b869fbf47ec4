"""Whether a thread is blocked waiting for another: what the patch lock asks before a thread waits
on for it (:func:`opcount.tracers.patching.exclusive`).

A thread that holds the lock and, inside the forward it traces, joins a thread or waits for a
future that thread runs, while that thread waits for the lock to start an analysis of its own,
would wait forever. The holder's innermost frames say what it waits on: ``Thread.join`` of the
waiting thread, or ``Future.result`` / ``concurrent.futures.wait`` / ``as_completed`` of a future
the waiting thread is running (``ThreadPoolExecutor.map`` and ``submit(...).result()`` both end
there; leaving a ``with ThreadPoolExecutor()`` block joins its threads). Any other wait (an
``Event``, a ``Queue``) cannot be matched to a thread; :func:`parked_in_wait` tells that the
holder is parked in one, which the lock turns into an error only after a long while.

Only the holder's innermost frames inside the standard library's threading modules are read, a
few per check: a holder busy tracing is never in one, so the check costs next to nothing.
"""

from __future__ import annotations

import sys
import threading
from types import FrameType
from typing import Any

# The standard library's modules a wait for another thread runs in, by their path's ending.
_THREADING = ("threading.py",)
_FUTURES = ("concurrent/futures/_base.py", "concurrent\\futures\\_base.py")
_WORKER = ("concurrent/futures/thread.py", "concurrent\\futures\\thread.py")
_WAITS = (*_THREADING, *_FUTURES, "queue.py", "multiprocessing/pool.py", "multiprocessing\\pool.py")
_DEPTH = 8  # innermost frames read: a wait's own frames, never the model's


def _frames(ident: int) -> list[FrameType]:
    """The innermost frames of thread ``ident`` that lie in the standard library's waits."""
    frame = sys._current_frames().get(ident)
    found: list[FrameType] = []
    while frame is not None and len(found) < _DEPTH and frame.f_code.co_filename.endswith(_WAITS):
        found.append(frame)
        frame = frame.f_back
    return found


def running_future() -> object | None:
    """The ``concurrent.futures`` future the calling thread is running as a pool's worker, if any."""
    frame: FrameType | None = sys._getframe()
    while frame is not None:
        code = frame.f_code
        if code.co_name == "run" and code.co_filename.endswith(_WORKER):
            return getattr(frame.f_locals.get("self"), "future", None)
        frame = frame.f_back
    return None


def waits_for(holder: int, me: threading.Thread, future: object | None) -> str | None:
    """How thread ``holder`` waits for thread ``me`` (which runs ``future``, or None), in words;
    None when it does not, as far as its frames tell."""
    for frame in _frames(holder):
        name, path = frame.f_code.co_name, frame.f_code.co_filename
        here: Any = frame.f_locals.get("self")
        if path.endswith(_THREADING) and name in ("join", "_wait_for_tstate_lock") and here is me:
            return "joins it"
        if future is None or not path.endswith(_FUTURES):
            continue
        if name in ("result", "exception") and here is future:
            return "waits for the result of the future it runs"
        if name in ("wait", "as_completed") and future in _futures(frame.f_locals.get("fs")):
            return "waits for the future it runs"
    return None


def _futures(fs: object) -> list[object]:
    """The futures a ``wait`` or ``as_completed`` frame waits for (its ``fs``: a set or a list)."""
    return list(fs) if isinstance(fs, (set, frozenset, list, tuple)) else []


def parked_in_wait(holder: int) -> bool:
    """Whether thread ``holder`` is blocked in a wait of the standard library's threading modules
    (a lock, a condition, a queue): not running code of its own."""
    return bool(_frames(holder))
