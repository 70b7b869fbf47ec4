"""Learned prompt tokens a model prepends to every input (CPM-Ant: ``prompt_length`` rows of its
input embedding, run in front of each sequence): positions the model really runs and caches beyond
the phase's own. A prompt of ``s`` tokens runs ``P + s`` positions and leaves ``P + s`` in the cache;
a decode step after ``L`` cached tokens attends over ``P + L`` cached positions.

CPM-Ant's own forward takes the whole sequence at every step and computes the embeddings, the
mask and the position bias of every position before keeping the new rows (its code slices the
cached prefix off itself): a cost in the square of the context at each step that a cached step
does not need. For the trace it runs the new positions only: their embeddings, the position bias
of their rows (``[new, P + L + new]``), and no mask (an unpadded CPM-Ant input attends to every
position, its prompt included, as the model's mask says).
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ..patching import patched

_BASE = "CpmAntModel"


def _base(model: nn.Module) -> Any:
    """The module holding the prompt tokens, or None."""
    for module in model.modules():
        length = getattr(module, "prompt_length", None)
        if type(module).__name__ == _BASE and isinstance(length, int) and not isinstance(length, bool):
            return module
    return None


def prompt_length(model: nn.Module) -> int:
    """``P``: the positions the model runs in front of every sequence (0 for a model without)."""
    base = _base(model)
    return 0 if base is None else int(base.prompt_length)


def cache_lengths(prefix: int, kv_len: int, seq_len: int) -> tuple[int, int]:
    """``(kv_len, seq_len)`` as the model's cache sees them with ``prefix`` prompt positions: the
    prefix joins a prompt (``(0, P + s)``) and is cached before a decode step (``(P + L, s)``)."""
    return (kv_len + prefix, seq_len) if kv_len else (0, seq_len + prefix)


def _forward(
    self: Any,
    input_ids: torch.Tensor,
    output_attentions: Any = None,
    output_hidden_states: Any = None,
    cache: Any = None,
    use_cache: Any = None,
    return_dict: Any = None,
    **kwargs: Any,
) -> Any:
    """CPM-Ant's forward for the new positions only (module docstring), called as its causal LM
    calls it; ``input_ids`` are the new tokens."""
    batch, new = input_ids.shape
    prefix, device = self.prompt_length, input_ids.device
    ids = input_ids.to(torch.int32)
    past = cache.get_seq_length() if cache is not None else 0
    segment = torch.full((batch, new), 2, dtype=torch.int32, device=device)  # a token's segment
    if past == 0:  # the prompt tokens run with the prompt: rows of the input embedding past the vocabulary
        first = self.prompt_length * 2 + self.vocab_size
        prompt = torch.arange(first, first + prefix, dtype=torch.int32, device=device).repeat(batch, 1)
        ids = torch.cat((prompt, ids), dim=1)
        segment = torch.cat((torch.zeros((batch, prefix), dtype=torch.int32, device=device), segment), dim=1)
    rows, keys = ids.shape[1], past + ids.shape[1]
    hidden = self.input_embedding(ids) + self.segment_embedding(segment)
    key_segment = torch.cat(
        (
            torch.zeros((batch, min(prefix, keys)), dtype=torch.int32, device=device),
            torch.full((batch, keys - min(prefix, keys)), 2, dtype=torch.int32, device=device),
        ),
        dim=1,
    )
    positions = torch.arange(keys, dtype=torch.int32, device=device).repeat(batch, 1)
    bias = self.position_bias(positions, positions[:, past:], key_segment, key_segment[:, past:])
    mask = torch.ones((batch, rows, keys), dtype=torch.bool, device=device)
    hidden = self.encoder(hidden, mask, bias, False, False, cache, True)[0]
    if past == 0:
        hidden = hidden[:, prefix:, :]  # the prompt tokens' outputs are dropped, as the model drops them
    if return_dict is False:
        return (hidden, cache)
    return sys.modules[type(self).__module__].BaseModelOutputWithPast(last_hidden_state=hidden, cache=cache)


@contextlib.contextmanager
def new_positions_only(model: nn.Module) -> Iterator[None]:
    """For the block, a model with prompt tokens runs its new positions only (module docstring)."""
    base = _base(model)
    with patched([] if base is None else [(base, "forward", types.MethodType(_forward, base))]):
        yield
