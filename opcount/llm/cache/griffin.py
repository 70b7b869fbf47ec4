"""RecurrentGemma (Griffin)'s recurrent blocks: the state each keeps in its own modules, outside
transformers' cache, and that state held by the phase's cache while a phase runs.

A recurrent block keeps, per sequence and whatever the context, the last ``conv1d_width - 1``
inputs of its depthwise convolution over ``lru_width`` channels (``conv1d_state``, in the model's
dtype) and the RG-LRU's hidden state, ``lru_width`` wide, in float32 (``rg_lru.recurrent_states``:
transformers' ``_setup_cache`` and ``_rnn_scan`` keep it in float32, the Griffin paper's
recurrence). The model sets both as attributes on the first forward and rebinds them every step;
here they are the phase's cache tensors before the forward, and a hook on each block writes the
new state into them in place, as an engine updates its state. The local attention layers keep
their keys and values in transformers' cache (a window of ``attention_window_size``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ..patching import patched
from .probe import StateShapes

FLOAT32_STATES = frozenset({0})  # the RG-LRU's hidden state


def _is_recurrent_block(m: Any) -> bool:
    lru = getattr(m, "rg_lru", None)
    return (
        isinstance(m, nn.Module)
        and isinstance(getattr(m, "conv_1d", None), nn.Conv1d)
        and isinstance(lru, nn.Module)
        and "recurrent_states" in vars(lru)
        and "conv1d_state" in vars(m)
    )


def griffin_blocks(model: nn.Module) -> dict[int, Any]:
    """The recurrent blocks by layer index: a module with a ``conv_1d`` convolution, an ``rg_lru``
    keeping ``recurrent_states`` and a ``conv1d_state`` of its own (RecurrentGemma's), found in the
    decoder's list of layers."""
    for m in model.modules():
        if isinstance(m, nn.ModuleList):
            found = {i: b for i, layer in enumerate(m) for b in layer.modules() if _is_recurrent_block(b)}
            if found:
                return found
    return {}


def griffin_states(model: nn.Module) -> dict[int, StateShapes]:
    """Each recurrent block's conv state and RG-LRU state shapes for one sequence."""
    out: dict[int, StateShapes] = {}
    for i, block in griffin_blocks(model).items():
        conv: nn.Conv1d = block.conv_1d
        width = conv.kernel_size[0]
        out[i] = StateShapes(conv=((conv.in_channels, width - 1),), recurrent=((conv.in_channels,),))
    return out


@contextlib.contextmanager
def restored(model: nn.Module) -> Iterator[dict[int, Any]]:
    """The recurrent blocks, their state attributes put back as they were when the block ends,
    failed or not (a forward leaves its last state in them)."""
    blocks = griffin_blocks(model)
    kept: list[tuple[object, str, Any]] = [(b, "conv1d_state", b.conv1d_state) for b in blocks.values()]
    kept += [(b.rg_lru, "recurrent_states", b.rg_lru.recurrent_states) for b in blocks.values()]
    with patched(kept):
        yield blocks


@contextlib.contextmanager
def griffin_phase(model: nn.Module, layers: list[Any], step: bool) -> Iterator[None]:
    """Each recurrent block reads its state from the phase's cache ``layers`` (a prompt starts from
    no RG-LRU state, as the model's scan does; its conv state is the prompt's last inputs; a decode
    ``step`` reads the state held, a zero one in an empty cache) and writes the new state into them
    in place at the end of its forward; its own state attributes are put back afterwards."""
    blocks = griffin_blocks(model)
    states: list[tuple[object, str, Any]] = []
    for i, block in blocks.items():
        conv, state = layers[i].conv_states[0], layers[i].recurrent_states[0]
        states += [(block, "conv1d_state", conv), (block.rg_lru, "recurrent_states", state if step else None)]
    with patched(states), contextlib.ExitStack() as hooks:
        for i, block in blocks.items():
            conv, state = layers[i].conv_states[0], layers[i].recurrent_states[0]

            def write(m: Any, args: Any, out: Any, conv: torch.Tensor = conv, state: torch.Tensor = state) -> None:
                conv.copy_(m.conv1d_state)
                state.copy_(m.rg_lru.recurrent_states)

            hooks.callback(block.register_forward_hook(write).remove)
        yield
