"""The process state a trace may change, kept: saved when a trace starts and put back when it ends,
under the patch lock (:func:`.patching.exclusive`), so that analyses in several threads at once
leave it exactly as it was.

- **The recursion limit**, raised by :data:`opcount._runtime.TRACE_FRAMES` for opcount's own frames
  (:func:`opcount._runtime.recursion_headroom`); under the lock one thread at a time raises and
  lowers it, so it comes back to the caller's value however many analyses overlapped.
- **torch's random number generators**: the CPU one and those of the CUDA devices already in use.
  A forward that draws (dropout in training, ``torch.rand`` in a forward) draws from a fork, and
  the caller's stream goes on as if no analysis had run. A CUDA runtime not yet started is not
  started for this: nothing could have drawn from its generators.
- **torch's default dtype** (one per process): code the model runs may set it, as transformers'
  ``from_config(dtype=...)`` does for the duration of its build (:func:`default_dtype_kept`).
- **Grad mode** (one per thread): a forward may call ``torch.set_grad_enabled``.

The other process state a trace changes has its own keeper beside the code that changes it: the
warning filters (:func:`.jit._warnings`), the garbage collector (:func:`opcount._runtime.gc_paused`),
the patched class attributes (:func:`.patching.replaced`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

import torch

from .._runtime import recursion_headroom
from .patching import exclusive

T = TypeVar("T")


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """The block (a trace) under the patch lock, with the state above put back afterwards."""
    with exclusive(), recursion_headroom(), _random_forked(), default_dtype_kept(), _grad_mode_kept():
        yield


@contextlib.contextmanager
def default_dtype_kept() -> Iterator[None]:
    """Put torch's default dtype back as it was before the block; under the patch lock, so that
    blocks in two threads do not save each other's (transformers sets it while it builds a model)."""
    with exclusive(), _setting_kept(torch.get_default_dtype, torch.set_default_dtype):
        yield


@contextlib.contextmanager
def _random_forked() -> Iterator[None]:
    # torch.cuda.is_initialized() is False until something uses CUDA: its generators are untouched then
    started = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
    cuda = list(range(torch.cuda.device_count())) if started else []
    with torch.random.fork_rng(devices=cuda):
        yield


def _grad_mode_kept() -> contextlib.AbstractContextManager[None]:
    return _setting_kept(torch.is_grad_enabled, torch.set_grad_enabled)


@contextlib.contextmanager
def _setting_kept(get: Callable[[], T], put: Callable[[T], object]) -> Iterator[None]:
    """``put`` back the value ``get`` read before the block, where the block changed it."""
    before = get()
    try:
        yield
    finally:
        if get() != before:
            put(before)
