"""Activation functions (nonlinearities): the elementary operations of each definition, per element.

Convention: chainer-computational-cost where it defines the function (ReLU 1 = one
max, LeakyReLU 2 = max(x, a*x), PReLU 1, Sigmoid 4 = negate, exp, +1, inverse); elsewhere the
count of elementary operations in the function's textbook definition, each elementary function
(exp, log, tanh, erf) counting 1. Costs are per output element; integer tensors cost 0.
fvcore counts none of these (it ignores relu and clamp).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Const, Spec, const
from .elementwise import elementwise_flops, per_element_handle
from .registry import FLOPS


def _register(per_element: int, ops: str, doc: str) -> object:
    names = tuple("aten::" + op for op in ops.split())
    return FLOPS.register(*names)(per_element_handle(per_element, doc, module=__name__))


# [*] = relu([*]); threshold(x, t, v) is the same compare-and-select.
relu = _register(
    1,
    "relu relu_ threshold threshold_",
    "max(x, 0): 1 flop per element (chainer-computational-cost ReLU: a max is one instruction).",
)
prelu = _register(
    1,
    "prelu _prelu_kernel",
    "max(x, 0) + w * min(x, 0) taken as one select-multiply: 1 flop per element (chainer-computational-cost PReLU).",
)
leaky_relu = _register(
    2,
    "leaky_relu leaky_relu_ rrelu rrelu_",
    "max(x, a * x): 2 flops per element, a multiply and a max (chainer-computational-cost LeakyReLU).",
)
sigmoid = _register(
    4,
    "sigmoid sigmoid_",
    "1 / (1 + exp(-x)): 4 flops per element: negate, exp, +1, inverse (chainer-computational-cost Sigmoid).",
)
tanh = _register(
    1,
    "tanh tanh_",
    "tanh(x): 1 flop per element, one elementary function (as exp in chainer-computational-cost).",
)
silu = _register(
    5,
    "silu silu_",
    "x * sigmoid(x): 5 flops per element (sigmoid 4, chainer-computational-cost, + multiply).",
)
hardsigmoid = _register(
    4,
    "hardsigmoid hardsigmoid_",
    "min(max(x + 3, 0), 6) / 6: 4 flops per element (add, max, min, divide).",
)
hardswish = _register(
    5,
    "hardswish hardswish_",
    "x * hardsigmoid(x): 5 flops per element (hardsigmoid 4 + multiply).",
)
hardtanh = _register(
    2,
    "hardtanh hardtanh_ relu6 relu6_",
    "min(max(x, lo), hi): 2 flops per element, a max and a min (chainer-computational-cost counts a max as 1).",
)
elu = _register(
    4,
    "elu elu_",
    "x > 0 ? x : alpha * (exp(x) - 1): 4 flops per element (exp, subtract, multiply, select).",
)
selu_celu = _register(
    5,
    "selu selu_ celu celu_",
    "selu: scale * elu(x); celu: max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): 5 flops per element.",
)
mish = _register(
    5,
    "mish mish_",
    "x * tanh(log(1 + exp(x))): 5 flops per element (exp, +1, log, tanh, multiply).",
)
log_sigmoid = _register(
    5,
    "log_sigmoid",
    "-log(1 + exp(-x)): 5 flops per element (negate, exp, +1, log, negate).",
)
clamp_one = _register(
    1,
    "clamp_min clamp_min_ clamp_max clamp_max_",
    "max(x, lo) or min(x, hi): 1 flop per element (chainer-computational-cost: a max is one instruction).",
)

# gelu(self, approximate): exact 0.5 * x * (1 + erf(x / sqrt(2))), or the tanh approximation
# 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
GELU_APPROXIMATE = 1
GELU_EXACT_FLOPS, GELU_TANH_FLOPS = 5, 9


@FLOPS.register("aten::gelu", "aten::gelu_")
def gelu(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """Exact: 5 flops per element (x / sqrt 2, erf, +1, * x, * 0.5). approximate="tanh": 9 (x^3 is 2, * 0.044715, + x, * sqrt(2/pi), tanh, +1, * x, * 0.5)."""
    approximate = const(inputs[GELU_APPROXIMATE]) if len(inputs) > GELU_APPROXIMATE else "none"
    if approximate not in ("none", "tanh"):
        raise ValueError(f"aten::gelu: unknown approximate={approximate!r}")
    return elementwise_flops(GELU_TANH_FLOPS if approximate == "tanh" else GELU_EXACT_FLOPS, outputs)


# softplus(self, beta, threshold) = log(1 + exp(beta * x)) / beta (x itself above threshold).
SOFTPLUS_BETA = 1


@FLOPS.register("aten::softplus")
def softplus(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """log(1 + exp(beta * x)) / beta: 3 flops per element when beta == 1 (exp, +1, log), 5 otherwise (+ scale in and out); the threshold test is ignored."""
    beta = const(inputs[SOFTPLUS_BETA]) if len(inputs) > SOFTPLUS_BETA else 1
    return elementwise_flops(3 if beta == 1 else 5, outputs)


# clamp(self, min, max) with Scalar or Tensor bounds; None for an absent bound.
CLAMP_MIN, CLAMP_MAX = 1, 2


@FLOPS.register("aten::clamp", "aten::clamp_", "aten::clip", "aten::clip_")
def clamp(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """min(max(x, lo), hi): 1 flop per element per bound given (a max or a min, chainer-computational-cost); fvcore ignores clamp."""
    bounds = sum(1 for i in (CLAMP_MIN, CLAMP_MAX) if len(inputs) > i and not _is_none(inputs[i]))
    return elementwise_flops(bounds, outputs)


def _is_none(spec: Spec) -> bool:
    return isinstance(spec, Const) and spec.known and spec.value is None


# [*, 2n, *] -> [*, n, *] = glu(x, dim): a * sigmoid(b) with a, b the halves of x along dim.
@FLOPS.register("aten::glu")
def glu(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """a * sigmoid(b) over the two halves of x: 5 flops per output element (sigmoid 4, chainer-computational-cost, + multiply)."""
    return elementwise_flops(5, outputs)
