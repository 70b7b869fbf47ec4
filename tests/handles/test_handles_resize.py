"""Resampling: one operation per input value taken, per output element (fvcore's convention)."""

import pytest

from opcount.handles import FLOPS
from tests.fixtures.specs import NONE, C, T, flops


@pytest.mark.parametrize(
    "op, out, per_output",
    [
        ("aten::upsample_nearest2d", (1, 256, 20, 20), 1),
        ("aten::upsample_nearest1d", (2, 4, 20), 1),
        ("aten::upsample_nearest3d", (2, 4, 8, 8, 8), 1),
        ("aten::_upsample_nearest_exact2d", (2, 4, 12, 12), 1),
        ("aten::upsample_linear1d", (2, 4, 20), 2),
        ("aten::upsample_bilinear2d", (1, 256, 33, 33), 4),
        ("aten::_upsample_bilinear2d_aa", (2, 4, 7, 7), 4),
        ("aten::upsample_bicubic2d", (2, 4, 12, 12), 16),
        ("aten::upsample_trilinear3d", (2, 4, 8, 8, 8), 8),
    ],
)
def test_upsample_per_output_element(op, out, per_output) -> None:
    n = 1
    for d in out:
        n *= d
    x = (*out[:2], *(max(d // 2, 1) for d in out[2:]))
    assert flops(op, [T(*x), C(out[2:]), C(False), NONE], [T(*out)]) == per_output * n


def test_grid_samplers() -> None:
    out = (2, 4, 5, 5)
    assert flops("aten::grid_sampler", [T(2, 4, 6, 6), T(2, 5, 5, 2), C(0), C(0), C(False)], [T(*out)]) == 4 * 200
    for mode, per in ((0, 4), (1, 1), (2, 16)):
        args = [T(2, 4, 6, 6), T(2, 5, 5, 2), C(mode), C(0), C(False)]
        assert flops("aten::grid_sampler_2d", args, [T(*out)]) == per * 200
    for mode, per in ((0, 8), (1, 1)):
        args = [T(1, 2, 4, 4, 4), T(1, 3, 3, 3, 3), C(mode), C(0), C(False)]
        assert flops("aten::grid_sampler_3d", args, [T(1, 2, 3, 3, 3)]) == per * 54
    with pytest.raises(ValueError, match="grid_sampler_3d"):
        flops("aten::grid_sampler_3d", [T(1, 2, 4, 4, 4), T(1, 3, 3, 3, 3), C(2), C(0), C(False)], [T(1, 2, 3, 3, 3)])


def test_fvcore_resize_handles_are_marked() -> None:
    for op in ("aten::upsample_nearest2d", "aten::upsample_bilinear2d", "aten::grid_sampler"):
        assert FLOPS.handles[op].fvcore
    assert not FLOPS.handles["aten::upsample_bicubic2d"].fvcore
