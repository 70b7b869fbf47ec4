"""Normalizations: fvcore's per-element conventions (kept as fvcore has them) and rms_norm."""

import pytest

from opcount.handles import FLOPS
from tests.fixtures.specs import NONE, C, T, flops


def _bn(x, affine=True, training=False):
    c = x[1]
    w = T(c) if affine else NONE
    return [T(*x), w, w, T(c), T(c), C(training), C(0.1), C(1e-5), C(True)]


@pytest.mark.parametrize("x", [(1, 64, 112, 112), (4, 16, 8), (2, 3, 4, 5, 6)])
def test_batch_norm_fvcore_values(x) -> None:
    n = 1
    for d in x:
        n *= d
    assert flops("aten::batch_norm", _bn(x), [T(*x)]) == 2 * n
    assert flops("aten::batch_norm", _bn(x, affine=False), [T(*x)]) == n
    assert flops("aten::batch_norm", _bn(x, training=True), [T(*x)]) == 5 * n
    assert flops("aten::batch_norm", _bn(x, affine=False, training=True), [T(*x)]) == 4 * n
    # the native forms count alike
    assert flops("aten::native_batch_norm", _bn(x)[:8], [T(*x), T(x[1]), T(x[1])]) == 2 * n
    legit_eval = [T(*x), T(x[1]), T(x[1]), T(x[1]), T(x[1]), C(0.1), C(1e-5)]
    assert flops("aten::_native_batch_norm_legit_no_training", legit_eval, [T(*x)]) == 2 * n


def test_layer_group_instance_norm() -> None:
    x = (2, 16, 64)
    assert flops("aten::layer_norm", [T(*x), C((64,)), T(64), T(64), C(1e-5), C(True)], [T(*x)]) == 5 * 2048
    assert flops("aten::layer_norm", [T(*x), C((64,)), NONE, NONE, C(1e-5), C(True)], [T(*x)]) == 4 * 2048
    assert flops("aten::native_layer_norm", [T(*x), C((64,)), T(64), T(64), C(1e-5)], [T(*x)]) == 5 * 2048
    y = (1, 256, 10, 10)
    assert flops("aten::group_norm", [T(*y), C(32), T(256), T(256), C(1e-5), C(True)], [T(*y)]) == 5 * 25600
    assert (
        flops("aten::native_group_norm", [T(*y), T(256), T(256), C(1), C(256), C(100), C(32), C(1e-5)], [T(*y)])
        == 5 * 25600
    )
    z = (2, 3, 8, 8)
    assert (
        flops("aten::instance_norm", [T(*z), NONE, NONE, NONE, NONE, C(True), C(0.1), C(1e-5), C(True)], [T(*z)])
        == 4 * 384
    )


@pytest.mark.parametrize(
    "x, affine, expected", [((2, 5, 8), True, 4 * 80), ((2, 5, 8), False, 3 * 80), ((3, 7), True, 84)]
)
def test_rms_norm(x, affine, expected) -> None:
    w = T(x[-1]) if affine else NONE
    assert flops("aten::rms_norm", [T(*x), C((x[-1],)), w, NONE], [T(*x)]) == expected


def test_fvcore_norms_are_marked() -> None:
    for op in ("aten::batch_norm", "aten::group_norm", "aten::layer_norm", "aten::instance_norm"):
        assert FLOPS.handles[op].fvcore
    assert not FLOPS.handles["aten::rms_norm"].fvcore
