"""F.unfold (im2col) and F.fold (col2im): closed forms worked by hand, on both tracers.

col2im sums each column value into its image position: 1 add per value that lands inside the
image; a value that falls on padding is dropped and costs nothing. im2col is a copy: 0 flops.
Bytes: both read their input once and write their output once (float32: 4 bytes an element).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from opcount import FlopCountAnalysis, MemoryTrafficAnalysis
from opcount.handles import FLOPS
from tests.fixtures.specs import C, T, flops

TRACERS = [("jit", None), ("dispatch", None), ("dispatch", "meta")]


def _col2im(x: tuple[int, ...], out: tuple[int, ...], k: int, d: int = 1, p: int = 0, s: int = 1) -> int:
    args = [T(*x), C(out[-2:]), C((k, k)), C((d, d)), C((p, p)), C((s, s))]
    return flops("aten::col2im", args, [T(*out)])


def test_col2im_without_padding_adds_every_value() -> None:
    # 4x4 image, 2x2 kernel, stride 2: 2x2 = 4 blocks, no overlap: each of the 2*3*4*4 values lands once
    assert _col2im((2, 3 * 4, 4), (2, 3, 4, 4), k=2, s=2) == 2 * 3 * 4 * 4
    # 3x3 kernel, stride 1 on 5x5: 3x3 = 9 blocks of 9 values, overlapping: still one add each, 2 * 9 * 9
    assert _col2im((1, 2 * 9, 9), (1, 2, 5, 5), k=3) == 2 * 9 * 9


def test_col2im_drops_values_on_padding() -> None:
    # 6x6, k 3, padding 1, stride 2: 3 blocks a dimension at rows 2*l - 1 + i (l in 0..2, i in 0..2):
    # i=0 -> -1, 1, 3 (2 inside); i=1 -> 0, 2, 4 (3); i=2 -> 1, 3, 5 (3): 8 of 9 a dimension, 64 of 81
    assert _col2im((2, 4 * 9, 9), (2, 4, 6, 6), k=3, p=1, s=2) == 2 * 4 * 64
    # VOLO's outlook fold on a 28x28 map: k 3, padding 1, stride 2 -> 14 blocks a dimension; only
    # block 0's first offset (row -1) is off the image: 41 of 42 a dimension
    assert _col2im((1, 192 * 9, 14 * 14), (1, 192, 28, 28), k=3, p=1, s=2) == 192 * 41 * 41


def test_col2im_dilation_and_unbatched_input() -> None:
    # 5x5, k 2, dilation 2, padding 1, stride 1: blocks (5 + 2 - 2 - 1) + 1 = 5 a dimension, at
    # l - 1 + 2i: i=0 -> -1..3 (4 inside), i=1 -> 1..5 (4 inside): 8 of 10 a dimension
    assert _col2im((3 * 4, 25), (3, 5, 5), k=2, d=2, p=1) == 3 * 8 * 8


def test_col2im_refuses_columns_that_do_not_fit_the_output() -> None:
    with pytest.raises(ValueError, match="col2im: input"):
        _col2im((1, 10, 9), (1, 2, 6, 6), k=3, p=1, s=2)  # 10 rows are not c * 9


def test_im2col_is_free() -> None:
    assert "aten::im2col" in FLOPS.zero


class FoldUnfold(nn.Module):
    """VOLO's pattern: unfold the map into blocks, fold them back (overlapping blocks summed)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cols = F.unfold(x, 3, padding=1, stride=2)  # [2, 4*9, 9]
        return F.fold(cols, (6, 6), 3, padding=1, stride=2)  # [2, 4, 6, 6]


@pytest.mark.parametrize(("tracer", "device"), TRACERS)
def test_fold_and_unfold_traced(tracer: str, device: str | None) -> None:
    x = torch.randn(2, 4, 6, 6)
    analysis = FlopCountAnalysis(FoldUnfold(), x, tracer=tracer, device=device)
    assert dict(analysis.by_operator()) == {"col2im": 2 * 4 * 64}  # as worked above; im2col free
    assert dict(analysis.unsupported_ops()) == {}
    memory = MemoryTrafficAnalysis(FoldUnfold(), x, tracer=tracer, device=device)
    image, cols = 2 * 4 * 6 * 6 * 4, 2 * 36 * 9 * 4  # bytes
    assert memory.by_operator(kind="read") == {"im2col": image, "col2im": cols}
    assert memory.by_operator(kind="write") == {"im2col": cols, "col2im": image}
