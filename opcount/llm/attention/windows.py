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
    q0, k0, v0 = (t[:, :, :size] for t in (query, key, value))
    outs = [F.scaled_dot_product_attention(q0, k0, v0, scale=scaling, is_causal=True, enable_gqa=gqa)]
    whole = length // size
    if whole > 1:  # the full blocks after the first, batched: [b, h, blocks, size, e]
        q = _blocks(query[:, :, size : whole * size], size)
        if previous:  # keys of the block before and of the block: 2 * size each
            k = _pairs(key[:, :, : whole * size], size)
            v = _pairs(value[:, :, : whole * size], size)
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
        first_key = start - size if previous else start
        q = query[:, :, start:]
        k, v = key[:, :, first_key:], value[:, :, first_key:]
        if previous:  # its queries see the block before and themselves: the band again
            band = _band(length - start, k.shape[2], query.device)
            outs.append(F.scaled_dot_product_attention(q, k, v, band, scale=scaling, enable_gqa=gqa))
        else:
            outs.append(F.scaled_dot_product_attention(q, k, v, scale=scaling, is_causal=True, enable_gqa=gqa))
    return torch.cat(outs, dim=2) if len(outs) > 1 else outs[0]


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


@contextlib.contextmanager
def windowed_prefill(model: nn.Module, windows: dict[int, tuple[str, int]], prompt: int) -> Iterator[None]:
    """For the block, the attention modules of the layers in ``windows`` (layer index: layer type, size)
    attend by blocks when the prompt is longer than their window or chunk."""
    changes: list[tuple[object, str, Any]] = []
    for m in model.modules():
        idx = getattr(m, "layer_idx", None)
        if not isinstance(idx, int) or idx not in windows or not hasattr(m, "config"):
            continue
        layer_type, size = windows[idx]
        if prompt <= size or HOOK in m.__dict__:
            continue
        run = chunked_attention if layer_type == "chunked_attention" else sliding_attention
        changes.append((m, HOOK, functools.partial(_hooked, run, size)))
    with patched(changes):
        yield


def _hooked(run: Any, size: int, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: Any) -> Any:
    out = run(size, query, key, value, scaling)
    return out.transpose(1, 2).contiguous(), None
