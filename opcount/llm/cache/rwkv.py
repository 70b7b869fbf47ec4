"""RWKV-4's recurrent state (five parts per layer, passed to the model as its ``state`` argument,
outside transformers' cache) and the state a phase is traced with.

Each RWKV-4 layer keeps, per channel of ``hidden_size``, whatever the context: the last token's
input to the channel mix (feed-forward token shift) and to the time mix (attention token shift),
both in the model's dtype, and the WKV recurrence's numerator, denominator and running maximum,
all three in float32 (transformers' ``RwkvModel.forward`` allocates them so; ChatRWKV's RWKV-4
keeps the same five vectors per layer, ``aa``, ``bb`` and ``pp`` in float32). transformers stacks
each part over the layers, ``(batch, hidden_size, layers)``, and the layers index it as
``part[:, :, layer]``; engines keep one tensor per layer and part, and so does the phase here, so
that each layer's state is a tensor of its own, read and written whole.

transformers' one-token step multiplies the token shift, ``(batch, hidden)``, with weights of
``(1, 1, hidden)`` and adds the input, ``(batch, 1, hidden)``: past one sequence the broadcast
runs ``batch x batch`` tokens (its logits come out ``(batch, batch, vocab)``). The phase holds
each token shift as ``(batch, 1, hidden)``, so that a step runs one token per sequence, as the
model means (the same operators at batch 1).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ...errors import OpcountError
from ..patching import patched
from .probe import StateShapes

PARTS = 5
FLOAT32_PARTS = frozenset({2, 3, 4})  # numerator, denominator, maximum: float32 in transformers and ChatRWKV
SHIFT_PARTS = frozenset({0, 1})  # the last token's input to the channel mix and to the time mix


def _is_time_mix(m: Any) -> bool:
    return (
        isinstance(getattr(m, "time_decay", None), nn.Parameter)
        and isinstance(getattr(m, "time_first", None), nn.Parameter)
        and isinstance(getattr(m, "layer_id", None), int)
        and callable(getattr(m, "extract_key_value", None))
    )


def rwkv_layers(model: nn.Module) -> dict[int, tuple[str, Any]]:
    """RWKV-4's time-mix (attention) modules by layer, with their paths: a module with a decay
    (``time_decay``), a bonus (``time_first``), a ``layer_id`` and ``extract_key_value``."""
    return {m.layer_id: (name, m) for name, m in model.named_modules() if _is_time_mix(m)}


def rwkv_states(model: nn.Module) -> dict[int, StateShapes]:
    """Each layer's five state parts for one sequence (no conv state), or nothing for a model
    other than RWKV-4. The parts are ``hidden_size`` wide, as the model stacks them: a time mix
    whose width differs (``attention_hidden_size``) would not fit them, and is refused."""
    found = rwkv_layers(model)
    shapes: dict[int, StateShapes] = {}
    for index, (name, m) in sorted(found.items()):
        key = getattr(m, "key", None)
        if not isinstance(key, nn.Linear) or key.in_features != key.out_features:
            raise OpcountError(
                f"{name}: an RWKV time mix whose width differs from hidden_size: its state (hidden_size wide) "
                "cannot hold it, and opcount does not model it"
            )
        width = key.in_features
        shapes[index] = StateShapes((), tuple((1, width) if p in SHIFT_PARTS else (width,) for p in range(PARTS)))
    if found and sorted(shapes) != list(range(len(shapes))):
        raise OpcountError(
            f"{type(model).__name__}: RWKV layers {sorted(shapes)} are not numbered 0..{len(shapes) - 1}"
        )
    return shapes


class _Part:
    """One of the five parts over every layer, indexed as the model indexes it (``part[:, :, i]``),
    each layer's tensor its own; an assignment writes it in place. A token shift is read
    ``(batch, 1, hidden)`` by a one-token step, ``(batch, hidden)`` by several tokens."""

    def __init__(self, tensors: list[torch.Tensor], flatten: bool) -> None:
        self._tensors, self._flatten = tensors, flatten

    def _layer(self, index: Any) -> torch.Tensor:
        if not (
            isinstance(index, tuple)
            and len(index) == 3
            and all(i == slice(None) for i in index[:2])
            and isinstance(index[2], int)
        ):
            raise OpcountError(f"RWKV's state indexed as {index!r}, not [:, :, layer]: opcount does not know it")
        return self._tensors[index[2]]

    def __getitem__(self, index: Any) -> torch.Tensor:
        held = self._layer(index)
        return held.flatten(1) if self._flatten else held

    def __setitem__(self, index: Any, value: torch.Tensor) -> None:
        held = self._layer(index)
        held.copy_(value.reshape(held.shape))


class RwkvState(list[_Part]):
    """The ``state`` argument of a phase: the five parts, each over the phase's cache ``layers``."""

    layers: list[Any]


@contextlib.contextmanager
def rwkv_phase(model: nn.Module, layers: list[Any], seq_len: int) -> Iterator[RwkvState | None]:
    """The state a phase of ``seq_len`` new tokens passes to an RWKV-4 model (None for another
    model): each part over the recurrent states held in the phase's cache ``layers``. For the block, the model counts its
    layers as rescaled already: its first forward in eval would otherwise divide its output weights
    in place (``rescale_every``), a one-off an engine does when it loads the checkpoint, not a step."""
    found = rwkv_layers(model)
    if not found:
        yield None
        return
    state = RwkvState(
        _Part([layer.recurrent_states[p] for layer in layers], p in SHIFT_PARTS and seq_len > 1) for p in range(PARTS)
    )
    state.layers = layers
    holders: list[Any] = [m for m in model.modules() if isinstance(getattr(m, "layers_are_rescaled", None), bool)]
    with patched((m, "layers_are_rescaled", not m.training) for m in holders):
        yield state
