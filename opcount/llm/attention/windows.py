"""A prompt's attention in sliding-window and chunked layers, as the kernels compute it: by blocks
of the window (or chunk), never the whole prompt's square.

- **chunked** (Llama-4): a query attends to the tokens of its own chunk up to itself, so the
  prompt is cut into chunks of ``C`` and each runs causal attention on its own (``C x C`` pairs a
  chunk, a shorter last one);
- **sliding** (window ``W``: a query sees itself and the ``W - 1`` tokens before it): the prompt
  is cut into blocks of ``W`` queries; block ``j`` attends to blocks ``j - 1`` and ``j`` (the
  ``2W`` keys its band spans, the band being the mask inside them), the first block causally to
  itself. As for causal attention, opcount counts every (query, key) pair of a block whatever
  the mask (docs/operators.md), so a block costs twice its band, as a full prompt's causal
  attention costs twice its triangle.

A prompt's chunk after a cached prefix (chunked prefill, prefix caching) attends to the held
positions before it too: its cache holds ``c`` of them (:meth:`.cache.specs.LayerCache.positions`:
a sliding layer the ``W - 1`` its first query sees, a chunked layer those of the chunk it starts
in). Its first block then runs over them: a sliding layer's first ``W`` queries over the ``c``
held and themselves, each query its window (a mask); a chunked layer's queries left in that chunk
causally over the ``c`` held and themselves. The blocks after it run as a prompt's, their keys
``c`` positions on. A chunk whose every query sees all the positions held needs no blocks.

A decode step needs none of this: its cache holds exactly the window or the chunk (:mod:`.cache`).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..patching import patched

HOOK = "opcount_attention"  # an attention module's own attention, called by model._serving_attention


def chunked_attention(
    chunk: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None
) -> torch.Tensor:
    """Causal attention within each chunk of ``chunk`` positions: ``query [b, h, L, e]`` over ``key``
    and ``value [b, g, L, e]``; returns ``[b, h, L, e_v]``."""
    return _by_blocks(chunk, query, key, value, scaling, previous=False)


def sliding_attention(
    window: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None
) -> torch.Tensor:
    """Each block of ``window`` queries over its own block and the one before (the first causally)."""
    return _by_blocks(window, query, key, value, scaling, previous=True)


def _by_blocks(
    size: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None, previous: bool
) -> torch.Tensor:
    gqa = key.shape[1] != query.shape[1]
    length = query.shape[2]
    held = key.shape[2] - length  # positions held before the first query (a cached prefix), 0 in a prompt
    if held and not previous:  # chunked: the queries left in the chunk the held positions start, then by chunks
        rows = min(size - held, length)
        first = _after_held(size, rows, query, key, value, scaling)
        if rows == length:
            return first
        q, k, v = (t[:, :, -(length - rows) :] for t in (query, key, value))  # from the next chunk's start
        return torch.cat([first, _by_blocks(size, q, k, v, scaling, previous=False)], dim=2)
    if held:  # sliding: the first block over the held positions and itself; the others as a prompt's
        outs = [_after_held(size, min(size, length), query, key, value, scaling)]
    else:
        q0, k0, v0 = (t[:, :, :size] for t in (query, key, value))
        outs = [F.scaled_dot_product_attention(q0, k0, v0, scale=scaling, is_causal=True, enable_gqa=gqa)]
    whole = length // size
    if whole > 1:  # the full blocks after the first, batched: [b, h, blocks, size, e]
        q = _blocks(query[:, :, size : whole * size], size)
        if previous:  # keys of the block before and of the block: 2 * size each
            k = _pairs(key[:, :, held : held + whole * size], size)
            v = _pairs(value[:, :, held : held + whole * size], size)
            band = _band(size, 2 * size, query.device)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), band, scale=scaling, enable_gqa=gqa
            ).transpose(1, 2)
        else:
            k, v = _blocks(key[:, :, size : whole * size], size), _blocks(value[:, :, size : whole * size], size)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale=scaling, is_causal=True, enable_gqa=gqa
            ).transpose(1, 2)
        outs.append(out.flatten(2, 3))
    start = max(whole, 1) * size
    if start < length:  # a last, shorter block
        first_key = held + start - size if previous else start
        q = query[:, :, start:]
        k, v = key[:, :, first_key:], value[:, :, first_key:]
        if previous:  # its queries see the block before and themselves: the band again
            band = _band(length - start, k.shape[2], query.device)
            outs.append(F.scaled_dot_product_attention(q, k, v, band, scale=scaling, enable_gqa=gqa))
        else:
            outs.append(F.scaled_dot_product_attention(q, k, v, scale=scaling, is_causal=True, enable_gqa=gqa))
    return torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]


def _after_held(
    size: int, rows: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float | None
) -> torch.Tensor:
    """The first ``rows`` queries over the positions held before them and themselves, each over the
    ``size`` keys up to itself at most (:func:`_window`: a chunk's held positions are fewer than it)."""
    keys = key.shape[2] - query.shape[2] + rows
    mask = _window(rows, keys, size, query.device)
    k, v = key[:, :, :keys], value[:, :, :keys]
    return F.scaled_dot_product_attention(
        query[:, :, :rows], k, v, mask, scale=scaling, enable_gqa=key.shape[1] != query.shape[1]
    )


def _window(rows: int, keys: int, window: int, device: torch.device) -> torch.Tensor:
    """The sliding mask of the last ``rows`` of ``keys`` positions as queries: query ``r``, at key
    ``keys - rows + r``, sees the ``window`` keys up to itself (fewer near the start)."""
    r = torch.arange(rows, device=device)[:, None] + (keys - rows)
    k = torch.arange(keys, device=device)[None, :]
    return (k <= r) & (k > r - window)


def _band(rows: int, keys: int, device: torch.device) -> torch.Tensor:
    """The sliding mask of ``rows`` queries over keys starting one window (``keys - rows``) before
    the first of them: query ``r`` sees the window up to itself, keys ``r + 1 .. r + window``. A
    small constant tensor, as the kernel's loop bounds are."""
    window = keys - rows
    r = torch.arange(rows, device=device)[:, None]
    k = torch.arange(keys, device=device)[None, :]
    return (k > r) & (k <= r + window)


def _blocks(t: torch.Tensor, size: int) -> torch.Tensor:
    """``[b, h, n * size, e]`` as ``[b, h, n, size, e]`` (a view)."""
    b, h, length, e = t.shape
    return t.view(b, h, length // size, size, e)


def _pairs(t: torch.Tensor, size: int) -> torch.Tensor:
    """Blocks ``j - 1`` and ``j`` side by side for ``j >= 1``: ``[b, h, n - 1, 2 * size, e]`` (a view:
    a window of ``2 * size`` rows stepping by ``size``)."""
    return t.unfold(2, 2 * size, size).transpose(-1, -2)


def held_before(layer_type: str, size: int, cached: int) -> int:
    """The positions a sliding (window ``size``) or chunked (chunk ``size``) layer holds before a
    prompt's chunk after ``cached`` tokens, as its cache holds them: the ``size - 1`` before the
    first query at most, or those of the chunk the first query is in."""
    return cached % size if layer_type == "chunked_attention" else min(cached, size - 1)


@contextlib.contextmanager
def windowed_prefill(
    model: nn.Module, windows: dict[int, tuple[str, int]], prompt: int, cached: int = 0
) -> Iterator[None]:
    """For the block, the attention modules of the layers in ``windows`` (layer index: layer type, size)
    attend by blocks when a prompt of ``prompt`` tokens after ``cached`` ones spans more than their
    window or chunk."""
    changes: list[tuple[object, str, Any]] = []
    for m in model.modules():
        idx = getattr(m, "layer_idx", None)
        if not isinstance(idx, int) or idx not in windows or not hasattr(m, "config"):
            continue
        layer_type, size = windows[idx]
        if held_before(layer_type, size, cached) + prompt <= size or HOOK in m.__dict__:
            continue
        run = chunked_attention if layer_type == "chunked_attention" else sliding_attention
        changes.append((m, HOOK, functools.partial(_hooked, run, size)))
    with patched(changes):
        yield


def _hooked(run: Any, size: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: Any) -> Any:
    out = run(size, query, key, value, scaling)
    return out.transpose(1, 2).contiguous(), None
