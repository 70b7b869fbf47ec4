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
    """[n, c_out, *o] = conv([n, c_in, *i], [c_out, c_in/g, *k]): n * prod(w) * prod(o) multiply-adds (transposed: prod(i)); an unbatched input [c_in, *i] is a batch of one."""
    transposed = const(inputs[CONV_TRANSPOSED])
    if not isinstance(transposed, bool):
        raise ValueError(f"aten::_convolution: argument {CONV_TRANSPOSED} is not 'transposed': {transposed!r}")
    # jit batches an unbatched input first (unsqueeze); the dispatch tracer records it as it is
    return Counter({"conv": _conv(inputs, outputs, transposed)})


# --- other convolution entry points --------------------------------------------------
# jit traces of torch 2.14 record aten::_convolution for nn.ConvNd / ConvTransposeNd, with or
# without grad, and aten::_convolution_mode for string padding ("same"/"valid"), which the
# dispatch tracer records alike; fvcore has no handle for _convolution_mode, so preset="fvcore"
# leaves it unsupported, as fvcore does. The public overloads below appear in scripted code and
# in operators replayed by hand.

# convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups)
# conv{1,2,3}d(input, weight, bias, stride, padding, dilation, groups)
# _convolution_mode(input, weight, bias, stride, str padding, dilation, groups)
# conv_transpose{1,2,3}d(input, weight, bias, stride, padding, output_padding, groups, dilation)


def _conv(inputs: Sequence[Spec], outputs: Sequence[Spec], transposed: bool) -> int:
    out = first_tensor_out(outputs).shape
    x, w = shape_of(inputs[CONV_INPUT]), shape_of(inputs[CONV_WEIGHT])
    if len(x) == len(w) - 1:  # unbatched input [c, *i]: a batch of one
        x, out = (1, *x), (1, *out)
    if len(x) != len(w):
        raise ValueError(f"convolution: input {tuple(x)} and weight {tuple(w)} ranks do not fit")
    return conv_macs(x, w, out, transposed)


@FLOPS.register("aten::convolution", macs=True, name="conv")
def convolution_public(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, c_out, *o] = convolution(x, w, ..., transposed, ...): n * prod(w) * prod(o) multiply-adds (transposed: prod(i)), as _convolution."""
    transposed = const(inputs[CONV_TRANSPOSED])
    if not isinstance(transposed, bool):
        raise ValueError(f"aten::convolution: argument {CONV_TRANSPOSED} is not 'transposed': {transposed!r}")
    return _conv(inputs, outputs, transposed)


@FLOPS.register("aten::conv1d", "aten::conv2d", "aten::conv3d", "aten::_convolution_mode", macs=True, name="conv")
def conv_nd(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, c_out, *o] = convNd([n, c_in, *i], [c_out, c_in/g, *k]): n * prod(w) * prod(o) multiply-adds; grouped, dilated and padding='same' alike. `_convolution_mode` (string padding, 'same' or 'valid') is not in fvcore's set: preset='fvcore' reports it unsupported, as fvcore does, on both tracers; the default preset counts it."""
    return _conv(inputs, outputs, transposed=False)


@FLOPS.register("aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d", macs=True, name="conv")
def conv_transpose_nd(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, c_out, *o] = conv_transposeNd([n, c_in, *i], [c_in, c_out/g, *k]): n * prod(w) * prod(i) multiply-adds (each input meets the whole kernel; output_padding adds none)."""
    return _conv(inputs, outputs, transposed=True)
