"""Flattening model inputs and outputs of any structure into tensors and back."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ..errors import OpcountTypeError, OpcountValueError, TraceError
from ..ir import OpCall, TensorSpec
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


class SparseTensorError(OpcountValueError):
    """A sparse (non-strided) tensor where opcount prices dense ones; the message names it."""


def check_dense_inputs(model: torch.nn.Module, inputs: Any, kwargs: Any) -> None:
    """Refuse sparse (and other non-strided) inputs, naming each.

    Every formula prices dense tensors: a sparse x dense product costs its stored values times
    the output columns, which neither tracer can see (the jit graph keeps no sizes of a sparse
    tensor; on meta its stored values are unknown), so counting it dense would be a wrong number.
    Sparse parameters and buffers are refused where an operator other than :data:`SPARSE_OK`
    takes them (the dispatch tracer), as a model may only densify them."""
    args, kw = normalize_inputs(inputs, kwargs)
    for path, leaf in _leaves_with_path((args, kw)):
        if isinstance(leaf, torch.Tensor) and leaf.layout is not torch.strided:
            raise SparseTensorError(
                f"input {path} of the model ({type(model).__name__}) is {tensor_description(leaf)}: {DENSE_ONLY}"
            )


# Operators that may take or make a sparse tensor: they convert it, or read its metadata.
SPARSE_OK = frozenset(
    f"aten::{op}"
    for op in (
        "to_dense", "_to_dense", "coalesce", "_coalesce", "_values", "_indices", "values", "indices",
        "crow_indices", "col_indices", "ccol_indices", "row_indices", "_nnz", "sparse_dim", "dense_dim",
        "is_coalesced", "detach", "alias", "size", "dim",
    )
)  # fmt: skip


def refuse_sparse(call: OpCall, sparse: Mapping[int, str]) -> None:
    """Raise if ``call`` takes or makes one of the ``sparse`` values (value id -> description),
    unless it is one of :data:`SPARSE_OK`: its cost would depend on the stored values."""
    if call.kind in SPARSE_OK:
        return
    for spec in (*call.inputs, *call.outputs):
        if isinstance(spec, TensorSpec) and spec.id is not None and spec.id in sparse:
            where = f"module '{call.scope[-1]}'" if call.scope[-1] else "the model"
            raise SparseTensorError(f"operator {call.kind} in {where} takes or makes {sparse[spec.id]}: {DENSE_ONLY}")


def refuse_sparse_kinds(call: OpCall) -> None:
    """Raise if ``call`` is an operator on sparse tensors by its name (``to_sparse``, ``_sparse_mm``,
    ``sparse_coo_tensor``...). The jit graph keeps no layouts, so a sparse tensor made inside the forward
    shows only in the name of the operator that makes or takes it; the dispatch tracer sees the layout."""
    if call.kind in SPARSE_OK or "sparse" not in call.kind.partition("::")[2]:
        return
    where = f"module '{call.scope[-1]}'" if call.scope[-1] else "the model"
    raise SparseTensorError(f"operator {call.kind} in {where} works on sparse tensors: {DENSE_ONLY}")


DENSE_ONLY = (
    "opcount prices dense tensors only (a sparse product's cost depends on its stored values); "
    "pass x.to_dense() to count the dense computation"
)


def tensor_description(t: torch.Tensor) -> str:
    """``a torch.sparse_coo tensor of shape [4, 8]``."""
    return f"a {t.layout} tensor of shape {list(t.shape)}"


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


class DeferredOutputError(TraceError):
    """The forward returned a generator or a coroutine, whose body had not run: nothing was traced."""


def refuse_deferred(model: nn.Module, output: Any) -> None:
    """Raise :class:`DeferredOutputError` if ``output`` is a generator, an async generator or a
    coroutine (a ``forward`` with ``yield`` in it, an ``async def forward``): its body runs only
    when it is iterated or awaited, so no operator of it ran during the trace, and the count would
    be a silent 0 (the dispatch tracer records what runs). It is closed, never run: running it
    here would be running code the model's caller never asked for, maybe without end."""
    if inspect.isgenerator(output) or inspect.iscoroutine(output) or inspect.isasyncgen(output):
        what = type(output).__name__
        if not inspect.isasyncgen(output):  # an async generator never started needs no closing
            output.close()  # a coroutine left unclosed warns that it was never awaited
        raise DeferredOutputError(
            f"the forward of the model ({type(model).__name__}) returned a {what}, whose body runs only when it is "
            f"{'awaited' if what == 'coroutine' else 'iterated'}: no operator of it ran during the trace, so "
            "nothing would be counted. Return the tensors the forward computes (a list or tuple of them)."
        )


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
