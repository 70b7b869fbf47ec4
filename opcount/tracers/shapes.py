"""Shape-only tensors: the dispatch tracer's fast path for a forward pass without weights.

A :class:`ShapeTensor` has a shape, strides, a dtype and a device, and no storage. Under the
dispatch tracer's mode no kernel ever runs on one: :class:`ShapeRunner` gives each operator
outputs whose metadata it computes from the inputs' metadata. It runs the operator's meta
kernel on storage-less meta stand-ins once per distinct call (operator, argument metadata,
constants) and replays the result from a cache afterwards. Deep models repeat the same few
calls (every block of a transformer, every layer of an MLP), so almost every operator is a
cache hit: no kernel, none of the Python meta functions torch runs for ``addmm`` or ``relu``,
and none of the per-call bookkeeping of torch's fake tensors.

What a shape-only tensor cannot do, it refuses (:class:`ShapeUnsupported`), and the tracer
runs the pass again on fake tensors: an in-place operator that changes its tensor's shape
(``unsqueeze_``, ``resize_``), or a forward that reads values (``.item()``), which fake
tensors can answer for the small constants made from Python numbers.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, NamedTuple, Self

import torch

from ..ir import TensorSpec
from ..torch_internals import disabled_torch_function_impl, make_wrapper_subclass, op_schema

META = torch.device("meta")


class Meta(NamedTuple):
    """What a shape-only tensor is: its metadata."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype
    device: torch.device


class ShapeUnsupported(RuntimeError):
    """An operator a shape-only tensor cannot follow; the tracer falls back to fake tensors."""


class ShapeTensor(torch.Tensor):
    """A tensor that is only its :class:`Meta`: no storage, no values.

    ``spec`` is the tracer's record of it, made when it is first recorded.
    """

    __torch_function__ = disabled_torch_function_impl  # no Python layer
    meta: Meta
    spec: TensorSpec | None

    @staticmethod
    def __new__(cls, meta: Meta) -> Self:
        t = make_wrapper_subclass(
            cls, meta.shape, meta.stride, storage_offset=meta.offset, dtype=meta.dtype, device=meta.device
        )
        t.meta = meta
        t.spec = None
        return t  # type: ignore[no-any-return]  # torch's _make_wrapper_subclass is bound untyped

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:  # type: ignore[override]  # torch's stub types Tensor's dispatch as a plain function
        # The tracer's mode answers every operator first; one reaching here ran outside the trace.
        raise ShapeUnsupported(f"{func} on a shape-only tensor outside opcount's trace: it has no values")

    def __repr__(self, *, tensor_contents: Any = None) -> str:  # type: ignore[override]  # no values to print
        m = self.meta
        return f"ShapeTensor(shape={list(m.shape)}, dtype={m.dtype}, device={m.device})"


def meta_of(t: torch.Tensor) -> Meta:
    return Meta(tuple(t.shape), t.stride(), int(t.storage_offset()), t.dtype, t.device)


# Recipes by claimed device and default dtype (a factory called without a dtype gets it inside
# the kernel, not as an argument), then by call: pure functions of their keys, so shared by every
# trace in the process as torch's fake tensors share theirs. Cleared when it grows past a bound.
_RECIPES: dict[tuple[torch.device, torch.dtype], dict[Hashable, tuple[int, Any]]] = {}
_MAX_RECIPES = 100_000

# How a cached call rebuilds its outputs: a new tensor, an input returned as is (in-place and
# out= operators), a plain value, or a list/tuple of those.
_NEW, _ARG, _KWARG, _VALUE, _SEQ = range(5)


