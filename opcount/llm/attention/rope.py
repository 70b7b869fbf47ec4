"""Dynamic RoPE (NTK-aware scaling, a config's ``rope_type: "dynamic"``) traced on the meta device.

transformers' rotary embedding with dynamic scaling (``dynamic_rope_update``) first reads the
positions seen, ``max(position_ids) + 1``, and when they pass the positions its frequencies were made
for (``max_seq_len_cached``, at first ``max_position_embeddings``) makes new inverse frequencies
from a larger base: ``base' = base * (factor * n / max_position_embeddings - (factor - 1)) ** (d / (d - 2))``,
``inv_freq = 1 / base' ** (2i / d)`` for the ``d / 2`` rotary pairs (``_compute_dynamic_ntk_parameters``).
Deciding that needs the positions' value (a Python ``if`` on a tensor: ``.item()``), which a meta
tensor does not have. The phase knows it (its cached and new tokens): the module's ``forward`` is
replaced for the trace by the same steps with the branch taken from that count, so the trace
records what the model's own update runs: the maximum, then, past the cached positions, the new
frequencies (a few elementwise operations on ``d / 2`` values) used by the rotation. Nothing of the
module is changed: the model's update would also store the new frequencies and the positions
reached, which a step's cost does not need.

Each step of a generation past ``max_position_embeddings`` recomputes them (its positions grow by
one each step); serving engines compute one table for the longest context instead (vLLM's
``DynamicNTKScalingRotaryEmbedding``), so the figure here is the model's, a few hundred flops a step.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ...errors import OpcountError
from ..patching import patched

DYNAMIC = "dynamic"  # transformers' dynamic_rope_update runs its data-dependent update for these types


def _dynamic(module: nn.Module) -> bool:
    """A rotary embedding one of whose RoPE types (one, or one per layer type) scales dynamically."""
    kinds = getattr(module, "rope_type", None)
    values = kinds.values() if isinstance(kinds, dict) else (kinds,)
    return any(isinstance(k, str) and DYNAMIC in k for k in values)


class _Updated:
    """The rotary module as its forward sees it after the update: ``values`` (the new frequencies,
    the attention scaling) in front of the module's own attributes, the module itself untouched."""

    def __init__(self, module: nn.Module, values: dict[str, Any]) -> None:
        vars(self).update(values)
        self._module = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def _forward(
    module: Any, inner: Any, positions: int, x: torch.Tensor, position_ids: torch.Tensor, layer_type: Any = None
) -> Any:
    """transformers' dynamic-RoPE forward (``dynamic_rope_update``'s wrapper around ``inner``) with
    its branch on the positions seen taken from ``positions``, which the phase knows."""
    rope_type = module.rope_type if layer_type is None else module.rope_type[layer_type]
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    if DYNAMIC not in rope_type:
        return inner(module, x, position_ids, **kwargs)
    from ...transformers_internals import ROPE_INIT_FUNCTIONS

    prefix = "" if layer_type is None else f"{layer_type}_"
    cached = getattr(module, f"{prefix}max_seq_len_cached", module.max_seq_len_cached)
    seen = torch.max(position_ids) + 1  # the update's first step; its value is ``positions``
    if positions <= cached:  # the frequencies held serve (a fresh module: those of max_position_embeddings)
        return inner(module, x, position_ids, **kwargs)
    inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](module.config, x.device, seq_len=seen, **kwargs)
    return inner(
        _Updated(module, {f"{prefix}inv_freq": inv_freq, "attention_scaling": scaling}), x, position_ids, **kwargs
    )


@contextlib.contextmanager
def dynamic_rope(model: nn.Module, positions: int) -> Iterator[None]:
    """Every dynamic-RoPE module of ``model`` traceable on meta for a forward whose positions reach
    ``positions`` (cached and new tokens), its own ``forward`` back afterwards."""
    changes: list[tuple[object, str, Any]] = []
    for name, m in model.named_modules():
        if not _dynamic(m):
            continue
        inner = getattr(type(m).forward, "__wrapped__", None)  # the rotation under dynamic_rope_update
        if inner is None:
            raise OpcountError(
                f"{name} ({type(m).__name__}): dynamic RoPE without transformers' dynamic_rope_update, "
                "which opcount knows how to run on meta: not modelled"
            )
        changes.append((m, "forward", functools.partial(_forward, m, inner, positions)))
    with patched(changes):
        yield
