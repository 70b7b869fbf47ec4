"""From one profiled pass's event tree to a flat sample of times and counts: each event is
attributed to the module whose range holds it and keyed as the analyses key operators, so it
pairs with the roofline's rows.

Custom operators follow MXNet's custom-operator profiling conventions: a
``torch.autograd.Function`` is named by its class, a ``torch.library`` operator by its name
without namespace; the operators it launches are rows under its name (``MyOp::add``) and its
own time outside them a row of its own (``MyOp::(python)``, or ``(self)`` for an operator not
defined in Python).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from torch.autograd import Function

from ..handles import FLOPS
from ..handles.op_keys import op_key
from ..torch_internals import custom_op_definitions
from .runner import MODULE_RANGE

if TYPE_CHECKING:
    from ..roofline import RooflineReport

__all__ = ["PYTHON", "SELF", "Key", "Walker"]

PYTHON, SELF = "(python)", "(self)"
# Namespaces whose operators are PyTorch's own: their inner events are implementation detail.
_BUILTIN = ("aten::",)
_TRANSPARENT_NS = ("profiler::",)
# torch.library.custom_op wraps its autograd formula in a generated Function named after the op:
# the same operator twice, not a custom operator inside a custom operator.
_GENERATED = "GeneratedBackwardFor_"

Key = tuple[str, ...]  # ("module", name) | ("calls", name) | ("direct", name) | ("op", key) | ...


def _function_names() -> frozenset[str]:
    """Class names of every autograd Function defined so far: their ``apply`` is a profiler event
    named by the class."""
    found: set[str] = set()
    todo = list(Function.__subclasses__())
    while todo:
        cls = todo.pop()
        found.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(found)


def _python_defined(name: str) -> bool:
    return name in custom_op_definitions()


class Walker:
    """Turns one pass's event tree into a flat sample of times and counts."""

    def __init__(self, clock: Callable[[Any], float], predicted: RooflineReport | None) -> None:
        self.clock = clock
        self.functions = _function_names()
        self.predicted_ops = frozenset(predicted.by_operator()) if predicted is not None else frozenset()
        self.keys: dict[str, str] = {}
        self.parents: dict[str, str] = {}  # breakdown row -> its custom operator
        self.free: set[str] = set()  # operator keys declared free of cost (views, reshapes)
        self.values: dict[Key, float] = {}

    def add(self, key: Key, value: float) -> None:
        self.values[key] = self.values.get(key, 0.0) + value

    def sample(self, top: Any) -> dict[Key, float]:
        self.values = {}
        self.walk(top, "", "", frozenset())
        return self.values

    def kind(self, event: Any, parent: Any) -> str | None:
        """ "op", "custom" or None (not an operator: look inside)."""
        name = event.name
        if name == getattr(parent, "name", None) or name.startswith(_GENERATED) or name.startswith(_TRANSPARENT_NS):
            return None  # the same operator recorded twice (see runner.py), or profiler plumbing
        if name.startswith(_BUILTIN):
            return "op"
        if "::" in name or name in self.functions:
            return "custom"
        return None

    def key(self, event: Any) -> str:
        """The analyses' key of an operator; a composite whose own key the roofline does not know
        takes the key of the first operator inside it that it does (conv2d -> _convolution)."""
        name = event.name
        if name not in self.keys:
            key = _op_key(name)
            if self.predicted_ops and key not in self.predicted_ops:
                key = next((k for k in map(_op_key, _descendant_names(event)) if k in self.predicted_ops), key)
            self.keys[name] = key
        return self.keys[name]

    def walk(self, event: Any, module: str, prefix: str, active: frozenset[str]) -> tuple[float, float]:
        """Record the children of ``event``, which ran in ``module`` (inside custom operator
        ``prefix``); return the (measured, host) time of the rows recorded at this level."""
        measured = host = 0.0
        for child in event.cpu_children:
            name = child.name
            if name.startswith(MODULE_RANGE):
                mod = name[len(MODULE_RANGE) :]
                if mod in active:  # a module running inside itself: its outer range counts it
                    m, h = self.walk(child, mod, prefix, active)
                else:
                    m, h = self.clock(child), _host(child)
                    self.add(("module", mod), m)
                    self.add(("calls", mod), 1)
                    self.add(("self", mod), h - self.walk(child, mod, prefix, active | {mod})[1])
                measured, host = measured + m, host + h
                continue
            kind = self.kind(child, event)
            if kind is None:
                m, h = self.walk(child, module, prefix, active)
                measured, host = measured + m, host + h
                continue
            key = prefix + (self.key(child) if kind == "op" else _op_key(name))
            if name in FLOPS.zero:
                self.free.add(key)
            t = self.clock(child)
            self.add(("inner" if prefix else "op", key), t)
            self.add(("op_calls", key), 1)
            if prefix:
                self.parents[key] = prefix[:-2]
            else:
                self.add(("module_op", module, key), t)
            if kind == "custom":
                _, inner_host = self.walk(child, module, key + "::", active)
                if inner_host > 0:
                    label = PYTHON if name in self.functions or _python_defined(name) else SELF
                    self.parents[f"{key}::{label}"] = key
                    self.add(("python", f"{key}::{label}"), _host(child) - inner_host)
            measured, host = measured + t, host + _host(child)
        return measured, host


def _host(event: Any) -> float:
    seconds: float = event.time_range.elapsed_us() * 1e-6
    return seconds


def _op_key(name: str) -> str:
    handle = FLOPS.handles.get(name)
    return (handle.name if handle is not None else None) or op_key(name)


def _descendant_names(event: Any) -> Iterator[str]:
    for child in event.cpu_children:
        yield child.name
        yield from _descendant_names(child)
