"""Elementwise arithmetic: a fixed number of flops per output element.

Convention (chainer-computational-cost): an elementwise operator costs its number of
elementary operations per output element; broadcasting is free and the output is the broadcast
shape. Each elementary function (exp, log, sqrt, rsqrt, sin, erf, ...) counts as one flop, as
chainer counts ``exp`` in softmax and sigmoid. In-place variants (``add_``) cost what their
out-of-place form costs. Arithmetic on integer or bool tensors (indices, sizes, masks) and on
plain Python numbers is index calculation, which chainer-computational-cost ignores: it costs 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ir import Spec, TensorSpec
from ._shapes import is_floating
from .registry import FLOPS, SpecFn


def elementwise_flops(per_element: int, outputs: Sequence[Spec]) -> int:
    """``per_element * numel(out)`` for a floating-point tensor output, else 0 (index math)."""
    out = next((o for o in outputs if isinstance(o, TensorSpec)), None)
    if out is None or not is_floating(out):
        return 0
    return per_element * out.numel


def per_element_handle(per_element: int, doc: str, module: str = __name__) -> SpecFn:
    """A handle costing ``per_element`` flops per output element; ``doc`` becomes its docstring.

    ``module`` is the family module that registers it (the registry names the family after it).
    """

    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
        return elementwise_flops(per_element, outputs)

    handle.__doc__ = doc
    handle.__module__ = module
    handle.__qualname__ = handle.__name__ = f"per_element_{per_element}"
    return handle


def _register(per_element: int, ops: str, doc: str) -> Callable[..., object]:
    names = tuple("aten::" + op for op in ops.split())
    return FLOPS.register(*names)(per_element_handle(per_element, doc))


# out = add(self, other, alpha) / sub / mul / div / rsub(self, other, alpha): one add,
# subtract, multiply or divide per output element; alpha is fused (chainer-computational-cost: Add, Mul, Div, Sub
# and their *Constant forms all cost numel(out)).
arithmetic = _register(
    1,
    """add add_ sub sub_ subtract subtract_ mul mul_ multiply multiply_ div div_ divide divide_
    true_divide true_divide_ rsub""",
    "out = op(self, other, alpha=1): 1 flop per output element (broadcast shape). "
    "chainer-computational-cost (Add/Sub/Mul/Div): (N-1) * numel(out) for N operands; alpha fused; integer and "
    "bool tensors (index math) cost 0.",
)

# out = op(self): one elementary function or operation per element.
unary_math = _register(
    1,
    """neg neg_ negative abs abs_ reciprocal reciprocal_ square sqrt sqrt_ rsqrt rsqrt_
    exp exp_ exp2 exp2_ expm1 expm1_ log log_ log2 log2_ log10 log10_ log1p log1p_
    sin sin_ cos cos_ tan tan_ asin asin_ acos acos_ atan atan_ sinh sinh_ cosh cosh_
    asinh asinh_ acosh acosh_ atanh atanh_ erf erf_ erfc erfc_ erfinv erfinv_""",
    "out = f(x): 1 flop per element: one elementary function (exp, log, sqrt, rsqrt, sin, erf, "
    "...) or negation/absolute value/reciprocal/square. chainer-computational-cost counts exp as 1 flop.",
)

# out = pow(self, exponent) (Tensor_Scalar, Tensor_Tensor, Scalar overloads) and two-operand
# math functions.
binary_math = _register(
    1,
    """pow pow_ float_power maximum minimum fmax fmin atan2 atan2_ hypot xlogy copysign""",
    "out = f(a, b): 1 flop per output element (broadcast shape): one power, max/min, atan2 or "
    "hypot. chainer-computational-cost counts a max as one instruction.",
)

# out = addcmul(self, t1, t2, value) = self + value * t1 * t2; addcdiv likewise with t1 / t2.
fused_two = _register(
    2,
    "addcmul addcmul_ addcdiv addcdiv_",
    "out = self + value * (t1 * t2) (or t1 / t2): 2 flops per output element (multiply or "
    "divide, then add; value fused).",
)

# out = lerp(start, end, weight) = start + weight * (end - start).
lerp = _register(
    3,
    "lerp lerp_",
    "out = start + weight * (end - start): 3 flops per output element (subtract, multiply, add).",
)

# where.self(condition, self, other) -> [*]; where(condition) -> indices (a nonzero, no arithmetic).
WHERE_SELF = 1


@FLOPS.register("aten::where")
def where(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """out = where(cond, a, b): 1 flop per output element, a select (chainer-computational-cost counts max, a select, as one instruction); where(cond) alone returns indices: 0."""
    if len(inputs) <= WHERE_SELF:
        return 0
    return elementwise_flops(1, outputs)


# self.index_add_(dim, index, source, alpha) / scatter_add_(dim, index, src): self[index] += source
@FLOPS.register("aten::index_add", "aten::index_add_", "aten::scatter_add", "aten::scatter_add_")
def accumulate(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """``self[index] += source`` (``index_add``, ``scatter_add``; a mixture-of-experts block sums its
    experts' outputs this way): 1 flop per source element, alpha fused; integer tensors cost 0."""
    *_, source = (i for i in inputs if isinstance(i, TensorSpec))
    return source.numel if is_floating(source) else 0
