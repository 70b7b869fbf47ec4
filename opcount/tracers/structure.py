"""Flattening model inputs and outputs of any structure into tensors and back."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from ..errors import OpcountTypeError
from ..torch_internals import pytree


def normalize_inputs(inputs: Any, kwargs: Mapping[str, Any] | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """fvcore's convention: a tuple is the positional arguments, anything else is the one argument."""
    args = inputs if isinstance(inputs, tuple) else (inputs,)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise OpcountTypeError(f"kwargs must be a mapping of argument names to values, got {type(kwargs).__name__}")
    kw = dict(kwargs or {})
    for path, leaf in _leaves_with_path((args, kw)):
        _check_leaf(path, leaf)
    return args, kw


_SCALARS = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.device, torch.Size, slice)


def _check_leaf(path: str, leaf: Any) -> None:
    if isinstance(leaf, (torch.Tensor, *_SCALARS)) or leaf is Ellipsis:
        return
    kind = type(leaf)
    if kind.__module__ == "numpy":
        raise OpcountTypeError(f"input {path} is a numpy {kind.__name__}; convert it with torch.from_numpy()")
    if isinstance(leaf, torch.nn.Module):
        raise OpcountTypeError(f"input {path} is a module ({kind.__name__}); pass tensors as inputs")
    # Other objects (user configs, enums) are passed through as constants.


def _leaves_with_path(tree: Any) -> Iterator[tuple[str, Any]]:
    leaves, _ = pytree.tree_flatten_with_path(tree)
    for path, leaf in leaves:
        yield _format_path(path), leaf


def _format_path(path: tuple[Any, ...]) -> str:
    # path[0] picks args (0) or kwargs (1); show it as inputs[i] / kwargs['k'].
    if not path:
        return "inputs"
    head, *rest = path
    root = "inputs" if getattr(head, "idx", None) == 0 else "kwargs"
    return root + "".join(str(p) for p in rest)


class FlatCall:
    """Calls ``fn(*args, **kwargs)`` with the tensor leaves replaced by positional tensors.

    The tracer only sees a flat tuple of tensors in and out; non-tensor leaves stay constants.
    """

    def __init__(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        leaves, self._spec = pytree.tree_flatten((args, kwargs))
        self._leaves = leaves
        self._slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        self.tensors: tuple[torch.Tensor, ...] = tuple(leaves[i] for i in self._slots)

    def rebuild(self, tensors: tuple[torch.Tensor, ...]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        leaves = list(self._leaves)
        for slot, t in zip(self._slots, tensors, strict=True):
            leaves[slot] = t
        args, kwargs = pytree.tree_unflatten(leaves, self._spec)
        return args, kwargs


def output_tensors(out: Any) -> tuple[torch.Tensor, ...]:
    """Every tensor reachable in ``out``: tuples, lists, dicts, namedtuples, dataclasses,
    transformers ModelOutput and cache objects (through their attributes). Other leaves are dropped."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()
    _collect(out, found, seen, depth=0)
    return tuple(found)


def _collect(obj: Any, found: list[torch.Tensor], seen: set[int], depth: int) -> None:
    if isinstance(obj, torch.Tensor):
        found.append(obj)
        return
    if depth > 32 or isinstance(obj, _SCALARS) or id(obj) in seen:
        return
    seen.add(id(obj))
    children: Callable[[], Any]
    if isinstance(obj, Mapping):
        children = obj.values
    elif isinstance(obj, (list, tuple, set, frozenset)):
        children = lambda: obj
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        children = lambda: (getattr(obj, f.name) for f in dataclasses.fields(obj))
    elif hasattr(obj, "__dict__") and not isinstance(obj, (type, torch.nn.Module)):
        children = lambda: vars(obj).values()
    else:
        return
    for child in list(children()):
        _collect(child, found, seen, depth + 1)
