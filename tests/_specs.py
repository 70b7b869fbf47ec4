"""Short constructors for handle arguments in the single-op formula tests."""

from __future__ import annotations

from collections import Counter

from opcount.counts import Cost
from opcount.handles import FLOPS
from opcount.ir import Const, ListSpec, Spec, TensorSpec


def T(*shape: int, dtype: str = "float32") -> TensorSpec:
    return TensorSpec(tuple(shape), dtype)


def C(value: object) -> Const:
    return Const(value)


def L(*items: object) -> ListSpec:
    return ListSpec(tuple(i if isinstance(i, (TensorSpec, Const, ListSpec)) else Const(i) for i in items))


NONE = Const(None)


def flops(op: str, inputs: list[Spec], outputs: list[Spec]) -> int:
    """The registered handle's value for one call, as one int (a Counter is summed)."""
    value = FLOPS.handles[op](inputs, outputs)
    if isinstance(value, Counter):
        assert all(isinstance(v, int) and v >= 0 for v in value.values()), value
        return sum(value.values())
    assert isinstance(value, int) and not isinstance(value, bool), value
    return value


def cost(op: str, inputs: list[Spec], outputs: list[Spec]) -> Cost:
    """The registered handle's value for one call, which counts multiply-adds and flops apart."""
    value = FLOPS.handles[op](inputs, outputs)
    assert isinstance(value, Cost), value
    return value
