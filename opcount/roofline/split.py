"""A call the roofline prices as two layers: ``convolution_backward``'s bias gradient.

PyTorch's ``convolution_backward`` (``aten/src/ATen/native/Convolution.cpp``) has its backend
(cuDNN, MIOpen, oneDNN's, the CPU's) compute the input and weight gradients, then computes the bias
gradient itself, where the backend did not, as ``grad_output.sum`` over the batch and the
positions: a reduction kernel of its own, which runs on the vector unit while the products run on
the tensor unit. The roofline gives it its own layer.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..handles.backward_args import CONV_BACKWARD, output_mask
from ..handles.memory import Access, Traffic
from ..handles.reduction import reduce_flops
from ..ir import OpCall, TensorSpec


def bias_gradient(call: OpCall, traffic: Traffic) -> tuple[float, Traffic, Traffic] | None:
    """(flops, traffic) of a ``convolution_backward``'s bias gradient and the traffic of the rest,
    None when it computes none. The sum adds numel(grad) - c_out values (the ``sum`` formula,
    :func:`~opcount.handles.reduction.reduce_flops`, as the call's flop formula counts it); it reads the incoming gradient and writes d_bias, the
    accesses the call's memory formula gives it (what fusion left of them)."""
    if call.kind != CONV_BACKWARD or len(call.outputs) != 3:
        return None
    mask = output_mask(call.inputs)
    grad, d_bias = call.inputs[0], call.outputs[2]
    if mask is None or not mask[2]:
        return None
    if not (isinstance(grad, TensorSpec) and grad.rank >= 2 and isinstance(d_bias, TensorSpec)):
        return None
    read, rest_read = _take(traffic.read, grad)
    write, rest_write = _take(traffic.write, d_bias)
    rest = Traffic(rest_read, rest_write, traffic.alias, traffic.fusable)
    return float(reduce_flops(grad.numel, d_bias.numel)), Traffic(read, write), rest


def _take(accesses: Sequence[Access], spec: TensorSpec) -> tuple[tuple[Access, ...], tuple[Access, ...]]:
    """The access of ``spec`` (by value id, else by shape and dtype), and the others."""
    for i, a in enumerate(accesses):
        if a.tensor is not None and (a.tensor.id == spec.id if spec.id is not None else a.tensor == spec):
            return (a,), (*accesses[:i], *accesses[i + 1 :])
    return (), tuple(accesses)
