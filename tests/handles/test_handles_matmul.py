"""Matrix products against closed forms worked by hand: one multiply-add per (output, inner) pair."""

import pytest

from opcount.handles import FLOPS
from tests.fixtures.specs import NONE, C, T, flops


@pytest.mark.parametrize("n, m, p", [(2, 3, 4), (1, 1, 1), (64, 128, 32)])
def test_mm_and_addmm(n: int, m: int, p: int) -> None:
    assert flops("aten::mm", [T(n, m), T(m, p)], [T(n, p)]) == n * m * p
    assert flops("aten::addmm", [T(p), T(n, m), T(m, p), C(1), C(1)], [T(n, p)]) == n * m * p


def test_mm_values() -> None:
    assert flops("aten::mm", [T(2, 3), T(3, 4)], [T(2, 4)]) == 24
    assert flops("aten::addmm", [T(192), T(32, 64), T(64, 192), C(1), C(1)], [T(32, 192)]) == 393216


@pytest.mark.parametrize("b, n, m, p, expected", [(2, 3, 4, 5, 120), (8, 16, 16, 64, 131072), (1, 1, 7, 1, 7)])
def test_bmm_family(b: int, n: int, m: int, p: int, expected: int) -> None:
    assert flops("aten::bmm", [T(b, n, m), T(b, m, p)], [T(b, n, p)]) == expected
    assert flops("aten::baddbmm", [T(b, n, p), T(b, n, m), T(b, m, p), C(1), C(1)], [T(b, n, p)]) == expected
    assert flops("aten::addbmm", [T(n, p), T(b, n, m), T(b, m, p), C(1), C(1)], [T(n, p)]) == expected


def test_bmm_family_rejects_mismatched_shapes() -> None:
    with pytest.raises(ValueError, match="baddbmm"):
        flops("aten::baddbmm", [T(2, 3, 5), T(2, 3, 4), T(2, 5, 5), C(1), C(1)], [T(2, 3, 5)])


@pytest.mark.parametrize(
    "a, b, out, expected",
    [
        ((3,), (3,), (), 3),  # dot
        ((2, 3), (3,), (2,), 6),  # matrix @ vector
        ((3,), (3, 4), (4,), 12),  # vector @ matrix
        ((5, 2, 3), (3, 4), (5, 2, 4), 120),  # batched @ matrix
        ((5, 1, 2, 3), (6, 3, 4), (5, 6, 2, 4), 5 * 6 * 2 * 3 * 4),  # broadcast batch
        ((2, 16, 4, 8), (2, 16, 8, 4), (2, 16, 4, 4), 2 * 16 * 4 * 8 * 4),
    ],
)
def test_matmul_broadcasting_and_vectors(a, b, out, expected) -> None:
    assert flops("aten::matmul", [T(*a), T(*b)], [T(*out)]) == expected


@pytest.mark.parametrize("x, out_features, expected", [((4, 10), 20, 800), ((2, 16, 64), 192, 393216), ((7,), 3, 21)])
def test_linear(x, out_features, expected) -> None:
    in_features = x[-1]
    out = (*x[:-1], out_features)
    assert flops("aten::linear", [T(*x), T(out_features, in_features), NONE], [T(*out)]) == expected


def test_vector_products() -> None:
    assert flops("aten::mv", [T(5, 7), T(7)], [T(5)]) == 35
    assert flops("aten::addmv", [T(5), T(5, 7), T(7), C(1), C(1)], [T(5)]) == 35
    assert flops("aten::dot", [T(9), T(9)], [T()]) == 9
    assert flops("aten::vdot", [T(4), T(4)], [T()]) == 4
    assert flops("aten::outer", [T(3), T(4)], [T(3, 4)]) == 12
    assert flops("aten::ger", [T(2), T(6)], [T(2, 6)]) == 12


def test_tensordot() -> None:
    # [2,3,4] x [3,4,5] contracting (1,2) with (0,1): out [2,5], 12 MACs per output element
    assert flops("aten::tensordot", [T(2, 3, 4), T(3, 4, 5), C((1, 2)), C((0, 1))], [T(2, 5)]) == 2 * 5 * 12


def test_matmul_family_is_multiply_adds() -> None:
    for op in (
        "aten::mm",
        "aten::bmm",
        "aten::baddbmm",
        "aten::addbmm",
        "aten::matmul",
        "aten::linear",
        "aten::mv",
        "aten::addmv",
        "aten::dot",
        "aten::outer",
        "aten::tensordot",
        "aten::einsum",
    ):
        assert FLOPS.handles[op].macs, op
