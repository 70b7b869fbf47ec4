"""Custom autograd Functions named for the dispatch tracer.

The operators a ``torch.autograd.Function`` runs, in its ``forward`` and its ``backward``, are
recorded under its class name (``OpCall.within``, reported as ``"MyFn::mm"``), following
MXNet's custom-operator profiling design. That takes a process-wide wrapper of
``Function.apply``, kept here with its thread check and its restoration.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from torch.autograd import Function

from .patching import replaced
from .recorder import Recorder


@contextlib.contextmanager
def functions_named(recorder: Recorder) -> Iterator[None]:
    """Wrap ``torch.autograd.Function.apply`` for the trace: the operators a custom Function
    runs are recorded under its name, and its backward node is tagged for the backward pass.

    ``apply`` is a class attribute shared by every Function, so this is process-wide while the
    trace runs: held under :mod:`.patching`'s lock, calls from other threads pass straight
    through, and it is restored afterwards if it is still ours.
    """
    live = recorder.scopes.live

    def named(original: Any) -> Any:
        def apply(cls: type[Function], *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != live[0]:
                return original.__get__(None, cls)(*args, **kwargs)
            return _apply_named(recorder, original, cls, args, kwargs)

        return classmethod(apply)

    with replaced(Function, "apply", named):
        yield


def _apply_named(recorder: Recorder, original: Any, cls: type[Function], args: Any, kwargs: Any) -> Any:
    """A custom Function's call during the trace: its operators and backward node named by it."""
    outer = recorder.within
    recorder.within = (*outer, cls.__name__)
    try:
        out = original.__get__(None, cls)(*args, **kwargs)
    finally:
        recorder.within = outer
    recorder.tag(out, (recorder.scopes.current, (*outer, cls.__name__)))
    return out
