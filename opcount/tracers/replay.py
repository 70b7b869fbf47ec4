"""Leaf module calls replayed from their records: the shape-only pass's cache, one level up.

On shape-only tensors (:mod:`.shapes`) an operator's outputs are a function of its arguments'
metadata. A leaf module of ``torch.nn`` itself (a ``Linear``, a ``Conv2d``, a ``ReLU``: no
child modules, no hooks, the class's own ``forward``) is such a function too, of its
configuration attributes, its parameters' and buffers' metadata and its arguments' metadata.
The first call with a given key runs, and the records it emits become a template; every later
call with the same key (the other 999 layers of an MLP, every later analysis in the process)
appends the template's records with this call's tensors put in, and returns new shape-only
outputs, without running the forward, its operators or their dispatch.

A call is not replayed, and runs as usual, when its key cannot be made (an attribute that is
not a plain value, such as the list of weights an ``LSTM`` keeps) or when its records are not
all expressible in its arguments, its own state and tensors it made (it read a tensor from
elsewhere, or returned something other than tensors).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any, Protocol, cast

import torch
from torch import nn

from ..ir import Const, ListSpec, OpCall, Spec, TensorSpec
from ..torch_internals import any_autocast_enabled
from .shapes import Meta, ShapeTensor

Scope = tuple[str, ...]

# Templates by claimed device and default dtype, then by call key; bounded as the recipes are.
_TEMPLATES: dict[tuple[torch.device, torch.dtype], dict[Hashable, _Template | None]] = {}
_MAX_TEMPLATES = 20_000

# Where a template's slot takes its spec from in each call: an argument, a keyword argument, a
# parameter or buffer of the module, a tensor the call made, a list of other slots.
_ARG, _KWARG, _PARAM, _BUFFER, _NEW, _LIST = range(6)
# How an output is rebuilt: an argument returned as is, a new tensor, a tuple or list of those.
_OUT_ARG, _OUT_KWARG, _OUT_NEW, _OUT_SEQ = range(4)

# Attribute values a key can hold as they are (a tuple of them too).
_PLAIN = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device, torch.memory_format})
_PLAIN_OR_TUPLE = _PLAIN | {tuple}

# How the trace's ``nn.Module.__call__`` takes a module of the model: run in its scope, or
# replayed (a leaf). (Sequentials inlined as chains of replayed leaves bought under 10% on every
# benchmark model and were removed: docs/benchmarks.md.)
RUN, LEAF = range(2)


class Recording(Protocol):
    """What replay needs of the dispatch tracer's recorder."""

    calls: list[OpCall]
    within: tuple[str, ...]
    next_id: int

    def spec_of(self, t: torch.Tensor) -> TensorSpec: ...

    def known_spec(self, t: torch.Tensor) -> TensorSpec | None: ...

    def fresh_spec(self, shape: tuple[int, ...], dtype: str) -> TensorSpec: ...


