"""Reductions: chainer-computational-cost's axis-by-axis count, which telescopes to numel(in) - numel(out)."""

import pytest

from tests.fixtures.specs import NONE, C, T, flops


def test_chainer_computational_cost_max_over_two_axes() -> None:
    # chainer-computational-cost: (A, B, C, D) max over (1, 2) = (B-1)ACD + (C-1)AD; with (2, 3, 4, 5): 80 + 30
    assert flops("aten::amax", [T(2, 3, 4, 5), C((1, 2)), C(False)], [T(2, 5)]) == 110
    assert 2 * 3 * 4 * 5 - 2 * 5 == 110


@pytest.mark.parametrize(
    "op, inputs, outputs, expected",
    [
        ("aten::sum", [T(2, 32), C((-1,)), C(True), NONE], [T(2, 1)], 62),
        ("aten::sum", [T(4, 5), NONE], [T()], 19),
        ("aten::mean", [T(2, 16, 64), C((-1,)), C(True), NONE], [T(2, 16, 1)], 2048),
        ("aten::max", [T(6)], [T()], 5),
        ("aten::max", [T(4, 5), C(1), C(False)], [T(4), T(4, dtype="int64")], 16),
        ("aten::min", [T(4, 5), T(4, 5)], [T(4, 5)], 20),  # binary min is elementwise
        ("aten::argmax", [T(2, 7), C(-1), C(False)], [T(2, dtype="int64")], 12),
        ("aten::prod", [T(3, 4), C(1), C(False), NONE], [T(3)], 9),
        ("aten::var", [T(4, 8), C((1,)), C(True), C(False)], [T(4)], 4 * 32),
        ("aten::std", [T(4, 8), C((1,)), NONE, C(False)], [T(4)], 4 * 32 + 4),
        ("aten::var_mean", [T(4, 8), C((1,)), C(True), C(False)], [T(4), T(4)], 4 * 32),
        ("aten::linalg_vector_norm", [T(64, 32), C(2.0), C((-1,)), C(True), NONE], [T(64, 1)], 2 * 2048),
        ("aten::linalg_vector_norm", [T(64, 32), C(1), C((-1,)), C(True), NONE], [T(64, 1)], 2 * 2048 - 64),
        ("aten::linalg_vector_norm", [T(64, 32), C(3), C((-1,)), C(True), NONE], [T(64, 1)], 3 * 2048),
        ("aten::norm", [T(10), C(2)], [T()], 20),
        ("aten::frobenius_norm", [T(3, 4), C((0, 1)), C(False)], [T()], 24),
        ("aten::logsumexp", [T(3, 4), C((1,)), C(False)], [T(3)], 48),
        ("aten::cumsum", [T(2, 5), C(1), NONE], [T(2, 5)], 8),
        ("aten::cumsum", [T(2, 5), C(0), NONE], [T(2, 5)], 5),
        # diff along the 5: 4 subtractions per row; twice: 4 + 3; with a column prepended: 5
        ("aten::diff", [T(2, 5), C(1), C(-1), NONE, NONE], [T(2, 4)], 8),
        ("aten::diff", [T(2, 5), C(2), C(-1), NONE, NONE], [T(2, 3)], 14),
        ("aten::diff", [T(2, 5), C(1), C(1), T(2, 1), NONE], [T(2, 5)], 10),
        ("aten::diff", [T(3, 4), C(1), C(0), NONE, NONE], [T(2, 4)], 8),
    ],
)
def test_reductions(op, inputs, outputs, expected) -> None:
    assert flops(op, inputs, outputs) == expected


def test_integer_reductions_are_free() -> None:
    assert flops("aten::sum", [T(100, dtype="bool"), NONE], [T(dtype="int64")]) == 0
    assert flops("aten::cumsum", [T(10, dtype="int64"), C(0), NONE], [T(10, dtype="int64")]) == 0
    assert flops("aten::diff", [T(1, 9, dtype="int64"), C(1), C(-1), NONE, NONE], [T(1, 8, dtype="int64")]) == 0
