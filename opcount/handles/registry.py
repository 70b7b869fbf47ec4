"""One registry per metric: operator name -> handle, filled by decorators in the family modules.

A handle is a pure function ``fn(inputs, outputs) -> int | Counter[str] | Cost`` of the operator's
argument specs (see :mod:`opcount.ir`); a :class:`~opcount.handles.counts.Cost` counts multiply-adds and
plain flops apart. Each operator has exactly one of three outcomes:
counted (a handle), explicitly zero-cost (``zero_cost``), or unsupported (neither).

A family may also declare operators free *as a fallback* (``zero_cost(..., fallback=True)``):
the claim holds only where no other family prices or frees the operator, whichever module is
imported first, so the registry's contents never depend on import order. For the same reason an
operator priced *as another one is* (``mirror``: a backward kernel and its forward) is resolved
when the registry is read, not when it is declared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import OpcountValueError
from ..ir import Spec
from .counts import Cost

SpecFn = Callable[[Sequence[Spec], Sequence[Spec]], "int | float | Counter[str] | Cost"]


@dataclass(frozen=True)
class Handle:
    """A spec-based handle and what the analyses need to know about it.

    ``macs``: a plain number the handle returns counts multiply-adds, so ``flops_per_mac`` scales
    it (a :class:`~opcount.handles.counts.Cost` says itself which part is which); the roofline runs the
    operator on the tensor unit.
    ``fvcore``: part of fvcore's default set (the ``"fvcore"`` preset), with fvcore's values.
    ``name``: the operator key in results when it differs from the short op name.
    """

    fn: SpecFn
    ops: tuple[str, ...]
    macs: bool = False
    fvcore: bool = False
    name: str | None = None
    family: str = ""
    doc: str = field(default="", compare=False)

    def __call__(self, inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int | float | Counter[str] | Cost:
        return self.fn(inputs, outputs)


MakeHandle = Callable[[Mapping[str, Handle]], Handle]  # the registry's own handles -> a mirror's handle


def spec_handle(fn: SpecFn, *, macs: bool = False, name: str | None = None) -> Handle:
    """Wrap a user function of specs as a handle for ``set_op_handle``.

    A plain callable given to ``set_op_handle`` is taken to be an fvcore handle (it receives
    ``torch._C.Value`` lists); wrap a function of :mod:`opcount.ir` specs with this instead.
    """
    return Handle(fn=fn, ops=(), macs=macs, name=name, doc=fn.__doc__ or "")


class Registry:
    """Operator name -> handle for one metric; refuses to register an operator twice."""

    def __init__(self, metric: str) -> None:
        self.metric = metric
        self._handles: dict[str, Handle] = {}
        self._zero: dict[str, str] = {}  # op -> family, explicitly zero-cost
        self._fallback: dict[str, str] = {}  # op -> family, zero-cost unless another family claims it
        self._mirrors: dict[str, tuple[str, MakeHandle, str]] = {}  # op -> (forward, make, family)
        self._zero_view: frozenset[str] | None = None  # zero + unclaimed fallbacks, cached (hot in roofline)
        self._view: tuple[dict[str, Handle], dict[str, str]] | None = None  # handles and zeros, mirrors resolved

    def register(
        self, *ops: str, macs: bool = False, fvcore: bool = False, name: str | None = None
    ) -> Callable[[SpecFn], SpecFn]:
        """Decorator: register ``fn`` as the handle of every operator in ``ops``."""

        def decorate(fn: SpecFn) -> SpecFn:
            family = fn.__module__.rsplit(".", 1)[-1]
            handle = Handle(fn, tuple(ops), macs, fvcore, name, family, fn.__doc__ or "")
            self._changed()
            for op in ops:
                self._claim(op)
                self._handles[op] = handle
            return fn

        return decorate

    def zero_cost(self, *ops: str, family: str = "zero_cost", fallback: bool = False) -> None:
        """Declare operators that do no arithmetic for this metric (views, copies, indexing).

        ``fallback=True``: only where no family registers a handle or a zero cost for the
        operator, before or after this call (the dispatch tracer's catch-all operators).
        """
        self._changed()
        for op in ops:
            if fallback:
                _qualified(op)
                self._fallback.setdefault(op, family)
            else:
                self._claim(op)
                self._zero[op] = family

    def mirror(self, op: str, forward: str, make: MakeHandle, family: str) -> None:
        """Declare ``op`` priced as ``forward`` is: by ``make(handles)`` where ``forward`` has a
        handle, free (under ``family``) where it is free, unsupported where it is unsupported."""
        self._changed()
        self._claim(op)
        self._mirrors[op] = (forward, make, family)

    def _claim(self, op: str) -> None:
        _qualified(op)
        if op in self._handles or op in self._zero or op in self._mirrors:
            raise OpcountValueError(f"{self.metric}: operator {op!r} is registered twice")

    def _changed(self) -> None:
        self._zero_view = None
        self._view = None

    def _resolved(self) -> tuple[dict[str, Handle], dict[str, str]]:
        """(handles, zero-cost operators and their families), fallbacks and mirrors resolved."""
        if self._view is None:
            claimed = self._handles.keys() | self._zero.keys() | self._mirrors.keys()
            zero = {**self._zero, **{op: f for op, f in self._fallback.items() if op not in claimed}}
            handles = dict(self._handles)
            for op, (forward, make, family) in self._mirrors.items():
                if forward in self._handles:
                    handles[op] = make(self._handles)
                elif forward in zero:
                    zero[op] = family
            self._view = handles, zero
        return self._view

    @property
    def handles(self) -> dict[str, Handle]:
        return dict(self._resolved()[0])

    @property
    def zero(self) -> frozenset[str]:
        if self._zero_view is None:
            self._zero_view = frozenset(self.zero_families())
        return self._zero_view

    def zero_families(self) -> dict[str, str]:
        """Every zero-cost operator and the family that declared it (fallbacks not claimed otherwise)."""
        return dict(self._resolved()[1])

    def __iter__(self) -> Iterator[str]:
        return iter(self._resolved()[0])

    def __contains__(self, op: object) -> bool:
        handles, zero = self._resolved()
        return op in handles or op in zero or op in self._fallback


def _qualified(op: str) -> None:
    if "::" not in op:
        raise OpcountValueError(f"operator names are qualified (e.g. 'aten::{op}'), got {op!r}")


FLOPS = Registry("flops")
ACTIVATIONS = Registry("activations")
MEMORY = Registry("memory")
