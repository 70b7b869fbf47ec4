"""Elementwise arithmetic, activations and softmax against chainer-computational-cost's per-element counts."""

import pytest

from tests.fixtures.specs import NONE, C, T, flops

X = (2, 3, 4)  # 24 elements


@pytest.mark.parametrize(
    "op, inputs, per_element",
    [
        ("aten::add", [T(*X), T(*X), C(1)], 1),
        ("aten::add_", [T(*X), T(1, 3, 4), C(1)], 1),
        ("aten::sub", [T(*X), C(1.0), C(1)], 1),
        ("aten::mul", [T(*X), T()], 1),
        ("aten::div", [T(*X), T(2, 1, 1)], 1),
        ("aten::rsub", [T(*X), C(1.0), C(1)], 1),
        ("aten::pow", [T(*X), C(2)], 1),
        ("aten::sqrt", [T(*X)], 1),
        ("aten::rsqrt", [T(*X)], 1),
        ("aten::exp", [T(*X)], 1),
        ("aten::log", [T(*X)], 1),
        ("aten::neg", [T(*X)], 1),
        ("aten::abs", [T(*X)], 1),
        ("aten::erf", [T(*X)], 1),
        ("aten::sin", [T(*X)], 1),
        ("aten::addcmul", [T(*X), T(*X), T(*X), C(1)], 2),
        ("aten::lerp", [T(*X), T(*X), C(0.5)], 3),
        ("aten::where", [T(*X, dtype="bool"), T(*X), T(*X)], 1),
        # activations
        ("aten::relu", [T(*X)], 1),
        ("aten::relu_", [T(*X)], 1),
        ("aten::prelu", [T(*X), T(1)], 1),
        ("aten::leaky_relu", [T(*X), C(0.01)], 2),
        ("aten::sigmoid", [T(*X)], 4),
        ("aten::tanh", [T(*X)], 1),
        ("aten::silu_", [T(*X)], 5),
        ("aten::hardsigmoid", [T(*X)], 4),
        ("aten::hardswish_", [T(*X)], 5),
        ("aten::hardtanh_", [T(*X), C(0.0), C(6.0)], 2),
        ("aten::relu6", [T(*X)], 2),
        ("aten::elu", [T(*X), C(1.0), C(1), C(1)], 4),
        ("aten::selu", [T(*X)], 5),
        ("aten::celu", [T(*X), C(1.0)], 5),
        ("aten::mish", [T(*X)], 5),
        ("aten::log_sigmoid", [T(*X)], 5),
        ("aten::gelu", [T(*X), C("none")], 5),
        ("aten::gelu", [T(*X), C("tanh")], 9),
        ("aten::softplus", [T(*X), C(1), C(20)], 3),
        ("aten::softplus", [T(*X), C(2.0), C(20)], 5),
        ("aten::clamp", [T(*X), C(0.0), C(1.0)], 2),
        ("aten::clamp_", [T(*X), NONE, C(1.0)], 1),
        ("aten::clamp", [T(*X), T(*X), NONE], 1),
        ("aten::clamp_min", [T(*X), C(1e-12)], 1),
        ("aten::maximum", [T(*X), T(*X)], 1),
    ],
)
def test_per_element_costs(op, inputs, per_element) -> None:
    assert flops(op, inputs, [T(*X)]) == per_element * 24


def test_broadcast_output_is_counted() -> None:
    # [4] + [3, 1] -> [3, 4]: 12 adds (chainer-computational-cost: the output is the broadcast size)
    assert flops("aten::add", [T(4), T(3, 1), C(1)], [T(3, 4)]) == 12


def test_integer_and_python_number_arithmetic_is_free() -> None:
    assert flops("aten::add", [T(5, dtype="int64"), T(5, dtype="int64"), C(1)], [T(5, dtype="int64")]) == 0
    assert flops("aten::mul", [T(dtype="int64"), C(2)], [T(dtype="int64")]) == 0
    assert flops("aten::sub", [C(3), C(1)], [C(2)]) == 0
    # a float result of integer inputs is floating-point work
    assert flops("aten::div", [T(5, dtype="int64"), T(5, dtype="int64")], [T(5)]) == 5


def test_where_with_only_a_condition_is_an_index_lookup() -> None:
    assert flops("aten::where", [T(10, dtype="bool")], [T(3, 1, dtype="int64")]) == 0


def test_glu_counts_the_halved_output() -> None:
    # glu([2, 8], dim=1) -> [2, 4]: sigmoid (4) and multiply (1) per output
    assert flops("aten::glu", [T(2, 8), C(1)], [T(2, 4)]) == 8 * 5


@pytest.mark.parametrize("shape, dim, c", [((2, 4, 16, 16), -1, 16), ((150, 91), 1, 91), ((8, 3, 5), 1, 3)])
def test_softmax_chainer_computational_cost(shape, dim, c) -> None:
    n = 1
    for d in shape:
        n *= d
    s = n // c
    # exp per element, (c - 1) adds per position, a divide per element
    assert flops("aten::softmax", [T(*shape), C(dim), NONE], [T(*shape)]) == 2 * n + s * (c - 1)
    assert flops("aten::_softmax", [T(*shape), C(dim), C(False)], [T(*shape)]) == 2 * n + s * (c - 1)
    # log_softmax: exp, sum, log per position, subtract per element: 2n + s*c = 3n
    assert flops("aten::log_softmax", [T(*shape), C(dim), NONE], [T(*shape)]) == 3 * n


def test_softmax_values() -> None:
    assert flops("aten::softmax", [T(1, 10), C(1), NONE], [T(1, 10)]) == 29
    with pytest.raises(ValueError, match="softmax"):
        flops("aten::softmax", [T(1, 10), C(2), NONE], [T(1, 10)])
