"""The intermediate representation shared by tracers, handles and aggregation.

A tracer turns one forward pass into a sequence of :class:`OpCall` records made of plain
Python values. Everything downstream (handles, aggregation, reports) sees only these records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Bytes per element of each dtype name the tracers emit (torch dtype names without "torch.").
DTYPE_BYTES: dict[str, float] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "float8_e4m3fnuz": 1,
    "float8_e5m2fnuz": 1,
    "complex128": 16,
    "complex64": 8,
    "complex32": 4,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "uint16": 2,
    "uint32": 4,
    "uint64": 8,
    "quint8": 1,
    "qint8": 1,
    "qint32": 4,
    "quint4x2": 0.5,
}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor seen by the tracer: its shape and dtype name (e.g. ``"float32"``).

    ``param`` is the qualified name of the parameter or buffer this tensor is, when it is one.
    ``id`` identifies the value within one trace (the output of one call and the input of the
    next share it), so data flow can be followed; neither takes part in equality.
    """

    shape: tuple[int, ...]
    dtype: str = "float32"
    param: str | None = field(default=None, compare=False)
    id: int | None = field(default=None, compare=False)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def itemsize(self) -> float:
        """Bytes per element (``float("nan")`` is never returned: unknown dtypes count 4 bytes)."""
        return DTYPE_BYTES.get(self.dtype, 4)

    @property
    def nbytes(self) -> float:
        return self.numel * self.itemsize


@dataclass(frozen=True, slots=True)
class Const:
    """A non-tensor argument: a Python scalar, string, bool, None or a tuple of those.

    ``value`` is None both for a literal None and for a scalar only known at run time
    (e.g. the result of ``x.size(0)`` during tracing); ``known`` tells them apart.
    """

    value: object
    known: bool = True


@dataclass(frozen=True, slots=True)
class ListSpec:
    """A list argument that holds tensors or run-time values (e.g. the tensors of ``cat``)."""

    items: tuple[Spec, ...]


Spec = TensorSpec | Const | ListSpec


@dataclass(frozen=True, slots=True, init=False)
class OpCall:
    """One operator call recorded by a tracer: a frozen record of plain values.

    ``kind`` is the qualified operator name (``"aten::addmm"``, ``"prim::PythonOp.MyFn"``,
    ``"mylib::fused"``). ``scope`` is the stack of canonical module names that were running
    ``forward`` when the operator was called, outermost first; the root module is ``""``.

    ``within`` names the custom autograd Functions the call ran inside, outermost first (the
    dispatch tracer sees inside them); results report the call under ``"MyFn::mm"``.

    The jit tracer's native nodes, which handles written for fvcore take (as ``torch._C.Value``
    lists), are not part of the record: :class:`opcount.Trace` keeps them beside the records.
    """

    kind: str
    inputs: tuple[Spec, ...]
    outputs: tuple[Spec, ...]
    scope: tuple[str, ...] = ("",)
    within: tuple[str, ...] = ()

    def __init__(
        self,
        kind: str,
        inputs: tuple[Spec, ...],
        outputs: tuple[Spec, ...],
        scope: tuple[str, ...] = ("",),
        within: tuple[str, ...] = (),
    ) -> None:
        # Through the slots' own setters, as TensorSpec does: tracers make one record per operator.
        _set_kind(self, kind)
        _set_inputs(self, inputs)
        _set_outputs(self, outputs)
        _set_scope(self, scope)
        _set_within(self, within)

    def __repr__(self) -> str:
        within = f", within={self.within!r}" if self.within else ""
        return f"OpCall(kind={self.kind!r}, inputs={self.inputs!r}, outputs={self.outputs!r}, scope={self.scope!r}{within})"


_set_kind, _set_inputs, _set_outputs, _set_scope, _set_within = (
    OpCall.__dict__[f].__set__ for f in ("kind", "inputs", "outputs", "scope", "within")
)


def tensor(spec: Spec) -> TensorSpec:
    """Return ``spec`` as a tensor, or raise ValueError naming what it was instead."""
    if isinstance(spec, TensorSpec):
        return spec
    raise ValueError(f"expected a tensor argument, got {spec!r}")


def maybe_tensor(spec: Spec) -> TensorSpec | None:
    """Return ``spec`` if it is a tensor, None for an absent optional tensor (``None``)."""
    return spec if isinstance(spec, TensorSpec) else None


def const(spec: Spec) -> object:
    """Return the Python value of a constant argument, or raise ValueError."""
    if isinstance(spec, Const) and spec.known:
        return spec.value
    if isinstance(spec, ListSpec):
        values = [i.value for i in spec.items if isinstance(i, Const) and i.known]
        if len(values) == len(spec.items):
            return tuple(values)
    raise ValueError(f"expected a constant argument, got {spec!r}")


def tensors(spec: Spec) -> tuple[TensorSpec, ...]:
    """The tensors of a tensor-list argument (e.g. the operands of ``cat`` or ``einsum``)."""
    if isinstance(spec, ListSpec):
        return tuple(i for i in spec.items if isinstance(i, TensorSpec))
    if isinstance(spec, TensorSpec):
        return (spec,)
    return ()
