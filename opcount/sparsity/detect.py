"""Measured sparsity: the pattern and level of a GEMM matrix's own exact zeros."""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from ..errors import OpcountValueError
from .gemm import padded, tile_sizes, tile_sums
from .patterns import DENSE, Sparsity

# A measured weight with fewer zeros than this runs dense: a trained model's stray exact zeros
# are not a pruning pattern, and CSR on vector units would make such a layer far slower.
MIN_MEASURED_LEVEL = 0.01
DETECT_BLOCKS = (32, 16, 8, 4, 2)
DETECT_GROUPS = (2, 4, 8, 16)


def detect_sparsity(
    matrix: torch.Tensor,
    *,
    min_level: float = MIN_MEASURED_LEVEL,
    blocks: Iterable[int] = DETECT_BLOCKS,
    groups: Iterable[int] = DETECT_GROUPS,
    block_density: float = 0.99,
    nm_fill: float = 0.9,
) -> Sparsity:
    """The pattern of a GEMM matrix's zeros (exact zeros).

    Dense below ``min_level`` zeros; else N:M when every group of m along the rows has at most
    n <= m/2 non-zeros and the groups hold at least ``nm_fill`` x n/m of all places (the smallest
    n/m among ``groups``, then the smallest m); else b x b blocks
    when the non-zero blocks are at least ``block_density`` full (the largest b among ``blocks``);
    else unstructured. The level of block and unstructured is measured.
    """
    if matrix.dim() != 2:
        raise OpcountValueError(f"expected a GEMM matrix, got shape {tuple(matrix.shape)}")
    nz = (matrix.detach() != 0).view(torch.uint8)
    rows, cols = nz.shape
    numel = rows * cols
    nnz = int(nz.sum(dtype=torch.int64))
    level = 1 - nnz / numel if numel else 0.0
    if level < min_level:
        return DENSE
    if nnz == 0:
        return Sparsity.unstructured(1.0)
    best: tuple[float, int, int] | None = None
    for m in sorted(set(groups)):
        if m < 2 or m > cols:
            continue
        # n <= m/2, and pruned N:M fills nearly every group (random zeros at a high level only look
        # like N:M): n <= nnz m / (fill numel). The fullest group holds at least the mean.
        highest = min(m // 2, math.floor(nnz * m / (nm_fill * numel)))
        if math.ceil(nnz / (rows * math.ceil(cols / m))) > highest:
            continue
        if _group_max(nz[:16], m) > highest:  # a few rows already break it (exact: max of a part <= max)
            continue
        n = _group_max(nz, m)
        if n <= highest and (best is None or (n / m, m) < (best[0], best[2])):
            best = (n / m, n, m)
    if best is not None:
        return Sparsity.nm(best[1], best[2])
    found: Sparsity | None = None
    failed: list[int] = []
    for b in sorted(set(blocks)):
        # b-blocks are made of aligned f-blocks when f divides b: if f failed, b fails too.
        if b < 2 or b > rows or b > cols or any(b % f == 0 for f in failed):
            continue
        head = nz[: max(32 // b, 1) * b]  # a cheap look at the first rows rejects unstructured weights
        if _kept_density(head, b) < block_density - 0.05:
            failed.append(b)
            continue
        kept = tile_sums(nz, b) > 0
        if nnz >= block_density * float(tile_sizes(rows, cols, b)[kept].sum()):
            found = Sparsity.block(b, 1 - int(kept.sum()) / kept.numel())
        else:
            failed.append(b)
    return found or Sparsity.unstructured(level)


def _group_max(nz: torch.Tensor, m: int) -> int:
    """The most non-zeros in a group of m consecutive places along a row."""
    return int(padded(nz, 1, m).reshape(nz.shape[0], -1, m).sum(-1, dtype=torch.int32).max())


def _kept_density(nz: torch.Tensor, b: int) -> float:
    """Non-zeros / places in the b x b tiles that hold a non-zero (1.0 when none does)."""
    kept = tile_sums(nz, b) > 0
    places = float(tile_sizes(nz.shape[0], nz.shape[1], b)[kept].sum())
    return float(nz.sum(dtype=torch.int64)) / places if places else 1.0
