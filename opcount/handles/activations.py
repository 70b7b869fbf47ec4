"""Activations: the elements an operator writes out, counted as fvcore counts them.

fvcore counts the output elements of the operators that carry the bulk of a network's
activations (convolutions and matrix products) and ignores the rest, so that
``ActivationCountAnalysis`` numbers equal fvcore's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ..ir import Spec
from ._shapes import first_tensor_out
from .registry import ACTIVATIONS
from .zero_cost import FVCORE_IGNORED


@ACTIVATIONS.register("aten::_convolution", fvcore=True, name="conv")
def conv_activations(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Counter[str]:
    """prod(out.shape): the elements of [n, c_out, *o] = conv(...)."""
    return Counter({"conv": first_tensor_out(outputs).numel})


@ACTIVATIONS.register("aten::addmm", "aten::bmm", "aten::einsum", "aten::matmul", "aten::linear", fvcore=True)
def product_activations(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """prod(out.shape): the elements of the product's output."""
    return first_tensor_out(outputs).numel


# Everything fvcore ignores is explicitly free here too; other operators are unsupported,
# as in fvcore (which warns about them).
ACTIVATIONS.zero_cost(*sorted(FVCORE_IGNORED))
