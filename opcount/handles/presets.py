"""Named sets of flop handles: which operators are counted and which are explicitly free."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace

from ..errors import OpcountValueError
from ..ir import Spec
from . import FLOPS, FVCORE_IGNORED, FVCORE_IGNORED_BACKWARD, Handle
from .counts import Cost

FLOP_PRESETS = ("default", "fvcore", "macs")


@dataclass(frozen=True)
class Preset:
    handles: dict[str, Handle]
    ignored: frozenset[str]


def flop_preset(name: str) -> Preset:
    """``default``: every formula; ``fvcore``: exactly fvcore's default handles and ignore list;
    ``macs``: only the multiply-add kinds (conv, matmul family, einsum, attention), the rest free."""
    handles = FLOPS.handles
    if name == "default":
        return Preset(handles, FLOPS.zero)
    if name == "fvcore":
        # fvcore's multiply-add handles count multiply-adds only (convolution_backward's bias sum is not)
        fvcore = {op: macs_only(h) if h.macs else h for op, h in handles.items() if h.fvcore}
        return Preset(fvcore, FVCORE_IGNORED | FVCORE_IGNORED_BACKWARD)
    if name == "macs":
        macs = {op: macs_only(h) for op, h in handles.items() if h.macs}
        return Preset(macs, FLOPS.zero | frozenset(handles.keys() - macs.keys()))
    raise OpcountValueError(f"unknown preset {name!r}; choose one of {', '.join(FLOP_PRESETS)}")


def macs_only(handle: Handle) -> Handle:
    """``handle`` keeping only the multiply-adds of a :class:`Cost` it returns (a plain number of a
    ``macs`` handle is all multiply-adds already): the ``"macs"`` preset's view of it."""
    fn = handle.fn

    def multiply_adds(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int | float | Counter[str] | Cost:
        value = fn(inputs, outputs)
        return value.macs if type(value) is Cost else value

    return replace(handle, fn=multiply_adds)
