"""Convolutions: one multiply-add per weight element per output position (input position if transposed)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..ir import Spec, const
from ._shapes import first_tensor_out, numel, shape_of
from .registry import FLOPS

# aten::_convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
CONV_INPUT, CONV_WEIGHT, CONV_TRANSPOSED = 0, 1, 6


def conv_macs(
    x_shape: Sequence[int], w_shape: Sequence[int], out_shape: Sequence[int], transposed: bool = False
) -> int:
    """batch * prod(weight.shape) * prod(spatial), spatial of the output (of the input if transposed).

    The weight shape already carries the group division (``[out, in/groups, *k]`` or
    ``[in, out/groups, *k]`` when transposed), so grouped and depthwise convolutions need no
    special case; dilation changes the output size only.
    """
    spatial = (x_shape if transposed else out_shape)[2:]
    return x_shape[0] * numel(w_shape) * numel(spatial)


@FLOPS.register("aten::_convolution", macs=True, fvcore=True, name="conv")
def convolution(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Counter[str]:
    """[n, c_out, *o] = conv([n, c_in, *i], [c_out, c_in/g, *k]): n * prod(w) * prod(o) multiply-adds (transposed: prod(i))."""
    transposed = const(inputs[CONV_TRANSPOSED])
    if not isinstance(transposed, bool):
        raise ValueError(f"aten::_convolution: argument {CONV_TRANSPOSED} is not 'transposed': {transposed!r}")
    out = first_tensor_out(outputs).shape
    macs = conv_macs(shape_of(inputs[CONV_INPUT]), shape_of(inputs[CONV_WEIGHT]), out, transposed)
    return Counter({"conv": macs})
