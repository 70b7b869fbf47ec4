"""Process-level helpers for the analyses: settings of the whole process changed for a block.

Analyses run in several threads at once, so a setting each block saved and put back would end
wrong: two blocks overlapping save each other's value. The garbage collector and kineto's log level
are held by every block that needs them at once: the first to enter saves the caller's setting,
the last to leave puts it back (:class:`_Holders`). The recursion limit differs per block (each
nested trace raises it further), so it is raised only under the patch lock
(:func:`opcount.tracers.patching.exclusive`), one thread at a time, and comes back exactly.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from collections.abc import Callable, Iterator

# The frames a trace adds below the user's call and above the model's operators: opcount's own
# entry (about 10), and the dispatch mode's and fake tensors' frames under each operator (about
# 20). Per level of module nesting the tracers add none: their module call takes torch's three
# frames. Raised by this much during a trace, the recursion limit lets a model nest as deep under
# opcount as it does under torch.
TRACE_FRAMES = 200


class _Holders:
    """The blocks holding one process setting now, in every thread: their count, and the caller's
    setting from before the first of them, which the last one puts back."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.restore = False  # whether the last block out puts the caller's setting back

    @contextlib.contextmanager
    def held(self, enter: Callable[[], bool], leave: Callable[[], None]) -> Iterator[None]:
        """``enter()`` in the first block in (it says whether it changed the setting), ``leave()``
        in the last block out where the first changed it."""
        with self.lock:
            if self.count == 0:
                self.restore = enter()
            self.count += 1
        try:
            yield
        finally:
            with self.lock:
                self.count -= 1
                if self.count == 0 and self.restore:
                    leave()


_GC = _Holders()
_KINETO = _Holders()
_KINETO_QUIET = "6"  # above kineto's highest level, USDT = 5


def _pause_gc() -> bool:
    enabled = gc.isenabled()
    gc.disable()
    return enabled


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while tracing and aggregating.

    Both create many small objects while the model's objects are alive: the collections that
    triggers are slow (a third of the time on a 4000-layer model) and find nothing to free.
    Blocks in several threads share one pause (:class:`_Holders`): the collector runs again when
    the last ends, if it ran before the first.
    """
    with _GC.held(_pause_gc, gc.enable):
        yield


@contextlib.contextmanager
def kineto_quiet(cuda: bool) -> Iterator[None]:
    """Keep kineto, torch.profiler's C++ backend, from writing to the terminal on a CPU-only run.

    Without a GPU it prints ``USDT: ... profiler_start``/``profiler_stop`` lines and ``ERROR: ...
    gpuGetDeviceCount failed`` (its probe for GPUs) straight to file descriptor 2, bypassing
    Python. ``KINETO_LOG_LEVEL`` above its highest level (USDT = 5) silences it; kineto reads the
    variable once, when the first profiler in the process starts (checked on torch 2.14.1). A CUDA
    run keeps kineto's messages (CUPTI's errors there are real), and so does a level the user set.
    Profiles in several threads share the setting (:class:`_Holders`): the variable goes when the
    last ends.
    """
    if cuda:
        yield
        return
    with _KINETO.held(_quiet_kineto, _loud_kineto):
        yield


def _quiet_kineto() -> bool:
    if "KINETO_LOG_LEVEL" in os.environ:
        return False  # the user's level
    os.environ["KINETO_LOG_LEVEL"] = _KINETO_QUIET
    return True


def _loud_kineto() -> None:
    if os.environ.get("KINETO_LOG_LEVEL") == _KINETO_QUIET:  # still opcount's
        del os.environ["KINETO_LOG_LEVEL"]


@contextlib.contextmanager
def recursion_headroom(frames: int = TRACE_FRAMES) -> Iterator[None]:
    """Raise Python's recursion limit by ``frames`` for the block: a model torch runs at the
    limit its user set runs under the tracers too. Put back only if nothing changed it since.
    Called under the patch lock alone (:mod:`opcount.tracers.process`): blocks in two threads would
    each save the other's raised limit, and the limit would climb with every overlap."""
    before = sys.getrecursionlimit()
    raised = before + frames
    sys.setrecursionlimit(raised)
    try:
        yield
    finally:
        if sys.getrecursionlimit() == raised:
            sys.setrecursionlimit(before)
