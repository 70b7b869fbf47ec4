"""Pooling: chainer-computational-cost (max: prod(k) - 1 per output, average: prod(k) per output); adaptive: per input."""

import pytest

from tests.fixtures.specs import C, T, flops


def test_max_pool2d_resnet_stem() -> None:
    # 3x3 stride 2 on 1x64x112x112 -> 56x56: 8 maxes per output
    args = [T(1, 64, 112, 112), C((3, 3)), C((2, 2)), C((1, 1)), C((1, 1)), C(False)]
    assert flops("aten::max_pool2d", args, [T(1, 64, 56, 56)]) == 64 * 56 * 56 * 8


def test_chainer_computational_cost_published_example() -> None:
    # chainer-computational-cost's own test: 1x3x100x100, 2x2 window -> 3x50x50 outputs
    max_args = [T(1, 3, 100, 100), C((2, 2)), C((2, 2)), C((0, 0)), C((1, 1)), C(False)]
    assert flops("aten::max_pool2d", max_args, [T(1, 3, 50, 50)]) == (3 * 50 * 50) * (2 * 2 - 1)
    avg_args = [T(1, 3, 100, 100), C((2, 2)), C((2, 2)), C((0, 0)), C(False), C(True), C(None)]
    assert flops("aten::avg_pool2d", avg_args, [T(1, 3, 50, 50)]) == (3 * 50 * 50) * (2 * 2)


@pytest.mark.parametrize(
    "op, x, kernel, out, expected",
    [
        ("aten::max_pool1d", (2, 4, 10), (2,), (2, 4, 5), 40 * 1),
        ("aten::max_pool3d", (2, 4, 4, 4, 4), (2, 2, 2), (2, 4, 2, 2, 2), 64 * 7),
        ("aten::max_pool2d_with_indices", (1, 2, 6, 6), (2, 2), (1, 2, 3, 3), 18 * 3),
        ("aten::max_pool2d", (1, 2, 6, 6), (3,), (1, 2, 2, 2), 8 * 8),  # one size for both dims
        ("aten::avg_pool1d", (2, 4, 10), (2,), (2, 4, 5), 40 * 2),
        ("aten::avg_pool3d", (2, 4, 4, 4, 4), (2, 2, 2), (2, 4, 2, 2, 2), 64 * 8),
    ],
)
def test_pool_shapes(op, x, kernel, out, expected) -> None:
    args = [T(*x), C(kernel), C(kernel), C((0,) * len(kernel)), C((1,) * len(kernel)), C(False)]
    assert flops(op, args, [T(*out)]) == expected


def test_adaptive_pools() -> None:
    # fvcore: adaptive_avg_pool2d costs one add per input element
    assert flops("aten::adaptive_avg_pool2d", [T(1, 512, 7, 7), C((1, 1))], [T(1, 512, 1, 1)]) == 512 * 49
    assert flops("aten::adaptive_avg_pool1d", [T(2, 4, 10), C((2,))], [T(2, 4, 2)]) == 80
    assert flops("aten::adaptive_avg_pool3d", [T(2, 4, 4, 4, 4), C((2, 2, 2))], [T(2, 4, 2, 2, 2)]) == 512
    # max: numel(in) - numel(out) comparisons
    assert flops("aten::adaptive_max_pool2d", [T(1, 8, 6, 6), C((2, 2))], [T(1, 8, 2, 2), T(1, 8, 2, 2)]) == 288 - 32
    assert flops("aten::adaptive_max_pool1d", [T(2, 4, 10), C((5,))], [T(2, 4, 5), T(2, 4, 5)]) == 40


def test_bad_kernel_fails_loudly() -> None:
    with pytest.raises(ValueError, match="max_pool2d"):
        flops(
            "aten::max_pool2d",
            [T(1, 2, 6, 6), C((2, 2, 2)), C((2, 2)), C((0, 0)), C((1, 1)), C(False)],
            [T(1, 2, 3, 3)],
        )
