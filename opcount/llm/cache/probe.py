"""What each layer of a causal LM really stores in its cache, read from the model's own forward:
a one-token forward on meta fills a transformers cache, whose keys and values give each attention
layer's KV heads and key and value widths, and whose conv and recurrent states give each state
layer's shapes. The model's attention modules, not its config, decide these: Falcon's one KV
head (``multi_query``), a model whose sliding layers keep other heads than its global ones
(Inkling), values narrower than keys (MiMo-V2-Flash), heads and head sizes per layer (Gemma 4).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from ...errors import OpcountError
from ...messages import first_line
from ...tracing import trace
from ..attention.rope import dynamic_rope
from ..attention.serving import serving_attention

Routing = Callable[[nn.Module], contextlib.AbstractContextManager[Any]]
Shapes = tuple[tuple[int, ...], ...]  # tensors' shapes, one sequence's


class StateShapes(NamedTuple):
    """One layer's states for one sequence: the shapes of its conv states and of its recurrent states."""

    conv: Shapes
    recurrent: Shapes


@dataclass(frozen=True)
class KVShape:
    """One attention layer's keys and values per token: ``kv_heads`` heads, keys ``key_dim`` wide
    and values ``value_dim`` wide."""

    kv_heads: int
    key_dim: int
    value_dim: int

    @property
    def elements(self) -> int:
        """Elements held per token: keys and values."""
        return self.kv_heads * (self.key_dim + self.value_dim)


@dataclass(frozen=True)
class ProbedCache:
    """Per layer index: the KV shape of the layers storing keys and values, and the conv and
    recurrent state shapes (one sequence) of the layers storing states."""

    kv: dict[int, KVShape]
    states: dict[int, StateShapes]


def probe_cache(
    model: nn.Module, config: Any, routing: Routing, prepare: Callable[[Any], None] | None = None
) -> ProbedCache:
    """Run one token on meta into a transformers cache (``prepare(cache)`` first; ``routing(model)``
    around it: meta tensors cannot route a mixture-of-experts block by their values) and read what
    each layer stored."""
    from ... import transformers_internals
    from ...transformers_internals import DynamicCache, cache_keyword

    try:  # transformers 4 has no state layers in its cache
        stateful: Any = transformers_internals.LinearAttentionCacheLayerMixin
    except OpcountError:
        stateful = ()
    tokens = torch.zeros((1, 1), dtype=torch.long, device="meta")
    try:
        cache = DynamicCache(config=config)  # raises on a layer type transformers does not know
        if prepare is not None:
            prepare(cache)
        with routing(model), serving_attention(model), dynamic_rope(model, 1), torch.no_grad():
            # under the dispatch tracer, on shape-only tensors where they can follow: a quarter of
            # the plain meta forward's time on a 70B (torch's Python meta kernels run once per distinct call)
            trace(model, (), {"input_ids": tokens, "use_cache": True, cache_keyword(model): cache}, tracer="dispatch")
    except Exception as e:  # whatever the model's forward raises on meta
        raise OpcountError(
            f"{type(config).__name__}: what its layers cache could not be read from a forward on meta: "
            f"{first_line(e, type(e).__name__)}"
        ) from e
    kv: dict[int, KVShape] = {}
    states: dict[int, StateShapes] = {}
    for index, layer in enumerate(cache.layers):
        keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
        if isinstance(keys, torch.Tensor) and isinstance(values, torch.Tensor) and keys.dim() == values.dim() == 4:
            if keys.shape[1] != values.shape[1]:
                raise OpcountError(
                    f"{type(config).__name__}: layer {index} caches {keys.shape[1]} key heads and "
                    f"{values.shape[1]} value heads: opcount does not know this shape"
                )
            kv[index] = KVShape(int(keys.shape[1]), int(keys.shape[3]), int(values.shape[3]))
        if isinstance(layer, stateful):
            conv, recurrent = (
                tuple(tuple(t.shape[1:]) for t in found.values() if isinstance(t, torch.Tensor))
                for found in (layer.conv_states, layer.recurrent_states)
            )
            states[index] = StateShapes(conv, recurrent)
    return ProbedCache(kv, states)
