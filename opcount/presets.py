"""Named sets of flop handles: which operators are counted and which are explicitly free."""

from __future__ import annotations

from dataclasses import dataclass

from .handles import FLOPS, FVCORE_IGNORED, Handle

PRESETS = ("default", "fvcore", "macs")


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
        return Preset({op: h for op, h in handles.items() if h.fvcore}, FVCORE_IGNORED)
    if name == "macs":
        macs = {op: h for op, h in handles.items() if h.macs}
        return Preset(macs, FLOPS.zero | frozenset(handles.keys() - macs.keys()))
    raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
