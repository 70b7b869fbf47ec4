"""Storage formats of a sparse weight (dense, CSR, BSR, N:M) and their bytes; pure arithmetic.

Formats as in the Sparsity Roofline paper (Shinn et al., sections 3.2 and 5.3): CSR keeps ``nnz``
values, ``nnz`` column indices and ``rows + 1`` row pointers; BSR keeps whole b x b blocks (zeros
inside a kept block included), a block-column index per block and ``ceil(rows / b) + 1`` block-row
pointers; N:M keeps ``N`` values per group of ``M`` with a ``ceil(log2 M)``-bit position each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import OpcountValueError
from .patterns import Sparsity


@dataclass(frozen=True)
class Format:
    """A weight as stored: ``values`` stored (zeros inside kept blocks or N:M groups included) and
    the bytes of values and of index data."""

    name: str
    values: int
    value_bytes: float
    index_bytes: float

    @property
    def bytes(self) -> float:
        return self.value_bytes + self.index_bytes


def dense_format(rows: int, cols: int, value_size: float = 4) -> Format:
    return Format("dense", rows * cols, rows * cols * value_size, 0.0)


def csr_format(rows: int, cols: int, nnz: int, value_size: float = 4, index_size: float = 4) -> Format:
    """CSR: nnz values + nnz column indices + (rows + 1) row pointers."""
    _check_nnz(nnz, rows * cols)
    return Format("csr", nnz, nnz * value_size, (nnz + rows + 1) * index_size)


def bsr_format(rows: int, cols: int, block: int, blocks: int, value_size: float = 4, index_size: float = 4) -> Format:
    """BSR with b x b blocks: blocks x b^2 values + blocks block-column indices + (ceil(rows/b) + 1)
    block-row pointers. Edge blocks of a size not divisible by b are stored whole (padded)."""
    _check_nnz(blocks, math.ceil(rows / block) * math.ceil(cols / block))
    values = blocks * block * block
    return Format("bsr", values, values * value_size, (blocks + math.ceil(rows / block) + 1) * index_size)


def nm_format(rows: int, cols: int, n: int, m: int, value_size: float = 4) -> Format:
    """N:M: n values per group of m along each row (a last partial group keeps min(n, its size)),
    each with a ceil(log2 m)-bit position in its group; the bits are rounded up to whole bytes."""
    full, rest = divmod(cols, m)
    values = rows * (full * n + min(n, rest))
    bits = values * math.ceil(math.log2(m))
    return Format(f"{n}:{m}", values, values * value_size, float(math.ceil(bits / 8)))


def storage(sparsity: Sparsity, rows: int, cols: int, value_size: float = 4, index_size: float = 4) -> Format:
    """The format a weight of ``sparsity`` is stored in (dense, CSR, BSR or N:M) and its bytes."""
    numel = rows * cols
    if sparsity.pattern == "dense":
        return dense_format(rows, cols, value_size)
    if sparsity.pattern == "unstructured":
        return csr_format(rows, cols, round((1 - sparsity.level) * numel), value_size, index_size)
    if sparsity.pattern == "block":
        b = sparsity.block_size
        total = math.ceil(rows / b) * math.ceil(cols / b)
        return bsr_format(rows, cols, b, round((1 - sparsity.level) * total), value_size, index_size)
    return nm_format(rows, cols, sparsity.n, sparsity.m, value_size)


def _check_nnz(count: int, most: int) -> None:
    if not 0 <= count <= most:
        raise OpcountValueError(f"{count} non-zeros do not fit in {most} places")
