"""Process-wide patches for a trace (``nn.Module.__call__``, ``Function.apply``), made safe to
share a process with other threads and other analyses.

A class attribute replaced for a trace is seen by every thread, as is the other process state a
trace changes for its duration (warning filters, the garbage collector, the recursion limit, the
random number generators: :mod:`.process`). So each trace, and each patched window in it, runs
under one process-wide lock (re-entrant: an analysis started inside another's forward, in the
same thread, nests), and a replaced attribute is put back only if it is still the one this
window set: a replacement made meanwhile by the user's code is kept, never clobbered. The
replacements themselves pass calls from other threads straight to the original after one
thread check, so work elsewhere is neither recorded nor held up by the lock; a module of the
analyzed model called by another thread is noted (:class:`OtherThreads`), and the trace fails
naming it rather than count the model without that work.

A thread waiting for the lock never waits forever: when the holder, inside the forward it traces,
joins the waiting thread or waits for a future it runs (:mod:`.waits`), neither could go on, and
the waiting thread's analysis fails at once, saying so; when the holder is parked in any other
wait of the threading modules for :data:`PATIENCE` seconds on end, likewise.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from torch import nn

from ..errors import TraceError
from . import waits

_LOCK = threading.RLock()
# The thread holding the lock and how many windows it has open: written by the holder alone, read
# by the threads waiting for it.
_holder: list[int | None] = [None]
_depth = [0]

POLL = 0.1  # seconds between a waiting thread's looks at what the holder waits for
PATIENCE = 60.0  # seconds the holder may stay parked in a wait no thread is matched to


class OtherThreadError(TraceError):
    """The analyzed model ran in another thread during its trace, or the thread holding the patch
    lock waits for the thread asking for it: work the trace cannot see, or a wait with no end."""


@contextlib.contextmanager
def exclusive() -> Iterator[None]:
    """Hold the lock of the patched windows: one analysis's patches at a time."""
    lock = _LOCK  # looked up per window, so that it can be instrumented
    if not lock.acquire(blocking=False):
        _wait(lock)
    try:
        if _depth[0] == 0:
            _holder[0] = threading.get_ident()
        _depth[0] += 1
        yield
    finally:
        _depth[0] -= 1
        if _depth[0] == 0:
            _holder[0] = None
        lock.release()


def _wait(lock: Any) -> None:
    """Take ``lock``, raising :class:`OtherThreadError` where the wait would never end."""
    me = threading.current_thread()
    future = waits.running_future()
    parked: tuple[int, float] | None = None  # (holder, since when) while the holder sits in a wait
    while not lock.acquire(timeout=POLL):
        holder = _holder[0]
        if holder is None:
            continue
        how = waits.waits_for(holder, me, future)
        if how is not None:
            raise OtherThreadError(_deadlock(holder, me, f"{how}, inside the forward it traces"))
        if not waits.parked_in_wait(holder):
            parked = None
        elif parked is None or parked[0] != holder:
            parked = (holder, time.monotonic())
        elif time.monotonic() - parked[1] >= PATIENCE:
            raise OtherThreadError(
                _deadlock(holder, me, f"has waited {PATIENCE:g} s inside the forward it traces for another thread")
            )


def _deadlock(holder: int, me: threading.Thread, how: str) -> str:
    names = {t.ident: t.name for t in threading.enumerate()}
    return (
        f"thread {me.name!r} cannot start an analysis: thread {names.get(holder, holder)!r} is tracing a model, "
        f"holds opcount's patch lock until its forward returns, and {how}: waiting for the lock would never "
        "end. Start the analysis outside the analyzed forward, or in the forward's own thread, where analyses nest."
    )


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


class OtherThreads:
    """The analyzed model's modules called by threads other than the tracing one during the trace.

    Their operators run outside the trace (torch's tracer and dispatch modes are per thread), so
    counting the model without them would be a wrong number (a forward mapping its layers over a
    thread pool: the first layer's flops alone). The replaced module calls note the first such
    call of each module (:meth:`saw`, off the tracing thread's path), and the tracer raises
    :meth:`error` once the forward returns or fails.
    """

    _MOST = 1000  # modules noted: enough to name them, bounded whatever the threads do

    def __init__(self) -> None:
        self.seen: dict[str, str] = {}  # module name -> the thread that called it first

    def saw(self, name: str) -> None:
        if name not in self.seen and len(self.seen) < self._MOST:
            self.seen[name] = threading.current_thread().name

    def error(self, model: nn.Module, modules: Callable[[str], nn.Module]) -> OtherThreadError | None:
        """The error naming the modules seen (``modules`` finds one by name), or None."""
        if not self.seen:
            return None
        (first, thread), *more = self.seen.items()
        what = f"module '{first}' ({type(modules(first)).__name__})" if first else "the model itself"
        others = f", and {len(more)} more of its modules ({', '.join(n for n, _ in more[:5])}" if more else ""
        others += ", ...)" if len(more) > 5 else (")" if more else "")
        return OtherThreadError(
            f"could not trace the model ({type(model).__name__}): {what} ran in another thread ({thread!r}) while "
            f"the model's forward was traced{others}. opcount records the operators of the thread that calls the "
            "model, so that work would be missing from the counts. Hint: for the analysis, run those calls in the "
            "forward's own thread (a thread pool's map as a loop), or analyze the module the pool runs on its own; "
            "no other thread may run the analyzed model while it is traced."
        )
