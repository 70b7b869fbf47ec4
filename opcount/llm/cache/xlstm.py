"""xLSTM's recurrent state (mLSTM layers, no attention heads) and the model's own cache class
(``xLSTMCache``) holding it while a phase runs.

Each mLSTM layer keeps, per head, the matrix memory ``C`` (``qk_head_dim x v_head_dim``), the
normalizer ``n`` (``qk_head_dim``) and the stabilizer ``m`` (1), whatever the context: the three
tensors transformers' ``xLSTMCache`` allocates per layer, in the model's dtype (the xLSTM paper,
section 2.3, gives the same recurrence). transformers reads no layer types from xLSTM's config
(it would call every layer full attention): the layers are read from the model instead.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from .probe import StateShapes

_CACHE = "xLSTMCache"


def _cache_class(model: nn.Module) -> Any | None:
    return getattr(sys.modules[type(model).__module__], _CACHE, None)


def xlstm_states(model: nn.Module, config: Any) -> dict[int, StateShapes]:
    """Each layer's state shapes for one sequence (no conv state; ``C``, ``n``, ``m``), or nothing
    for a model other than xLSTM."""
    if _cache_class(model) is None:
        return {}
    # the widths the layers are built with (the config's qk_head_dim rounds up to 64 where they do not)
    heads = int(config.num_heads)
    layers: list[Any] = [m for m in model.modules() if _is_mlstm(m)]
    widths = [(int(m.qk_dim) // heads, int(m.v_dim) // heads) for m in layers]
    return {i: StateShapes((), ((heads, qk, v), (heads, qk), (heads, 1))) for i, (qk, v) in enumerate(widths)}


def _is_mlstm(m: Any) -> bool:
    return all(isinstance(getattr(m, a, None), int) for a in ("qk_dim", "v_dim")) and isinstance(m, nn.Module)


def xlstm_cache(model: nn.Module, config: Any, layers: list[Any], kv_len: int, step: bool) -> Any | None:
    """The model's own cache over the phase's state ``layers`` (their recurrent states, which the
    forward reads and then overwrites in place; a decode step's, a zero one in an empty cache,
    is a state held), or None for a model other than xLSTM."""
    cache_class = _cache_class(model)
    if cache_class is None:
        return None
    cache: Any = cache_class.__new__(cache_class)  # its constructor allocates the states: they are the phase's here
    cache.config, cache.dtype, cache.layers = config, layers[0].dtype, layers
    cache.seqlen_offset = torch.tensor([kv_len])
    cache.rnn_state = {i: tuple(layer.recurrent_states[j] for j in range(3)) for i, layer in enumerate(layers)}
    cache.rnn_state_initial = not step
    return cache