class ShapeRunner:
    """Computes operators on shape-only tensors (see the module docstring).

    ``device``: what every output claims to be on, unless the call asks for another (``.to``,
    a factory's ``device=``).
    """

    def __init__(self, device: torch.device) -> None:
        self._device = device
        self.metas: dict[int, Meta] = {}  # id -> metadata of the model's parameters and buffers
        self._cache = _RECIPES.setdefault((device, torch.get_default_dtype()), {})
        if len(self._cache) > _MAX_RECIPES:
            self._cache.clear()
        self._aliases: dict[Any, tuple[dict[int, tuple[int, Any]], tuple[tuple[int, Any], ...]]] = {}

    def remember(self, state: Iterable[torch.Tensor]) -> None:
        """Read the metadata of the model's parameters and buffers once, for the whole pass."""
        self.metas.update({id(t): self._claim(meta_of(t)) for t in state})

    def wrap(self, t: torch.Tensor) -> ShapeTensor:
        """A shape-only stand-in for an input tensor."""
        return ShapeTensor(self._claim(meta_of(t)))

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype) -> ShapeTensor:
        """A contiguous shape-only tensor (an input given by shape)."""
        stride, step = [], 1
        for size in reversed(shape):
            stride.append(step)
            step *= max(size, 1)
        return ShapeTensor(Meta(tuple(shape), tuple(reversed(stride)), 0, dtype, self._device))

    def run(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], op: Hashable | None = None) -> Any:
        """``func(*args, **kwargs)`` on shape-only tensors. ``op``: a cheaper stand-in for ``func``
        in the cache key, one per operator (an OpOverload hashes in Python)."""
        key = (func if op is None else op, *map(self.freeze, args), *[(k, self.freeze(v)) for k, v in kwargs.items()])
        try:
            recipe = self._cache.get(key)
        except TypeError:  # an unhashable constant: computed, not cached
            return self._build(self._compute(func, args, kwargs), args, kwargs)
        if recipe is None:
            recipe = self._cache[key] = self._compute(func, args, kwargs)
        how, what = recipe
        if how == _NEW:
            return ShapeTensor(what)
        return self._build(recipe, args, kwargs)

    # ----- the cache key: each argument's metadata or value ----------------------------------
    def freeze(self, a: Any) -> Hashable:
        """A hashable stand-in for an argument: a tensor's metadata, a constant's value."""
        t = type(a)
        if t is ShapeTensor:
            shaped: ShapeTensor = a
            return shaped.meta
        if t is int or t is float or t is bool or t is complex:
            return (t, a)  # 1, 1.0 and True hash alike but promote differently
        if isinstance(a, torch.Tensor):
            return self.metas.get(id(a)) or self._claim(meta_of(a))
        if t is list or t is tuple:
            return (t, *map(self.freeze, a))
        value: Hashable = a  # None, str, dtype, device, layout, memory format
        return value

    def _claim(self, meta: Meta) -> Meta:
        return meta._replace(device=self._device) if meta.device != self._device else meta

    # ----- a cache miss: the meta kernel on stand-ins ----------------------------------------
    def _compute(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[int, Any]:
        requested: list[torch.device] = []

        def stand_in(a: Any) -> Any:
            if isinstance(a, torch.Tensor):
                m = a.meta if type(a) is ShapeTensor else meta_of(a)
                return _meta_tensor(m)
            if isinstance(a, torch.device):
                requested.append(a)
                return META
            if type(a) is list or type(a) is tuple:
                return type(a)(map(stand_in, a))
            return a

        margs = tuple(map(stand_in, args))
        mkwargs = {k: stand_in(v) for k, v in kwargs.items()}
        written = [t for w in self._written(func) if isinstance(t := _lookup(w, margs, mkwargs), torch.Tensor)]
        before = [meta_of(t) for t in written]
        out = func(*margs, **mkwargs)
        if [meta_of(t) for t in written] != before:
            raise ShapeUnsupported(f"{func} changes the shape of a tensor it writes to")
        device = next((d for d in requested if d.type != "meta"), self._device)
        return self._describe(func, out, device)

    def _written(self, func: Any) -> tuple[tuple[int, Any], ...]:
        """Where the arguments ``func`` writes to are (in-place and out= operators)."""
        return self._schema_aliases(func)[1]

    def _alias_map(self, func: Any) -> dict[int, tuple[int, Any]]:
        """Return index -> the argument that return is (in-place and out= operators return it)."""
        return self._schema_aliases(func)[0]

    def _schema_aliases(self, func: Any) -> tuple[dict[int, tuple[int, Any]], tuple[tuple[int, Any], ...]]:
        found = self._aliases.get(func)
        if found is None:
            schema = op_schema(func)
            written: dict[str, tuple[int, Any]] = {}
            for i, arg in enumerate(schema.arguments):
                info = arg.alias_info
                if info is not None and info.is_write:
                    where = (_KWARG, arg.name) if arg.kwarg_only else (_ARG, i)
                    written.update({s: where for s in info.before_set})
            returns: dict[int, tuple[int, Any]] = {}
            for r, ret in enumerate(schema.returns):
                info = ret.alias_info
                match = next((written[s] for s in info.before_set if s in written), None) if info else None
                if match is not None:
                    returns[r] = match
            found = self._aliases[func] = (returns, tuple(dict.fromkeys(written.values())))
        return found

    def _describe(self, func: Any, out: Any, device: torch.device) -> tuple[int, Any]:
        aliases = self._alias_map(func)
        n_returns = len(op_schema(func).returns)

        def describe(o: Any) -> tuple[int, Any]:
            if isinstance(o, torch.Tensor):
                return _NEW, meta_of(o)._replace(device=device)
            if isinstance(o, (list, tuple)):
                return _SEQ, (type(o), tuple(map(describe, o)))
            return _VALUE, o

        if n_returns == 1:
            return aliases[0] if 0 in aliases else describe(out)
        parts = tuple(aliases[r] if r in aliases else describe(o) for r, o in enumerate(out))
        return _SEQ, (tuple, parts)

    def _build(self, recipe: tuple[int, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        how, what = recipe
        if how == _NEW:
            return ShapeTensor(what)
        if how == _ARG or how == _KWARG:
            return _lookup(recipe, args, kwargs)
        if how == _VALUE:
            return what
        kind, parts = what
        return kind(self._build(p, args, kwargs) for p in parts)


def _lookup(where: tuple[int, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The argument at ``(_ARG, position)`` or ``(_KWARG, name)``; None when not given."""
    how, at = where
    if how == _ARG:
        return args[at] if at < len(args) else None
    return kwargs.get(at)


def _meta_tensor(m: Meta) -> torch.Tensor:
    """A storage-less meta tensor with ``m``'s shape, strides, offset and dtype."""
    if m.offset == 0:
        return torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device=META)
    span = 1 + sum((s - 1) * st for s, st in zip(m.shape, m.stride, strict=True) if s > 0)
    base = torch.empty(m.offset + span, dtype=m.dtype, device=META)
    return base.as_strided(m.shape, m.stride, m.offset)
