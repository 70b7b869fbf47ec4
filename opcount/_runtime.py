"""Process-level helpers for the analyses."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from collections.abc import Iterator

# The frames a trace adds below the user's call and above the model's operators: opcount's own
# entry (about 10), and the dispatch mode's and fake tensors' frames under each operator (about
# 20). Per level of module nesting the tracers add none: their module call takes torch's three
# frames. Raised by this much during a trace, the recursion limit lets a model nest as deep under
# opcount as it does under torch.
TRACE_FRAMES = 200


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while tracing and aggregating.

    Both create many small objects while the model's objects are alive: the collections that
    triggers are slow (a third of the time on a 4000-layer model) and find nothing to free.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextlib.contextmanager
def kineto_quiet(cuda: bool) -> Iterator[None]:
    """Keep kineto, torch.profiler's C++ backend, from writing to the terminal on a CPU-only run.

    Without a GPU it prints ``USDT: ... profiler_start``/``profiler_stop`` lines and ``ERROR: ...
    gpuGetDeviceCount failed`` (its probe for GPUs) straight to file descriptor 2, bypassing
    Python. ``KINETO_LOG_LEVEL`` above its highest level (USDT = 5) silences it; kineto reads the
    variable once, when the first profiler in the process starts (checked on torch 2.14.1). A CUDA
    run keeps kineto's messages (CUPTI's errors there are real), and so does a level the user set.
    """
    if cuda or "KINETO_LOG_LEVEL" in os.environ:
        yield
        return
    os.environ["KINETO_LOG_LEVEL"] = "6"
    try:
        yield
    finally:
        os.environ.pop("KINETO_LOG_LEVEL", None)


@contextlib.contextmanager
def recursion_headroom(frames: int = TRACE_FRAMES) -> Iterator[None]:
    """Raise Python's recursion limit by ``frames`` for the block: a model torch runs at the
    limit its user set runs under the tracers too. Put back only if nothing changed it since."""
    before = sys.getrecursionlimit()
    raised = before + frames
    sys.setrecursionlimit(raised)
    try:
        yield
    finally:
        if sys.getrecursionlimit() == raised:
            sys.setrecursionlimit(before)
