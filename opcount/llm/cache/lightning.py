"""MiniMax's lightning attention (linear attention with a per-head decay): the state each such
layer keeps, and the model's own cache class (``MiniMaxCache``) holding it while a phase runs.

A lightning layer keeps one matrix per head, ``sum_t decay^(T-t) k_t^T v_t``: ``heads x head_dim x
head_dim`` per sequence, whatever the context, and no conv state. vLLM stores the same
(``MambaStateShapeCalculator.linear_attention_state_shape``: ``(num_heads, head_dim, head_dim)``,
in the model's dtype unless ``mamba_cache_dtype`` says otherwise). transformers' MiniMax keeps it
outside the cache layers (``set_linear_cache``), so it cannot be read from a ``DynamicCache`` as
the other state layers' shapes are: it is read from the modules instead.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from ...errors import OpcountError
from .probe import StateShapes


def lightning_layers(model: nn.Module) -> dict[int, Any]:
    """The lightning-attention modules of ``model`` by layer index: a module with a decay
    (``slope_rate``), a block size and ``qkv_proj``, as transformers' MiniMax has."""
    found: dict[int, Any] = {}
    m: Any  # a module read by its attributes' names
    for m in model.modules():
        if (
            callable(getattr(m, "get_slope_rate", None))
            and isinstance(getattr(m, "qkv_proj", None), nn.Linear)
            and all(isinstance(getattr(m, a, None), int) for a in ("layer_idx", "num_attention_heads", "head_dim"))
        ):
            found[m.layer_idx] = m
    return found


def lightning_states(model: nn.Module) -> dict[int, StateShapes]:
    """Each lightning layer's state shapes for one sequence: no conv state, one recurrent state."""
    return {
        i: StateShapes((), ((m.num_attention_heads, m.head_dim, m.head_dim),))
        for i, m in lightning_layers(model).items()
    }


def lightning_cache(model: nn.Module, layers: list[Any], step: bool) -> Any | None:
    """The model's own cache class over the phase's cache ``layers``, its lightning layers' state
    being the recurrent state held in ``layers`` (written in place at the end of the step), or None
    for a model without lightning layers."""
    found = lightning_layers(model)
    if not found:
        return None
    module = sys.modules[type(next(iter(found.values()))).__module__]
    classes = [
        k for k in vars(module).values() if isinstance(k, type) and callable(getattr(k, "set_linear_cache", None))
    ]
    if len(classes) != 1:
        raise OpcountError(f"{module.__name__}: lightning attention without one cache class holding its state")
    cache: Any = classes[0]()
    cache.layers = layers
    states: dict[int, torch.Tensor] = {i: layers[i].recurrent_states[0] for i in found}
    # a prefill starts from no state (the blockwise form), a decode step from the state held (zero
    # in an empty cache: still the one-token update, not the prompt's blocks)
    cache.linear_cache = [states.get(i) if step else None for i in range(len(layers))]

    def write(layer_idx: int, state: torch.Tensor) -> None:
        states[layer_idx].copy_(state)

    cache.set_linear_cache = write
    return cache