class Scoping(Protocol):
    """What replay needs of the dispatch tracer's module scopes."""

    def scope_of(self, name: str) -> Scope: ...

    def run(self, module: nn.Module, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...

    def hooked(self, module: nn.Module) -> bool: ...


class _Unreplayable(Exception):
    """A call whose records or outputs a template cannot express."""


class _Template:
    """A call's records with its specs numbered: ``slots`` of specs that ``fills`` says where
    to take from in each call (constants kept in ``base``); records name their specs by slot."""

    __slots__ = ("base", "fills", "output", "records", "slot_of")

    def __init__(self) -> None:
        self.base: list[Spec | None] = []
        self.fills: list[tuple[int, int, Any]] = []
        self.records: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...] = ()
        self.output: Any = None
        self.slot_of: dict[int, int] = {}  # spec id in the first call -> slot, while learning

    @classmethod
    def of(
        cls,
        records: list[OpCall],
        sources: dict[int, tuple[int, Any]],
        first_id: int,
        out: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> _Template:
        """The template of a call's ``records`` and of ``out``, what it returned from ``args`` and
        ``kwargs``: ``sources`` says which specs are arguments and state; any other tensor must
        be new (numbered from ``first_id`` on)."""
        t = cls()
        t.records = tuple(
            (
                c.kind,
                tuple(t._slot(s, sources, first_id) for s in c.inputs),
                tuple(t._slot(s, sources, first_id) for s in c.outputs),
            )
            for c in records
        )
        t.output = _describe(out, args, kwargs, t.slot_of)
        t.slot_of = {}  # the first call's numbering: not needed to replay
        return t

    def _slot(self, spec: Spec, sources: dict[int, tuple[int, Any]], first_id: int) -> int:
        if isinstance(spec, Const):
            self.base.append(spec)
            return len(self.base) - 1
        if isinstance(spec, ListSpec):
            items = tuple(self._slot(i, sources, first_id) for i in spec.items)
            return self._fill(_LIST, items)
        if spec.id in self.slot_of:
            return self.slot_of[spec.id]
        source = sources.get(spec.id)  # type: ignore[arg-type]  # a recorded TensorSpec always has an id
        if source is None:
            if spec.id is None or spec.id < first_id or spec.param is not None:
                raise _Unreplayable(f"{spec} is none of the call's arguments, state or results")
            source = (_NEW, (spec.shape, spec.dtype))
        slot = self.slot_of[spec.id] = self._fill(*source)  # type: ignore[index]  # a recorded TensorSpec always has an id
        return slot

    def _fill(self, how: int, what: Any) -> int:
        self.base.append(None)
        self.fills.append((len(self.base) - 1, how, what))
        return len(self.base) - 1


def replayable(module: nn.Module) -> bool:
    """A leaf module whose ``forward`` is torch.nn's own."""
    return (
        type(module).__module__.startswith("torch.nn.modules.")
        and not module._modules
        and "forward" not in module.__dict__
    )


class Replayer:
    """Memoizes the calls of replayable leaf modules during one shape-only pass.

    ``freeze``: a hashable stand-in for an argument (its metadata or value), as the operator
    cache keys its calls by.
    """

    def __init__(
        self,
        recording: Recording,
        scopes: Scoping,
        device: torch.device,
        freeze: Callable[[Any], Hashable],
        metas: dict[int, Meta],
    ) -> None:
        self._rec = recording
        self._scope_of = scopes.scope_of  # module name -> the scope its operators get, called now
        self._run = scopes.run  # a module call in its scope, as without replay
        self._freeze = freeze
        self._metas = metas  # id -> metadata of the model's parameters and buffers
        self._hooked = scopes.hooked  # whether a hook registered during the pass would run
        self._cache = _TEMPLATES.setdefault((device, torch.get_default_dtype()), {})
        if len(self._cache) > _MAX_TEMPLATES:
            self._cache.clear()

    def adopt(self, module: nn.Module, name: str) -> int:
        """How the trace calls module ``name`` of the model (which has no hooks): RUN or LEAF."""
        return LEAF if replayable(module) else RUN

    def call(self, module: nn.Module, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Leaf ``name``'s call: replayed when a template for its key exists, else run."""
        run = self._run
        if self._hooked(module):
            return run(module, name, args, kwargs)
        try:
            key = self._key(module, args, kwargs)
            template = self._cache.get(key, _MISSING)
        except (_Unreplayable, TypeError):  # an attribute or argument that is no plain value
            return run(module, name, args, kwargs)
        if template is None:
            return run(module, name, args, kwargs)
        if template is _MISSING:
            out, self._cache[key] = self._learn(module, name, args, kwargs)
            return out
        template = cast(_Template, template)
        slots = self._emit(template, module, self._scope_of(name), args, kwargs)
        return _rebuild(template.output, args, kwargs, slots)

    # ----- the key -----------------------------------------------------------------------
    def _key(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Hashable:
        freeze = self._freeze
        if not kwargs and len(args) == 1:
            return self._key_of(module, freeze(args[0]), ())
        inputs = (*map(freeze, args), *[(k, freeze(v)) for k, v in kwargs.items()])
        ids = [id(a) for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        return self._key_of(module, inputs, tuple(map(ids.index, ids)))  # a tensor passed twice is not two

    def _key_of(self, module: nn.Module, inputs: Hashable, same: tuple[int, ...]) -> Hashable:
        """The key of a call of ``module`` on arguments frozen to ``inputs``; ``same``: which
        of them are one tensor."""
        d = module.__dict__
        names = _attribute_names(tuple(d))
        values = tuple(map(d.__getitem__, names))
        types = tuple(map(type, values))  # 1, 1.0 and True hash alike
        if not _PLAIN_OR_TUPLE.issuperset(types) or (
            tuple in types and not all(_PLAIN.issuperset(map(type, v)) for v in values if type(v) is tuple)
        ):
            raise _Unreplayable("an attribute that is not a plain value")
        params, buffers = module._parameters, module._buffers
        tensors = (*params.values(), *buffers.values())
        state = tuple(map(self._metas.get, map(id, tensors)))
        if None in state and any(m is None and t is not None for m, t in zip(state, tensors, strict=True)):
            raise _Unreplayable("a parameter or buffer that is not the model's")  # assigned during the pass
        kind = type(module)  # its forward too: a library may patch torch.nn's classes
        return (
            kind,
            kind.forward,
            names,
            values,
            types,
            tuple(params),
            tuple(buffers),
            state,
            inputs,
            same,
            _grad_enabled(),
            _autocast_enabled(),
        )

    # ----- a first call: run it and keep its records as a template -------------------------
    def _learn(
        self, module: nn.Module, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Any, _Template | None]:
        rec = self._rec
        first, first_id, within, scope = len(rec.calls), rec.next_id, rec.within, self._scope_of(name)
        out = self._run(module, name, args, kwargs)
        records = rec.calls[first:]
        if any(c.scope != scope or c.within != within for c in records):
            return out, None  # operators of another module or Function: not this call's alone
        if any(type(a) in (list, tuple, dict) for a in (*args, *kwargs.values())):
            return out, None  # tensors inside containers: a template names top-level arguments only
        sources: dict[int, tuple[int, Any]] = {}  # spec id -> where this call's tensor comes from
        for how, items in ((_ARG, enumerate(args)), (_KWARG, kwargs.items())):
            for at, a in items:
                if isinstance(a, torch.Tensor) and (spec := rec.known_spec(a)) is not None:
                    sources.setdefault(spec.id, (how, at))  # type: ignore[arg-type]  # a recorded TensorSpec always has an id
        for how, named in ((_PARAM, module._parameters), (_BUFFER, module._buffers)):
            for key, t in named.items():
                if t is not None and (spec := rec.known_spec(t)) is not None:
                    sources.setdefault(spec.id, (how, key))  # type: ignore[arg-type]  # a recorded TensorSpec always has an id
        try:
            return out, _Template.of(records, sources, first_id, out, args, kwargs)
        except _Unreplayable:
            return out, None

    # ----- a later call: the template's records with this call's tensors -------------------
    def _emit(
        self, template: _Template, module: nn.Module, scope: Scope, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> list[Any]:
        """Append the template's records with this call's specs; return the specs by slot."""
        rec = self._rec
        spec_of = rec.spec_of
        slots: list[Any] = list(template.base)
        for i, how, what in template.fills:  # in order of first use: value ids as the forward would number them
            if how == _NEW:
                slots[i] = rec.fresh_spec(*what)
            elif how == _ARG:
                slots[i] = spec_of(args[what])
            elif how == _PARAM:
                slots[i] = spec_of(module._parameters[what])  # type: ignore[arg-type]  # the slot's parameter or buffer was a tensor when recorded
            elif how == _BUFFER:
                slots[i] = spec_of(module._buffers[what])  # type: ignore[arg-type]  # the slot's parameter or buffer was a tensor when recorded
            elif how == _KWARG:
                slots[i] = spec_of(kwargs[what])
            else:
                slots[i] = ListSpec(tuple(map(slots.__getitem__, what)))
        get, calls, within = slots.__getitem__, rec.calls, rec.within
        for kind, ins, outs in template.records:
            calls.append(OpCall(kind, tuple(map(get, ins)), tuple(map(get, outs)), scope, within=within))
        return slots


_MISSING = object()
_grad_enabled, _autocast_enabled = torch.is_grad_enabled, any_autocast_enabled


@functools.lru_cache(maxsize=1024)
def _attribute_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """Of a module's attribute names, those of its configuration: all but torch.nn's own
    containers (parameters, buffers, children, hooks)."""
    return tuple(k for k in names if k not in _CONTAINERS)


# torch.nn.Module's own attributes that are no configuration
_CONTAINERS = frozenset(
    {
        "_parameters",
        "_buffers",
        "_non_persistent_buffers_set",
        "_modules",
        "_backward_pre_hooks",
        "_backward_hooks",
        "_forward_hooks",
        "_forward_hooks_with_kwargs",
        "_forward_hooks_always_called",
        "_forward_pre_hooks",
        "_forward_pre_hooks_with_kwargs",
        "_state_dict_hooks",
        "_state_dict_pre_hooks",
        "_load_state_dict_pre_hooks",
        "_load_state_dict_post_hooks",
    }
)


def _describe(out: Any, args: tuple[Any, ...], kwargs: dict[str, Any], slot_of: dict[int, int]) -> Any:
    """How to rebuild ``out``: arguments returned as they are, shape-only tensors the call made
    (with the slot of their spec, when its records name them)."""
    if isinstance(out, torch.Tensor):
        for i, a in enumerate(args):
            if out is a:
                return (_OUT_ARG, i)
        for k, a in kwargs.items():
            if out is a:
                return (_OUT_KWARG, k)
        if type(out) is not ShapeTensor or (out.spec is not None and out.spec.id not in slot_of):
            raise _Unreplayable("returns a tensor it did not make")
        return (_OUT_NEW, out.meta, None if out.spec is None else slot_of[out.spec.id])  # type: ignore[index]  # a recorded TensorSpec always has an id
    if type(out) is tuple or type(out) is list:
        return (_OUT_SEQ, type(out), tuple(_describe(o, args, kwargs, slot_of) for o in out))
    raise _Unreplayable(f"returns a {type(out).__name__}")


def _rebuild(how: Any, args: tuple[Any, ...], kwargs: dict[str, Any], slots: list[Any]) -> Any:
    kind = how[0]
    if kind == _OUT_NEW:
        t = ShapeTensor(how[1])
        t.spec = None if how[2] is None else slots[how[2]]
        return t
    if kind == _OUT_ARG:
        return args[how[1]]
    if kind == _OUT_KWARG:
        return kwargs[how[1]]
    return how[1](_rebuild(h, args, kwargs, slots) for h in how[2])
