"""Zamba's Mamba layers scan each of their ``n_mamba_heads`` heads on its own, indexing the SSM
state per head (``recurrent_state[:, head]``, read and written in place head by head): the phase
holds one SSM state tensor per head, so that each head's state is a cache tensor of its own, read
and written whole, rather than a view of one tensor (whose reads and writes the trace would not
tie to the cache). The bytes held are the same: ``heads x head_dim x d_state`` per layer.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from ..errors import OpcountError


def per_head_layers(model: nn.Module) -> dict[int, int]:
    """Layer index -> heads of each Mamba mixer scanning its heads one by one: a module with an int
    ``n_mamba_heads`` and ``layer_idx`` and per-head projections (``x_proj_weight``), as Zamba's."""
    found: dict[int, int] = {}
    for m in model.modules():
        heads, index = getattr(m, "n_mamba_heads", None), getattr(m, "layer_idx", None)
        if (
            isinstance(heads, int)
            and isinstance(index, int)
            and isinstance(getattr(m, "x_proj_weight", None), nn.Parameter)
        ):
            found[index] = heads
    return found


class _Heads:
    """One layer's SSM state as the mixer uses it: ``state[:, head]`` is that head's tensor, and
    ``copy_`` (the cache writing a prompt's final state) writes each head's slice into it."""

    def __init__(self, heads: list[torch.Tensor]) -> None:
        self._heads = heads

    def __getitem__(self, index: Any) -> torch.Tensor:
        if not (isinstance(index, tuple) and len(index) == 2 and index[0] == slice(None) and isinstance(index[1], int)):
            raise OpcountError(f"Zamba's SSM state indexed as {index!r}, not [:, head]: opcount does not know it")
        return self._heads[index[1]]

    def copy_(self, source: torch.Tensor) -> _Heads:
        for h, held in enumerate(self._heads):
            held.copy_(source[:, h])
        return self


def split_heads(layer: Any, named: dict[str, torch.Tensor], heads: int) -> dict[str, torch.Tensor]:
    """Hold the cache ``layer``'s first SSM state as ``heads`` tensors (named ``state0_head{h}``
    in place of ``state0``); returns the tensors to name."""
    whole = named.pop("state0", None)
    if whole is None or whole.dim() < 2 or whole.shape[1] != heads:
        raise OpcountError(f"a Mamba mixer of {heads} heads whose SSM state is not split by head: {named!r}")
    parts = [torch.empty(whole[:, h].shape, dtype=whole.dtype, device=whole.device) for h in range(heads)]
    layer.recurrent_states[0] = _Heads(parts)
    return named | {f"state0_head{h}": t for h, t in enumerate(parts)}
