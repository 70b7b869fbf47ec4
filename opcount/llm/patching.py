"""Instance attributes set for a block and put back exactly as they were, however the block ends.

The LLM path changes a few instances of the user's model while a phase is traced (a module's
``forward``, an attention module's own form, a recurrent block's state, a flag): each such change is
one ``(instance, name, value)`` given to :func:`patched`. Afterwards every attribute is what it was
before the block, an error inside it (or while the changes are made) included: its prior value put
back, or removed again where the instance had none of its own (the class's then shows through, as
before). Only the instance's own attributes are touched (``vars(instance)``), never a class's, and
never a name ``nn.Module`` keeps in its parameters, buffers or submodules, which this is not for.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from ..errors import OpcountError

_ABSENT = object()  # the instance had no attribute of its own by that name
_MODULE_SLOTS = ("_parameters", "_buffers", "_modules")


def _own(instance: object, name: str) -> dict[str, Any]:
    """``instance``'s own attributes, refusing a name ``nn.Module`` keeps elsewhere."""
    own = vars(instance)
    if any(name in own.get(slot, ()) for slot in _MODULE_SLOTS):
        raise OpcountError(f"{type(instance).__name__}.{name} is a parameter, buffer or submodule: not patched")
    return own


@contextlib.contextmanager
def patched(changes: Iterable[tuple[object, str, Any]]) -> Iterator[None]:
    """Set each ``(instance, name, value)`` of ``changes`` for the block (in order; ``changes`` may be
    a generator, its values made as they are set), then restore every one in reverse order."""
    saved: list[tuple[dict[str, Any], str, Any]] = []
    try:
        for instance, name, value in changes:
            own = _own(instance, name)
            saved.append((own, name, own.get(name, _ABSENT)))
            own[name] = value
        yield
    finally:
        for own, name, prior in reversed(saved):
            if prior is _ABSENT:
                own.pop(name, None)
            else:
                own[name] = prior
