"""The cache of a causal LM as serving engines store it, per layer type, and the cache object a
phase is traced with.

Each layer's cache is one of (``layer_type``, what one sequence holds):

- ``full_attention``: keys and values of every position, ``2 x kv_heads x head_dim`` per token;
- ``sliding_attention``: the same per token, at most the window's tokens (a rolling buffer: the
  new token overwrites the oldest), so any context length is accepted;
- ``chunked_attention``: the same per token, the tokens of the current chunk only;
- ``latent_attention`` (multi-head latent attention, DeepSeek-V2/V3): the normalized latent and
  the shared rope key, ``kv_lora_rank + qk_rope_head_dim`` per token (:mod:`.latent`);
  DeepSeek sparse attention's layers (``indexed_attention``) hold the same and their indexer's
  keys besides, reported as ``indexer_keys`` and stored in float8 with scales (:mod:`.indexed`);
- ``state``: a state-space or linear-attention layer's conv and recurrent states, a fixed size
  per sequence whatever the context, each part in its own dtype (:mod:`.state_dtypes`: the conv
  states in the model's, the recurrent ones in the state dtype, a part the model keeps in float32
  in float32), not the KV dtype;
- ``none``: a layer that keeps nothing of its own (an MLP-only layer, a layer reusing another's KV).

A layer running attention and a state-space mixer side by side (Falcon-H1, Zamba2's ``hybrid``)
holds both.

The layer types come from transformers' own reading of the config (``layer_types``, or the
sliding/chunk fields): a type not listed here is an error naming it. The tensors are registered
on the model as buffers ``kv_cache.L.*`` while a phase is traced, so the records know which
reads and writes are the cache's (priced in the KV dtype): a step writes its new tokens in place
(``index_copy_``) and attention reads the tokens held, as engines do.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass
from typing import Any

import torch
from torch import nn

from ...errors import OpcountError
from ...messages import first_line
from ...transformers_internals import layer_config
from ..attention.indexed import (
    INDEX_BUFFER,
    INDEXED,
    INDEXER_KEYS,
    hold_index_keys,
    hold_sparse_reads,
    index_key_bytes,
    indexed_layers,
    unrecognised,
)
from ..models.build import kv_geometry
from .griffin import FLOAT32_STATES as GRIFFIN_FLOAT32
from .griffin import griffin_phase, griffin_states, restored
from .lightning import lightning_cache, lightning_states
from .names import CONV_STATE, FLOAT32_STATE, KEYS, KV_PREFIX, LATENT_KV, RECURRENT_STATE, VALUES
from .probe import KVShape, ProbedCache, StateShapes, probe_cache
from .rwkv import FLOAT32_PARTS as RWKV_FLOAT32
from .rwkv import rwkv_phase, rwkv_states
from .state_dtypes import configured, kept_float32
from .xlstm import xlstm_cache, xlstm_states

FULL, SLIDING, CHUNKED, LATENT, STATE, NONE = (
    "full_attention",
    "sliding_attention",
    "chunked_attention",
    "latent_attention",
    "state",
    "none",
)
Routing = Callable[[nn.Module], contextlib.AbstractContextManager[Any]]
_STATE_TYPES = ("linear_attention", "conv", "hybrid", "hybrid_sliding")
# transformers' layer types holding keys and values, with the cache's layer type each is here
_ATTENTION = {
    "full_attention": FULL,
    "sliding_attention": SLIDING,
    "chunked_attention": CHUNKED,
    "hybrid": FULL,
    "hybrid_sliding": SLIDING,
}


@dataclass(frozen=True)
class LayerCache:
    """One layer's cache: ``token_elements`` per position held, ``state_elements`` per sequence
    (``conv_elements`` of them conv states, ``float32_elements`` recurrent states the model keeps in
    float32, the rest recurrent states: :mod:`.state_dtypes`), and the
    window (sliding) or chunk (chunked) size; a latent layer's ``rank`` (its cache one tensor, the
    latent then the rope key); a DSA layer's ``index_elements`` (its indexer key per position) and
    the ``topk`` tokens it attends to."""

    layer_type: str
    token_elements: int = 0
    _: KW_ONLY  # the others by name
    state_elements: int = 0
    window: int = 0
    float32_elements: int = 0
    conv_elements: int = 0
    index_elements: int = 0
    topk: int = 0
    rank: int = 0

    def positions(self, kv_len: int, seq_len: int) -> int:
        """Token positions held per sequence when ``seq_len`` new tokens follow ``kv_len`` cached ones.
        A sliding layer keeps the window (and, when several tokens come at once after a cache, the
        ``seq_len - 1`` more the first of them still sees); a chunked layer keeps from the start of
        the chunk of its first query that has a cache (the last prompt token's, in a prefill)."""
        total = kv_len + seq_len
        if self.layer_type == SLIDING:
            return min(total, self.window + (seq_len - 1 if kv_len else 0))
        if self.layer_type == CHUNKED:
            first = kv_len if kv_len else total - 1
            return total - first // self.window * self.window
        return total if self.token_elements else 0

    def elements(self, kv_len: int, seq_len: int, batch: int) -> int:
        """Elements held by ``batch`` sequences."""
        return batch * (self.token_elements * self.positions(kv_len, seq_len) + self.state_elements)

    # Former names (before docs/glossary.md's vocabulary), kept for scripts written against them.

    @property
    def kind(self) -> str:
        """Former name of :attr:`layer_type`."""
        return self.layer_type


@dataclass(frozen=True)
class CacheSpecs:
    """Every layer's cache, in layer order, with the state tensors' shapes per sequence."""

    layers: tuple[LayerCache, ...]
    state_shapes: tuple[StateShapes, ...] = ()  # per layer
    # per layer: the keys' and values' heads and widths of a layer holding them (else None)
    kv_shapes: tuple[KVShape | None, ...] = ()
    # per layer: which of its recurrent states the model keeps in float32 (by their index)
    float32: tuple[frozenset[int], ...] = ()
    state_dtype: str | None = None  # the recurrent states' dtype the config sets (.state_dtypes.configured)

    def by_type(self, kv_len: int, seq_len: int, batch: int) -> dict[str, int]:
        """Elements held per layer type, types in the order they first appear (a layer running
        attention and a state-space mixer side by side counts in both)."""
        out: dict[str, int] = {}
        for layer in self.layers:
            if layer.token_elements:
                tokens = batch * layer.token_elements * layer.positions(kv_len, seq_len)
                out[layer.layer_type] = out.get(layer.layer_type, 0) + tokens
            if layer.state_elements:
                out[STATE] = out.get(STATE, 0) + batch * layer.state_elements
        return out

    def elements(self, kv_len: int, seq_len: int, batch: int) -> int:
        return sum(self.by_type(kv_len, seq_len, batch).values())

    def bytes_by_type(
        self, kv_len: int, seq_len: int, batch: int, itemsize: float, *, conv: float, state: float
    ) -> dict[str, int]:
        """Bytes held per layer type: ``itemsize`` bytes per element of the KV dtype, a state's conv
        parts ``conv`` bytes and its recurrent parts ``state`` bytes (4 for a part the model keeps in
        float32); DSA's indexer keys in their own format (:mod:`.indexed`)."""
        counts = self.by_type(kv_len, seq_len, batch)
        out = {k: n * itemsize for k, n in counts.items()}
        if STATE in counts:
            convs = batch * sum(x.conv_elements for x in self.layers)
            wide = batch * sum(x.float32_elements for x in self.layers)
            out[STATE] = convs * conv + (counts[STATE] - convs - wide) * state + wide * 4
        keys = sum(index_key_bytes(x.index_elements) * x.positions(kv_len, seq_len) for x in self.layers)
        if keys:
            out[INDEXER_KEYS] = batch * keys
        return {k: math.ceil(n) for k, n in out.items()}

    def affine_steps(self, prompt_len: int, gen_len: int) -> list[tuple[int, int]]:
        """The decode steps ``0 .. gen_len - 1`` (step ``j`` after ``prompt_len + j`` cached tokens)
        cut into runs over which every layer's positions are affine in the step: a sliding layer
        grows until its window is full, then stays; a chunked layer grows within a chunk and
        starts again at the next. Each run is ``(first, last)``, inclusive."""
        starts = {0}
        for layer in self.layers:
            if layer.layer_type == SLIDING:  # the window is full from the step whose cache holds W tokens
                starts.add(layer.window - prompt_len)
            elif layer.layer_type == CHUNKED:  # a new chunk at every multiple of C cached tokens
                first = -(-prompt_len // layer.window) * layer.window
                starts.update(range(first - prompt_len, gen_len, layer.window))
            if layer.topk:  # DSA: the attention stops growing from the step whose cache holds topk tokens
                starts.add(layer.topk - prompt_len)
        ordered = sorted(j for j in starts if 0 <= j < gen_len)
        return [(a, b - 1) for a, b in zip(ordered, [*ordered[1:], gen_len], strict=True)]

    def windows(self) -> dict[int, tuple[str, int]]:
        """The sliding and chunked layers: layer index -> (layer type, window or chunk)."""
        return {
            i: (layer.layer_type, layer.window)
            for i, layer in enumerate(self.layers)
            if layer.layer_type in (SLIDING, CHUNKED)
        }

    def largest(self, kv_len: int, seq_len: int, batch: int) -> int:
        """The elements of the largest single cache tensor (for the size limits)."""
        return max((layer.elements(kv_len, seq_len, batch) for layer in self.layers), default=0)


def is_latent(c: Any) -> bool:
    """Multi-head latent attention: the (decoder's or a layer's) config gives a KV latent rank and a
    rope key width."""
    return all(isinstance(getattr(c, a, None), int) for a in ("kv_lora_rank", "qk_rope_head_dim"))


def layer_types(c: Any) -> list[tuple[str, dict[str, Any]]]:
    """transformers' cache layer type of each layer of the decoder's config ``c``, with its arguments
    (window)."""
    from ...transformers_internals import cache_layer_types

    try:
        types = cache_layer_types(c)
    except Exception as e:  # the helper reads config fields by name, whatever the config's class
        raise OpcountError(f"{type(c).__name__}: cannot read its layer types: {first_line(e, type(e).__name__)}") from e
    layers = getattr(c, "num_hidden_layers", None)
    if isinstance(layers, int) and len(types) != layers:
        raise OpcountError(f"{type(c).__name__}: {len(types)} layer types for {layers} layers")
    return types


def cache_specs(model: nn.Module, c: Any, routing: Routing = contextlib.nullcontext) -> CacheSpecs:
    """Every layer's cache for the decoder's config ``c`` (:func:`.composite.text_config`); the KV and
    state shapes are read from a one-token forward on meta (:mod:`.probe`), with ``routing(model)``
    around it (the expected routing of mixture-of-experts blocks, which meta tensors cannot route by
    their values)."""
    name = type(c).__name__
    recurrent = _recurrent_specs(model, c)
    if recurrent is not None:
        return recurrent
    types = layer_types(c)
    indexed = indexed_layers(model, c) if any(t == INDEXED for t, _ in types) else {}
    for index, (layer_type, _) in enumerate(types):  # before the forward on meta, which such a layer may not run
        if layer_type == INDEXED and (index not in indexed or not is_latent(layer_config(c, index))):
            raise OpcountError(
                f"{name}: layer {index} is {INDEXED} but {unrecognised(model, index)} is not DeepSeek sparse "
                "attention's (latent attention and an indexer with wq_b, wk and weights_proj): not modelled"
            )
    probed = _probed(model, c, routing, needed=any(t in _STATE_TYPES for t, _ in types))
    states = probed.states
    wide = GRIFFIN_FLOAT32 if griffin_states(model) else kept_float32(c)
    layers: list[LayerCache] = []
    shapes: list[KVShape | None] = []
    for index, (layer_type, kwargs) in enumerate(types):
        state = 0
        shapes.append(None)
        if layer_type in _STATE_TYPES:
            found = states.get(index)
            if found is None or not (found.conv or found.recurrent):
                raise OpcountError(f"{name}: layer {index} ({layer_type}) stored no state in a forward on meta")
            state = _size(found)
        lc = layer_config(c, index)  # Dots 3's sliding layers have other latent sizes than its DSA layers
        if layer_type in _ATTENTION:
            if is_latent(lc):
                layers.append(_latent(name, index, layer_type, kwargs, lc, state))
                continue
            shape = probed.kv.get(index) or _config_shape(c)
            shapes[-1] = shape
            window = int(kwargs.get("sliding_window") or 0)
            parts = _parts(states[index], wide) if state else {}
            layers.append(
                LayerCache(_ATTENTION[layer_type], shape.elements, state_elements=state, window=window, **parts)
            )
        elif layer_type in _STATE_TYPES:
            layers.append(LayerCache(STATE, state_elements=state, **_parts(states[index], wide)))
        elif layer_type == INDEXED:
            layers.append(_indexed(lc, indexed[index]))
        elif layer_type == "dummy":
            layers.append(LayerCache(NONE))
        else:
            raise OpcountError(
                f"{name}: layer {index} has a cache of type {layer_type!r}, which opcount does not model"
            )
    ordered = tuple(states.get(i, StateShapes((), ())) for i in range(len(layers)))
    float32 = tuple(wide if i in states else frozenset() for i in range(len(layers)))
    return CacheSpecs(tuple(layers), ordered, tuple(shapes), float32, configured(c))


def _recurrent_specs(model: nn.Module, c: Any) -> CacheSpecs | None:
    """The cache specs of a recurrent model whose config gives no layer types (xLSTM, RWKV-4), read from
    its modules; None for another model."""
    recurrent, float32 = xlstm_states(model, c), frozenset[int]()
    if not recurrent:
        recurrent, float32 = rwkv_states(model), RWKV_FLOAT32
    if not recurrent:
        return None
    layers = tuple(LayerCache(STATE, state_elements=_size(s), **_parts(s, float32)) for s in recurrent.values())
    return CacheSpecs(layers, tuple(recurrent.values()), float32=tuple(float32 for _ in recurrent))


def _size(shapes: StateShapes) -> int:
    """Elements per sequence of a layer's conv and recurrent states."""
    return sum(math.prod(s) for s in (*shapes.conv, *shapes.recurrent))


def _parts(shapes: StateShapes, float32: frozenset[int]) -> dict[str, int]:
    """A state layer's elements per sequence held apart: its conv states, and its recurrent states of
    the indices ``float32`` (kept in float32)."""
    wide = sum(math.prod(s) for i, s in enumerate(shapes.recurrent) if i in float32)
    return {"conv_elements": sum(math.prod(s) for s in shapes.conv), "float32_elements": wide}


def _latent(name: str, index: int, layer_type: str, kwargs: dict[str, Any], c: Any, state: int) -> LayerCache:
    """A latent-attention layer: every position (full) or the window's (sliding, Dots 3)."""
    rank = int(c.kv_lora_rank)
    elements = rank + int(c.qk_rope_head_dim)
    if _ATTENTION[layer_type] == FULL and not state:
        return LayerCache(LATENT, elements, rank=rank)
    if _ATTENTION[layer_type] == SLIDING and not state:
        return LayerCache(SLIDING, elements, window=int(kwargs.get("sliding_window") or 0), rank=rank)
    raise OpcountError(f"{name}: layer {index} is {layer_type} with latent attention: not modelled")


def _indexed(c: Any, found: tuple[int, int]) -> LayerCache:
    """A DSA layer: the latent as a latent layer holds it, the indexer keys, the top-k."""
    topk, width = found
    rank = int(c.kv_lora_rank)
    return LayerCache(LATENT, rank + int(c.qk_rope_head_dim), index_elements=width, topk=topk, rank=rank)


def _config_shape(c: Any) -> KVShape:
    g = kv_geometry(c)
    return KVShape(g.kv_heads, g.head_dim, g.head_dim)


def _probed(model: nn.Module, c: Any, routing: Routing, needed: bool) -> ProbedCache:
    """What the layers store in a forward on meta. Needed for state layers; for attention alone
    the config's geometry stands in when the forward cannot run (the traced cache still checks
    that the model writes that shape)."""
    found = lightning_states(model)
    if found:  # MiniMax keeps its state outside the cache's layers
        return ProbedCache({}, found)
    found = griffin_states(model)
    if found:  # RecurrentGemma keeps its state in its modules, its local attention's KV in the cache
        with restored(model):
            return ProbedCache(probe_cache(model, c, routing, prepare=lambda cache: _known_length(cache, 0)).kv, found)
    try:
        return probe_cache(model, c, routing, prepare=lambda cache: _known_length(cache, 0))
    except OpcountError:
        if needed:
            raise
        return ProbedCache({}, {})


def _known_length(cache: Any, kv_len: int) -> None:
    """A cache of state layers only (a Bamba or Granite-4 whose layers are all Mamba) answers
    ``kv_len`` positions seen and no mask to build: transformers reads both from an attention layer
    and raises when there is none, though the positions are known here."""
    from ...transformers_internals import CacheLayerMixin

    if any(isinstance(layer, CacheLayerMixin) for layer in cache.layers):
        return
    cache.get_seq_length = lambda layer_idx=0: kv_len
    cache.get_mask_sizes = lambda query_length, layer_idx=0: (kv_len + query_length, 0)


# ------------------------------------------------------------------------------------------------
# The cache a phase is traced with
# ------------------------------------------------------------------------------------------------
def _hold_tokens(
    held: Any,
    layer: LayerCache,
    shape: KVShape | None,
    c: Any,
    batch: int,
    kv_len: int,
    seq_len: int,
    dtype: torch.dtype,
) -> dict[str, torch.Tensor]:
    """Make the transformers cache layer ``held`` keep the tokens the layer keeps: a prefill writes
    its last ``positions`` prompt tokens and attends over the prompt; a decode step writes its
    tokens and attends over all held. Returns the tensors to name."""
    positions = layer.positions(kv_len, seq_len)
    latent: torch.Tensor | None = None
    if layer.rank:
        rank = layer.rank
        latent = torch.empty((batch, 1, positions, layer.token_elements), dtype=dtype, device="meta")
        keys, values = latent[..., :rank], latent[..., rank:]
    else:
        kv = shape or _config_shape(c)
        keys, values = (
            torch.empty((batch, kv.kv_heads, positions, width), dtype=dtype, device="meta")
            for width in (kv.key_dim, kv.value_dim)
        )

    def update(key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        n = positions if kv_len == 0 else seq_len
        index = torch.arange(n, device=key_states.device)  # the device the traced tensors claim
        k, v = key_states[:, :, key_states.shape[2] - n :], value_states[:, :, value_states.shape[2] - n :]
        for new, held_tensor in ((k, keys), (v, values)):
            if new.shape[:2] != held_tensor.shape[:2] or new.shape[-1] != held_tensor.shape[-1]:
                raise OpcountError(
                    f"{type(c).__name__}: the model caches {tuple(new.shape)} per step where its config gives "
                    f"{tuple(held_tensor.shape)} (batch, heads, tokens, width): opcount does not know this shape"
                )
        if latent is not None:  # the latent and the rope key side by side, written at once
            latent.index_copy_(2, index, torch.cat([k, v], dim=-1))
        else:
            keys.index_copy_(2, index, k)
            values.index_copy_(2, index, v)
        return (key_states, value_states) if kv_len == 0 else (keys, values)

    held.update = update
    held.get_seq_length = lambda: kv_len
    held.is_sliding = layer.layer_type != FULL
    held.max_cache_len = positions
    held.latent = latent
    # what the layer holds, the latent once (its halves are views no record names: a sweep rebuilds
    # the model's outputs, this cache among them, from the records)
    held.keys, held.values = (latent, latent) if latent is not None else (keys, values)
    held.max_batch_size, held.dtype, held.device = batch, dtype, keys.device
    held.is_initialized = True
    return {LATENT_KV: latent} if latent is not None else {KEYS: keys, VALUES: values}


def _hold_state(
    layer: Any, shapes: StateShapes, batch: int, step: bool, dtype: torch.dtype, float32: frozenset[int]
) -> dict[str, torch.Tensor]:
    """Give the transformers linear-attention cache layer ``layer`` its conv and recurrent states
    (a previous state in a decode step), those of ``float32``'s indices in float32 and named so
    (:data:`.model.FLOAT32_STATE`). Returns the tensors to name."""
    conv, recurrent = shapes
    named: dict[str, torch.Tensor] = {}
    for i, shape in enumerate(conv):
        named[f"{CONV_STATE}{i}"] = layer.conv_states[i] = torch.empty((batch, *shape), dtype=dtype, device="meta")
        layer.conv_kernel_size[i] = shape[-1]
        layer.is_conv_states_initialized[i] = True
    for i, shape in enumerate(recurrent):
        wide = i in float32
        name = f"{RECURRENT_STATE}{i}{FLOAT32_STATE if wide else ''}"
        held = torch.empty((batch, *shape), dtype=torch.float32 if wide else dtype, device="meta")
        named[name] = layer.recurrent_states[i] = held
        layer.is_recurrent_states_initialized[i] = True
    for i in range(layer.number_of_states):
        layer.has_previous_state[i] = step
    layer.dtype, layer.device = dtype, torch.device("meta")
    return named


@contextlib.contextmanager
def phase_cache(
    model: nn.Module, c: Any, specs: CacheSpecs, batch: int, kv_len: int, seq_len: int, dtype: torch.dtype, step: bool
) -> Iterator[Any]:
    """A transformers ``Cache`` holding, per layer, what engines hold for this phase (``c``: the
    decoder's config), its tensors registered as the model's buffers ``kv_cache.L.*`` for the block
    (removed afterwards). With ``step`` each recurrent layer reads the state held: a decode token's one-token
    update (vLLM's ``selective_state_update``; a zero state in an empty cache), a prompt's chunk after a prefix."""
    from ... import transformers_internals

    cache_utils: Any = transformers_internals  # transformers leaves these classes' constructors unannotated
    holder = nn.Module()
    layers: list[Any] = []
    for index, layer in enumerate(specs.layers):
        slot = nn.Module()
        tensors: dict[str, torch.Tensor] = {}
        shapes = specs.state_shapes[index]
        states = max(len(shapes.conv), len(shapes.recurrent))
        made: Any
        if layer.token_elements and layer.state_elements:  # attention beside a state-space mixer (Falcon-H1)
            made = cache_utils.LinearAttentionAndStaticFullAttentionLayer(max_cache_len=1, number_of_states=states)
        elif layer.state_elements:
            made = cache_utils.LinearAttentionLayer(number_of_states=states)
        elif layer.token_elements:
            made = cache_utils.StaticLayer(max_cache_len=1)
        else:
            made = cache_utils.DummyLayer()
        if layer.token_elements:
            kv_shape = specs.kv_shapes[index] if specs.kv_shapes else None
            tensors |= _hold_tokens(made, layer, kv_shape, c, batch, kv_len, seq_len, dtype)
        if layer.topk:
            tensors |= hold_sparse_reads(made, tensors[LATENT_KV], layer.topk, kv_len, seq_len)
        if layer.index_elements:
            tensors[INDEX_BUFFER] = hold_index_keys(made, batch, kv_len, seq_len, layer.index_elements, dtype)
        if layer.state_elements:
            tensors |= _hold_state(
                made, shapes, batch, step, dtype, specs.float32[index] if specs.float32 else frozenset()
            )
        for name, t in tensors.items():
            slot.register_buffer(name, t, persistent=False)
        holder.add_module(str(index), slot)
        layers.append(made)
    if KV_PREFIX in model._modules:
        raise OpcountError(f"the model already has a submodule named {KV_PREFIX!r}")
    with rwkv_phase(model, layers, seq_len) as rwkv, griffin_phase(model, layers, step):
        cache = (
            rwkv
            or lightning_cache(model, layers, step)
            or xlstm_cache(model, c, layers, kv_len, step)
            or cache_utils.Cache(layers=layers)
        )
        _known_length(cache, kv_len)
        model._modules[KV_PREFIX] = holder  # named buffers, not a module the forward calls
        try:
            yield cache
        finally:
            del model._modules[KV_PREFIX]
