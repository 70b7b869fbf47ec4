"""What the dispatch tracer records for an aten operator: the jit tracer's kind and argument layout.

The handles are written against the operators the jit tracer records (``aten::linear``,
``aten::_convolution``, ``aten::batch_norm``, ...). The dispatch tracer sees the same operators in
the forward pass (it runs it below autograd, where composite operators arrive whole, see
:mod:`.dispatch`); this module only has to

- bind each call's arguments to its schema, defaults included, as jit records them;
- rename the few operators the jit tracer records differently (``conv2d`` -> ``_convolution``, or
  ``_convolution_mode`` where the padding is a string such as ``"same"``, as jit records it: so that
  ``preset="fvcore"``, which has no formula for it, gives fvcore's numbers on both tracers).

Backward kernels are recorded as themselves (``convolution_backward``, ``threshold_backward``,
...) with their own arguments; :mod:`opcount.handles.backward` prices them.

A record is ``(kind, inputs, outputs)`` with values still as torch gives them (tensors, Python
scalars, lists) or already as :mod:`opcount.ir` specs; the tracer converts the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import torch

from ..torch_internals import op_schema

Record = tuple[str, list[Any], list[Any]]
Normalizer = Callable[[list[Any], list[Any]], list[Record]]

# The jit tracer's constants for dtypes, layouts and memory formats are c10's enum values.
_SCALAR_TYPES = [
    "uint8",
    "int8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
    "complex32",
    "complex64",
    "complex128",
    "bool",
    "qint8",
    "quint8",
    "qint32",
    "bfloat16",
    "quint4x2",
    "quint2x4",
    "bits1x8",
    "bits2x4",
    "bits4x2",
    "bits8",
    "bits16",
    "float8_e5m2",
    "float8_e4m3fn",
    "float8_e5m2fnuz",
    "float8_e4m3fnuz",
    "uint16",
    "uint32",
    "uint64",
]
JIT_DTYPE: dict[torch.dtype, int] = {
    getattr(torch, name): code for code, name in enumerate(_SCALAR_TYPES) if hasattr(torch, name)
}
JIT_LAYOUT: dict[torch.layout, int] = {torch.strided: 0, torch.sparse_coo: 1}
JIT_MEMORY_FORMAT: dict[torch.memory_format, int] = {
    torch.contiguous_format: 0,
    torch.preserve_format: 1,
    torch.channels_last: 2,
    torch.channels_last_3d: 3,
}


def jit_constant(value: Any) -> Any:
    """A torch enum argument as the jit tracer records it (an int); other values unchanged."""
    if isinstance(value, torch.dtype):
        return JIT_DTYPE.get(value, value)
    if isinstance(value, torch.layout):
        return JIT_LAYOUT.get(value, value)
    if isinstance(value, torch.memory_format):
        return JIT_MEMORY_FORMAT.get(value, value)
    return value


class Schema(NamedTuple):
    """What the tracer reads of an operator's schema, read once per operator."""

    name: str  # "aten::conv2d"
    defaults: tuple[tuple[str, Any], ...]  # (argument name, default or None), in order
    returns: int
    number: int  # numbers the operators seen: a cheap key (an OpOverload hashes in Python)


_SCHEMAS: dict[Any, Schema] = {}


def schema(func: Any) -> Schema:
    """What the tracer reads of ``func``'s (an ``OpOverload``'s) schema, read once per operator."""
    found = _SCHEMAS.get(func)
    if found is None:
        s = op_schema(func)
        defaults = tuple((a.name, a.default_value if a.has_default_value() else None) for a in s.arguments)
        found = _SCHEMAS[func] = Schema(s.name, defaults, len(s.returns), len(_SCHEMAS))
    return found


def bind(s: Schema, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Any]:
    """Every schema argument in order, defaults filled in: the layout the jit tracer records."""
    defaults = s.defaults
    if len(args) == len(defaults):
        return list(args)
    return [*args, *(kwargs.get(name, default) for name, default in defaults[len(args) :])]


def outputs_of(s: Schema, out: Any) -> list[Any]:
    """The op's return values as a list: one entry per schema return (a Tensor[] is one entry)."""
    if s.returns == 1:
        return [out]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def forward_records(name: str, bound: list[Any], outs: list[Any]) -> list[Record]:
    """The records of one forward call seen by the dispatch tracer (``name``: ``"aten::conv2d"``)."""
    normalize = FORWARD.get(name)
    return normalize(bound, outs) if normalize is not None else [(name, bound, outs)]


def backward_records(name: str, bound: list[Any], outs: list[Any]) -> list[Record]:
    """The record of one operator run by autograd's backward pass: the kernel as itself."""
    return [(name, bound, outs)]


# --- forward: the jit tracer records convolutions as aten::_convolution or _convolution_mode ---

CONVOLUTION = "aten::_convolution"
CONVOLUTION_MODE = "aten::_convolution_mode"  # string padding ("same", "valid"): a kind fvcore leaves unsupported
# _convolution's trailing flags: benchmark, deterministic, cudnn_enabled, allow_tf32 (as recorded by jit).
_CONV_FLAGS = [False, False, True, True]


def _convolution(
    x: Any,
    w: Any,
    b: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    transposed: bool,
    output_padding: Any,
    groups: Any,
    outs: list[Any],
) -> Record:
    return CONVOLUTION, [x, w, b, stride, padding, dilation, transposed, output_padding, groups, *_CONV_FLAGS], outs


def _conv_nd(bound: list[Any], outs: list[Any]) -> list[Record]:
    # convNd(input, weight, bias, stride, padding, dilation, groups); padding may be "same"/"valid"
    x, w, b, stride, padding, dilation, groups = bound[:7]
    if isinstance(padding, str):  # jit records string padding as _convolution_mode, with convNd's arguments
        return [(CONVOLUTION_MODE, [x, w, b, stride, padding, dilation, groups], outs)]
    spatial = max(_rank(w) - 2, 1)
    return [_convolution(x, w, b, stride, padding, dilation, False, [0] * spatial, groups, outs)]


def _conv_transpose_nd(bound: list[Any], outs: list[Any]) -> list[Record]:
    # conv_transposeNd(input, weight, bias, stride, padding, output_padding, groups, dilation)
    x, w, b, stride, padding, output_padding, groups, dilation = bound[:8]
    return [_convolution(x, w, b, stride, padding, dilation, True, output_padding, groups, outs)]


def _convolution_public(bound: list[Any], outs: list[Any]) -> list[Record]:
    # convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
    x, w, b, stride, padding, dilation, transposed, output_padding, groups = bound[:9]
    return [_convolution(x, w, b, stride, padding, dilation, transposed, output_padding, groups, outs)]


def _rank(t: Any) -> int:
    return t.dim() if isinstance(t, torch.Tensor) else len(getattr(t, "shape", ()))


FORWARD: dict[str, Normalizer] = {
    **{f"aten::conv{d}d": _conv_nd for d in (1, 2, 3)},
    **{f"aten::conv_transpose{d}d": _conv_transpose_nd for d in (1, 2, 3)},
    "aten::convolution": _convolution_public,
}
