"""What a handle may return: a count, a Counter of counts, or a :class:`Cost`, checked and made plain numbers.

A count is a finite number >= 0 of any numeric type: a Python ``int`` or ``float``, a numpy
integer or floating scalar, or a 0-d torch tensor (converted once to ``int``/``float``). A bool,
NaN, an infinity, a negative number, a string or ``None`` is a mistake in the handle, reported
with the operator, the module and the input shapes; summing it in would give a wrong total
without a word (fvcore's Counter arithmetic drops negative counts, so a handle's -5 would make
its operator vanish).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import HandleError
from ..ir import ListSpec, OpCall, TensorSpec


@dataclass(frozen=True, slots=True)
class Cost:
    """A flop handle's result that counts multiply-adds and plain flops apart.

    A fused operator often does both: an LSTM's gate products (multiply-adds) and its sigmoids
    and cell update (flops), attention's two products and the softmax between them. The flop
    analysis counts ``macs * flops_per_mac + flops``; the roofline, whose peaks count a
    multiply-add as two operations, ``2 * macs + flops``. A plain number from a handle marked
    ``macs`` is all multiply-adds, from any other handle all flops.

    A type of its own rather than a Counter with reserved keys: a handle's Counter is keyed by
    operator (fvcore's handles return such Counters), and a reserved key could be an operator's
    name; fvcore-style handles never return a Cost, so they work unchanged.
    """

    macs: int | float = 0
    flops: int | float = 0

    def at(self, flops_per_mac: int) -> int | float:
        """The flops when a multiply-add counts ``flops_per_mac`` flops."""
        return self.macs * flops_per_mac + self.flops


def cost_flops(value: Cost, call: OpCall, flops_per_mac: int) -> int | float:
    """``value.at(flops_per_mac)``, each part checked to be a count (else :class:`HandleError`)."""
    return _checked(value.macs, call, "macs") * flops_per_mac + _checked(value.flops, call, "flops")


def count_of(value: Any) -> int | float | None:
    """``value`` as a plain ``int`` or ``float`` when it is a count, else None."""
    kind = type(value)
    if kind is int:
        return value if value >= 0 else None
    if kind is float:
        return value if 0 <= value < math.inf else None  # NaN fails both comparisons
    number: int | float
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        number = int(value)
    elif isinstance(value, (float, np.floating)):
        number = float(value)
    elif isinstance(value, torch.Tensor) and value.ndim == 0 and _real_number(value.dtype) and not value.is_meta:
        number = value.item()
    else:
        return None
    return number if 0 <= number < math.inf else None


def _real_number(dtype: torch.dtype) -> bool:
    return dtype is not torch.bool and not dtype.is_complex


def handle_result(value: Any, name: str, call: OpCall, scale: int = 1) -> Mapping[str, Any]:
    """A handle's ``value`` for ``call`` as a Counter keyed by operator: a count under ``name``,
    or the handle's own Counter (keys prefixed by the custom Functions the call ran in), each
    count times ``scale``. A value that is not a count raises :class:`HandleError`."""
    if isinstance(value, Mapping):
        prefix = "".join(f"{f}::" for f in call.within)
        return Counter({f"{prefix}{k}" if prefix else k: _checked(v, call, k) * scale for k, v in value.items()})
    if not isinstance(value, (int, float, np.number, np.bool_, torch.Tensor)):
        raise HandleError(
            f"the handle for {call.kind} {_site(call)} returned {type(value).__name__}, not a number, Counter or Cost"
        )
    return Counter({name: _checked(value, call, None) * scale})


def _checked(value: Any, call: OpCall, key: Any) -> int | float:
    count = count_of(value)
    if count is None:
        what = f"{value!r} for {key!r}" if key is not None else repr(value)
        raise HandleError(
            f"the handle for {call.kind} {_site(call)} returned {what}: a count must be a finite number >= 0 "
            "(int, float, a numpy number or a 0-d tensor; not bool)"
        )
    return count


def _site(call: OpCall) -> str:
    return f"in module '{call.scope[-1]}' on inputs {describe(call.inputs)}"


def describe(specs: tuple[Any, ...]) -> str:
    """Input specs as a short string: tensors by shape and dtype, constants by value."""
    parts = []
    for s in specs:
        if isinstance(s, TensorSpec):
            parts.append(f"{list(s.shape)}:{s.dtype}")
        elif isinstance(s, ListSpec):
            parts.append("[" + ", ".join(describe((i,)) for i in s.items) + "]")
        else:
            parts.append(repr(getattr(s, "value", s)))
    return "(" + ", ".join(parts) + ")"
