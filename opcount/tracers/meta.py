"""Inputs given by shape, and analysis without weights or arithmetic ("meta" analysis).

The dispatch tracer analyzes a model on storage-less tensors when the model lives on the meta
device (built under ``with torch.device("meta")``) or when asked to with ``device="meta"``. A
forward pass runs on shape-only tensors (:mod:`.shapes`); a training step, and what those cannot
follow, on torch's fake tensors, made here: meta tensors underneath (a shape and a dtype, no storage; operators
only compute their outputs' shapes) that report a real device. Plain meta tensors would do but
for one thing: code that asks a tensor for its device (``torch.autocast(x.device.type)`` in
transformers' rotary embeddings, attention backends chosen by device) fails or takes another
path on ``meta``. Fake tensors claim the model's device (CPU for a model built on meta).

The model's parameters and buffers are swapped for fake stand-ins for the duration of the call
(``torch.func.functional_call``): no weight is copied or allocated, the model is not modified.
A buffer the forward also reaches through another object (a KV cache holding the model's
buffers) is the same stand-in there: otherwise it would become a fake on ``meta`` beside the
others on the claimed device, and the first operator mixing them fails on the devices.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import OpcountTypeError
from ..torch_internals import FakeTensorMode, alias_fake, pytree

META = torch.device("meta")
CPU = torch.device("cpu")
CLAIMED_ON_META = CPU  # the device a model built on meta runs on in a trace (see the module docstring)


@dataclass(frozen=True)
class TensorShape:
    """An input known by its shape and dtype only, e.g. ``TensorShape((1, 3, 224, 224))``.

    Use it wherever a tensor input goes (alone, in the inputs tuple, in kwargs, nested). In a
    meta analysis it becomes a storage-less tensor; otherwise a tensor of zeros (valid token ids
    too) on the model's device. ``requires_grad`` matters for ``mode="train"`` only: the input's
    gradient is then computed and counted, as a hidden layer's is.
    """

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    requires_grad: bool = False

    def __post_init__(self) -> None:
        shape = tuple(self.shape) if isinstance(self.shape, Sequence) else None
        if shape is None or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
            raise OpcountTypeError(
                f"TensorShape takes a sequence of sizes, e.g. TensorShape((1, 3, 224, 224)), got {self.shape!r}"
            )
        if not isinstance(self.dtype, torch.dtype):
            raise OpcountTypeError(f"TensorShape dtype must be a torch.dtype, got {self.dtype!r}")
        object.__setattr__(self, "shape", shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def has_shapes(tree: Any) -> bool:
    """Whether ``tree`` (inputs, kwargs) holds a :class:`TensorShape` anywhere."""
    return any(isinstance(leaf, TensorShape) for leaf in pytree.tree_leaves(tree))


def materialize(tree: Any, device: torch.device, fake: FakeTensorMode | None = None) -> Any:
    """``tree`` with every :class:`TensorShape` made a tensor: zeros on ``device``, or with
    ``fake`` a fake tensor claiming ``device``, as every tensor of ``tree`` then becomes.

    Tensors are detached from any graph of the caller's (``requires_grad`` kept), so that a
    training analysis differentiates the model only.
    """

    def leaf(x: Any) -> Any:
        if isinstance(x, TensorShape):
            t = (
                _empty(x.shape, None, x.dtype, device, fake)
                if fake
                else torch.zeros(x.shape, dtype=x.dtype, device=device)
            )
            return _keep_grad(t, x.requires_grad)
        if isinstance(x, torch.Tensor):
            t = _fake_like(x, device, fake) if fake else x.detach()
            return _keep_grad(t, x.requires_grad)
        return x

    return pytree.tree_map(leaf, tree)


def device_of(model: nn.Module) -> torch.device:
    """Where the model's first parameter or buffer lives (CPU for a model without state)."""
    for t in _state(model):
        return t.device
    return CPU


def fake_state(model: nn.Module, device: torch.device, fake: FakeTensorMode) -> dict[str, torch.Tensor]:
    """Fake stand-ins claiming ``device`` for every parameter and buffer of ``model``, by
    qualified name (shared tensors once, under their first name; ``functional_call``'s
    ``tie_weights`` substitutes the other names). A meta tensor reaching ``fake`` by another way
    than its name becomes its stand-in too."""
    state = {}
    for name, t in (*model.named_parameters(), *model.named_buffers()):
        state[name] = stand_in = _keep_grad(_fake_like(t, device, fake), t.requires_grad)
        if t.is_meta:
            alias_fake(fake, t, stand_in)
    return state


def _fake_like(t: torch.Tensor, device: torch.device, fake: FakeTensorMode) -> torch.Tensor:
    return _empty(tuple(t.shape), tuple(t.stride()), t.dtype, device, fake)


def _empty(
    shape: tuple[int, ...],
    stride: tuple[int, ...] | None,
    dtype: torch.dtype,
    device: torch.device,
    fake: FakeTensorMode,
) -> torch.Tensor:
    with fake:  # a fake tensor: meta storage-less data, ``device`` reported
        if stride is None:
            return torch.empty(shape, dtype=dtype, device=device)
        return torch.empty_strided(shape, stride, dtype=dtype, device=device)


def _keep_grad(t: torch.Tensor, requires_grad: bool) -> torch.Tensor:
    return t.requires_grad_(True) if requires_grad and (t.is_floating_point() or t.is_complex()) else t


def _state(model: nn.Module) -> Iterator[torch.Tensor]:
    yield from model.parameters()
    yield from model.buffers()
