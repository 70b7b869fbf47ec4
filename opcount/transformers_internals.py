"""The transformers names opcount relies on beyond building a model from its config, reached
through this module alone.

Checked on transformers 4.57 and 5.24. The cache classes and their layers' attributes, the
attention and mask registries, the config's attention-implementation slot and the keyword a
forward takes its cache by changed between these releases; each difference is settled here, once,
so the rest of opcount reads one spelling. transformers is imported when a function is called,
never at ``import opcount``.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn


def cache_keyword(model: nn.Module) -> str:
    """The keyword the model's forward takes its KV cache by: ``cache`` from transformers 5.2x
    (which warns at the old name), ``past_key_values`` before."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def takes_cache_position(model: nn.Module) -> bool:
    """Whether the forward names ``cache_position`` (transformers 4.x; 5.x's static cache layers
    count their own positions)."""
    return "cache_position" in inspect.signature(model.forward).parameters


def set_cached_length(layer: Any, tokens: int) -> None:
    """Tell a static cache layer that ``tokens`` positions are already written, in the type its
    transformers keeps the count: a tensor on 5.x's ``StaticLayer`` (CPU, a value read as an
    offset, never one of the traced tensors), a Python int beside it on its sliding layer and on
    4.x's."""
    count = getattr(layer, "cumulative_length", None)
    if isinstance(count, torch.Tensor):
        layer.cumulative_length = torch.tensor(tokens, dtype=count.dtype)
    elif count is not None:
        layer.cumulative_length = tokens
    if hasattr(layer, "cumulative_length_int"):
        layer.cumulative_length_int = tokens
