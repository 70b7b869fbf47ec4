"""A training step's backward products that read a weight: where a sparse weight saves work again.

The input gradient of a weight layer is a product with the same weight: a linear's
``d_x = grad @ W`` (recorded as an ``mm``), a convolution's ``d_x`` (the input-gradient part of
``convolution_backward``). A sparse ``W`` stored in a format speeds these up as it does the
forward. The weight gradient ``d_W = grad^T @ x`` does not read ``W``, and its result is dense, so
it keeps its dense cost.

Matching, call by call in execution order (the backward runs after the forward it mirrors):

- ``convolution_backward`` names its weight (argument 2); it reads it when its output mask asks
  for the input gradient. Its GEMM is the forward convolution's, with the incoming gradient as
  the output.
- a linear's backward ``mm`` reads a view of a tensor autograd saved (``W``, or ``W^T``
  transposed back), which the trace does not tie to the parameter. It is matched by module and
  shape: an ``mm(grad [N, rows], B [rows, cols]) -> [N, cols]`` in the module of an earlier
  forward weight layer whose GEMM matrix is ``W[rows, cols]``, once per forward call. The weight
  gradient ``grad^T @ x`` has those shapes too when N == rows: it is told apart when its ``x`` is
  the forward's own operand (a 2-d input); otherwise the first of the two is taken, as autograd
  computes the input gradient first (the two cost the same). A first layer with such an input
  computes no input gradient, and its weight gradient is then taken for one.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..handles.backward_args import CONV_BACKWARD, CONV_BW_MASK, output_mask
from ..ir import Const, OpCall, TensorSpec
from .gemm import WeightUse, weight_use


@dataclass(frozen=True)
class WeightProduct:
    """A call's product with a weight: ``named`` finds the weight as its forward does (its
    parameter spec and GEMM view); ``use`` is the product's GEMM with the operand it reads;
    ``rest`` is True when the call computes another product beside this one (a convolution's
    weight gradient), which stays dense and keeps the call on its unit (the bias gradient is a
    roofline layer of its own, :mod:`opcount.roofline.split`)."""

    named: WeightUse
    use: WeightUse
    rest: bool


class WeightProducts:
    """:meth:`match` every call in execution order: it returns the call's product with a weight
    (a forward weight layer's, :func:`~.gemm.weight_use`, or a backward input gradient's), if any."""

    def __init__(self) -> None:
        # (module, rows, cols) -> the forward uses not yet matched to their input gradient, each
        # with the ids of the forward's other operands (the activation x)
        self._pending: dict[tuple[str, int, int], list[tuple[WeightUse, set[int]]]] = {}

    def match(self, call: OpCall) -> WeightProduct | None:
        use = weight_use(call)
        if use is not None:
            self._forward(call, use)
            return WeightProduct(use, use, rest=False)
        if call.kind == CONV_BACKWARD:
            return _conv_input_gradient(call)
        if call.kind == "aten::mm":
            return self._linear_input_gradient(call)
        return None

    def _forward(self, call: OpCall, use: WeightUse) -> None:
        if use.view in ("linear", "linear_t"):
            others = {s.id for s in call.inputs if isinstance(s, TensorSpec) and s.id is not None and s is not use.spec}
            self._pending.setdefault((call.scope[-1], use.rows, use.cols), []).append((use, others))

    def _linear_input_gradient(self, call: OpCall) -> WeightProduct | None:
        if len(call.inputs) != 2 or len(call.outputs) != 1:
            return None
        (grad, b), (out,) = call.inputs, call.outputs
        if not (isinstance(grad, TensorSpec) and isinstance(b, TensorSpec) and isinstance(out, TensorSpec)):
            return None
        if not grad.rank == b.rank == out.rank == 2:
            return None
        (n, rows), (b_rows, cols) = grad.shape, b.shape
        pending = self._pending.get((call.scope[-1], b_rows, cols))
        if not pending or rows != b_rows or out.shape != (n, cols):
            return None
        forward, activations = pending[0]
        if b.id is not None and b.id in activations:
            return None  # grad^T @ x: the weight gradient, shaped like the input gradient (N == rows)
        pending.pop(0)
        return WeightProduct(forward, WeightUse(b, "linear", rows, cols, n), rest=False)


def _conv_input_gradient(call: OpCall) -> WeightProduct | None:
    """The input-gradient product of a ``convolution_backward``: the forward convolution's GEMM
    (the same weight, applied to as many positions) with the incoming gradient as its output."""
    ins = call.inputs
    mask = output_mask(ins)
    if mask is None or not mask[0]:
        return None
    grad, x, w, _, stride, padding, dilation, transposed, output_padding, groups = ins[:CONV_BW_MASK]
    forward = OpCall(
        "aten::convolution",
        (x, w, Const(None), stride, padding, dilation, transposed, output_padding, groups),
        (grad,),
        call.scope,
    )
    use = weight_use(forward)
    if use is None:
        return None
    return WeightProduct(use, use, rest=bool(mask[1]))
