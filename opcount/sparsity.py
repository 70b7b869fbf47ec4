"""The Sparsity Roofline (seed 003): what sparse weights could buy at the speed of light.

Every *weight layer* (a linear, a convolution, or a matrix product with a parameter operand)
is seen as a GEMM ``out[rows, N] = W[rows, cols] @ in[cols, N]``: ``rows`` are output features,
``cols`` the reduction, and ``N`` the output positions the weight is applied to (batch x tokens
for a linear, batch x output pixels for a convolution). A sparse weight ``W`` is stored in a
format and costs

    FLOPs  = stored values x N x 2                       (2 per multiply-add, as peaks are quoted)
    bytes  = format bytes of W + input and output features (unchanged by pruning)
    time   = max(FLOPs / peak(unit), bytes / bandwidth)  (speed of light, opcount.roofline)

and the model's speedup is the sum of dense times over the sum of sparse times (layers without
a weight keep their dense time).

Formats (seed 003, section 3.2 and 5.3):

- **unstructured -> CSR**: ``nnz`` values, ``nnz`` column indices, ``rows + 1`` row pointers;
  runs on the vector unit (general sparse kernels cannot feed tensor units).
- **block b x b -> BSR**: ``blocks x b x b`` values (zeros inside a kept block are stored),
  ``blocks`` block-column indices, ``ceil(rows / b) + 1`` block-row pointers; the tiles are
  dense, so it runs on the unit the dense layer uses (tensor where there is one).
- **N:M**: ``N`` values kept in every group of ``M`` along the reduction, each with a
  ``ceil(log2 M)``-bit position; runs on the tensor unit where the hardware supports that
  pattern (:data:`SPARSE_SUPPORT`), stored as the supported pattern it fits in (1:4 weights on
  2:4 hardware store 2 values per 4). Elsewhere it runs as unstructured CSR.

The GEMM view of a convolution weight ``[K, C, kh, kw]`` orders the reduction as
``(kh, kw, C)`` (implicit GEMM on channels-last data), so N:M groups and blocks run along input
channels, as NVIDIA's 2:4 pruning tools lay them out.
"""

from __future__ import annotations

import copy
import fnmatch
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from .hardware import TENSOR, VECTOR, Hardware
from .hardware import hardware as lookup_hardware
from .ir import DTYPE_BYTES, OpCall, TensorSpec
from .memory import MemoryTrafficAnalysis
from .roofline import FLOPS_PER_MAC, LayerTime, RooflineReport, Summary, roofline, speed_of_light
from .units import seconds, si, size

if TYPE_CHECKING:
    from .sparsity_plot import SparsityPoint

__all__ = [
    "MEASURED",
    "SPARSE_SUPPORT",
    "Format",
    "SparseLayer",
    "SparseSupport",
    "Sparsity",
    "SparsityReport",
    "bsr_format",
    "csr_format",
    "dense_format",
    "detect_sparsity",
    "gemm_view",
    "nm_format",
    "parse_sparsity_args",
    "prune",
    "sparsity_roofline",
    "storage",
]

PATTERNS = ("dense", "unstructured", "block", "nm")
MEASURED = "measured"
# A measured weight with fewer zeros than this runs dense: a trained model's stray exact zeros
# are not a pruning pattern, and CSR on vector units would make such a layer far slower.
MIN_MEASURED_LEVEL = 0.01
DETECT_BLOCKS = (32, 16, 8, 4, 2)
DETECT_GROUPS = (2, 4, 8, 16)


# ================================================================================================
# Sparsity patterns
# ================================================================================================
@dataclass(frozen=True)
class Sparsity:
    """A weight's sparsity pattern and level (the fraction of zeros).

    Build with :meth:`unstructured`, :meth:`block`, :meth:`nm`, :data:`DENSE` or :meth:`parse`
    (``"dense"``, ``"unstructured=0.9"``, ``"block16=87.5%"``, ``"2:4"``). For N:M the level is
    ``1 - n / m``.
    """

    pattern: str
    level: float = 0.0
    block_size: int = 1
    n: int = 0
    m: int = 0

    def __post_init__(self) -> None:
        if self.pattern not in PATTERNS:
            raise ValueError(f"unknown sparsity pattern {self.pattern!r}; choose one of {', '.join(PATTERNS)}")
        if self.pattern == "nm":
            if not (isinstance(self.n, int) and isinstance(self.m, int) and 1 <= self.n <= self.m and self.m >= 2):
                raise ValueError(f"N:M needs integers 1 <= N <= M, M >= 2; got {self.n}:{self.m}")
            object.__setattr__(self, "level", 1 - self.n / self.m)
        elif self.pattern == "dense":
            object.__setattr__(self, "level", 0.0)
        if not (isinstance(self.level, (int, float)) and 0.0 <= self.level <= 1.0):
            raise ValueError(f"sparsity level must be a fraction of zeros in [0, 1], got {self.level!r}")
        # 1 x 1 blocks are unstructured sparsity: they must not earn the tensor unit.
        if self.pattern == "block" and (not isinstance(self.block_size, int) or self.block_size < 2):
            raise ValueError(f"block size must be an integer >= 2 (1 x 1 is unstructured), got {self.block_size!r}")

    @classmethod
    def unstructured(cls, level: float) -> Sparsity:
        return cls("unstructured", float(level))

    @classmethod
    def block(cls, size: int, level: float) -> Sparsity:
        return cls("block", float(level), block_size=size)

    @classmethod
    def nm(cls, n: int, m: int) -> Sparsity:
        return cls("nm", n=n, m=m)

    @classmethod
    def parse(cls, text: str | Sparsity) -> Sparsity:
        """``"dense"``, ``"2:4"``, ``"unstructured=0.9"`` / ``"unstructured=90%"``, ``"block16=0.5"``."""
        if isinstance(text, Sparsity):
            return text
        s = str(text).strip().lower().replace(" ", "")
        if s == "dense":
            return DENSE
        if found := re.fullmatch(r"(\d+):(\d+)", s):
            return cls.nm(int(found[1]), int(found[2]))
        if found := re.fullmatch(r"unstructured=([0-9.]+%?)", s):
            return cls.unstructured(_level(found[1]))
        if found := re.fullmatch(r"block(\d+)(?:x(\d+))?=([0-9.]+%?)", s):
            if found[2] is not None and found[2] != found[1]:
                raise ValueError(f"{text!r}: only square b x b blocks are modelled")
            return cls.block(int(found[1]), _level(found[3]))
        raise ValueError(
            f"cannot read sparsity {text!r}; write 'dense', 'N:M' (e.g. '2:4'), 'unstructured=0.9' "
            "or 'blockB=LEVEL' (e.g. 'block16=87.5%')"
        )

    @property
    def series(self) -> str:
        """The pattern without its level (a plot series): ``"unstructured"``, ``"block 16"``, ``"2:4"``."""
        if self.pattern == "block":
            return f"block {self.block_size}"
        if self.pattern == "nm":
            return f"{self.n}:{self.m}"
        return self.pattern

    @property
    def label(self) -> str:
        if self.pattern in ("dense", "nm"):
            return self.series
        return f"{self.series} {100 * self.level:.4g}%"

    def __str__(self) -> str:
        return self.label


DENSE = Sparsity("dense")


def _level(text: str) -> float:
    value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    if not 0 <= value <= 1:
        raise ValueError(f"sparsity level {text!r} is not a fraction in [0, 1] (write 90% or 0.9)")
    return value


# ================================================================================================
# Formats and their bytes (pure)
# ================================================================================================
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
        raise ValueError(f"{count} non-zeros do not fit in {most} places")


# ================================================================================================
# Weights as GEMM matrices, measured sparsity (torch, no tracing)
# ================================================================================================
# How a weight tensor becomes W[rows, cols]: "linear" [out, in] as is; "linear_t" the right operand
# [in, out] of x @ W, transposed; "conv" [K, C, *k] -> [K, (*k, C)]; "conv_transpose" [C, K, *k] ->
# [(K, *k), C] (the col2im GEMM, reducing over the input channels C).
VIEWS = ("linear", "linear_t", "conv", "conv_transpose")


def gemm_view(weight: torch.Tensor, view: str) -> torch.Tensor:
    """The weight as its GEMM matrix W[rows = outputs, cols = reduction] (see :data:`VIEWS`)."""
    if view == "linear":
        return weight.reshape(weight.shape[0], -1) if weight.dim() != 2 else weight
    if view == "linear_t":
        return weight.t()
    if view == "conv":
        return weight.movedim(1, -1).reshape(weight.shape[0], -1)
    if view == "conv_transpose":
        return weight.movedim(0, -1).reshape(-1, weight.shape[0])
    raise ValueError(f"unknown GEMM view {view!r}; choose one of {', '.join(VIEWS)}")


def _from_gemm_view(matrix: torch.Tensor, view: str, shape: torch.Size) -> torch.Tensor:
    """Inverse of :func:`gemm_view` (to write a mask back onto the weight)."""
    if view == "linear":
        return matrix.reshape(shape)
    if view == "linear_t":
        return matrix.t()
    if view == "conv":
        return matrix.reshape(shape[0], *shape[2:], shape[1]).movedim(-1, 1)
    return matrix.reshape(shape[1], *shape[2:], shape[0]).movedim(-1, 0)


def _gemm_shape(shape: Sequence[int], view: str) -> tuple[int, int]:
    if view == "linear":
        return shape[0], math.prod(shape[1:])
    if view == "linear_t":
        return shape[1], shape[0]
    if view == "conv":
        return shape[0], math.prod(shape[1:])
    return math.prod(shape[1:]), shape[0]


def _padded(x: torch.Tensor, rows: int, cols: int, value: float = 0.0) -> torch.Tensor:
    r, c = x.shape
    return F.pad(x, (0, (-c) % cols, 0, (-r) % rows), value=value)


def _tile_sums(x: torch.Tensor, b: int) -> torch.Tensor:
    """Sums over b x b tiles of a matrix (padded with zeros at its edges); integers sum as int32."""
    p = _padded(x, b, b)
    dtype = torch.int32 if not p.is_floating_point() else None
    return p.reshape(p.shape[0] // b, b, p.shape[1] // b, b).sum((1, 3), dtype=dtype)


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
        raise ValueError(f"expected a GEMM matrix, got shape {tuple(matrix.shape)}")
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
        kept = _tile_sums(nz, b) > 0
        if nnz >= block_density * float(_tile_sizes(rows, cols, b)[kept].sum()):
            found = Sparsity.block(b, 1 - int(kept.sum()) / kept.numel())
        else:
            failed.append(b)
    return found or Sparsity.unstructured(level)


def _group_max(nz: torch.Tensor, m: int) -> int:
    """The most non-zeros in a group of m consecutive places along a row."""
    return int(_padded(nz, 1, m).reshape(nz.shape[0], -1, m).sum(-1, dtype=torch.int32).max())


def _kept_density(nz: torch.Tensor, b: int) -> float:
    """Non-zeros / places in the b x b tiles that hold a non-zero (1.0 when none does)."""
    kept = _tile_sums(nz, b) > 0
    places = float(_tile_sizes(nz.shape[0], nz.shape[1], b)[kept].sum())
    return float(nz.sum(dtype=torch.int64)) / places if places else 1.0


def _tile_sizes(rows: int, cols: int, b: int) -> torch.Tensor:
    """Elements of the matrix in each b x b tile (edge tiles are smaller)."""

    def sizes(n: int) -> torch.Tensor:
        out = torch.full((math.ceil(n / b),), float(b))
        out[-1] = n - b * (len(out) - 1)
        return out

    return torch.outer(sizes(rows), sizes(cols))


# ================================================================================================
# Hardware support for structured sparsity
# ================================================================================================
@dataclass(frozen=True)
class SparseSupport:
    """What a device's tensor unit can do with sparse weights.

    ``nm``: the N:M patterns it runs natively (at its dense peak over the kept values);
    ``nm_precisions``: the peak-table keys it runs them in (None: all of the tensor unit's).
    ``block``: block-sparse weights (dense b x b tiles) run on the tensor unit when
    ``block_size >= min_block``; otherwise BSR runs on the vector unit.
    """

    nm: tuple[tuple[int, int], ...] = ()
    nm_precisions: frozenset[str] | None = None
    block: bool = True
    min_block: int = 2

    def __post_init__(self) -> None:
        for pattern in self.nm:
            Sparsity.nm(*pattern)  # raises on a malformed N:M

    def fit_nm(self, n: int, m: int, precision: str) -> tuple[int, int] | None:
        """The supported pattern an n:m weight runs as (fewest stored values), or None.

        n:m fits n2:m2 when every group of m2 then holds at most n2 non-zeros: m2 divides m and
        n <= n2, or m divides m2 and n x m2/m <= n2.
        """
        if self.nm_precisions is not None and precision not in self.nm_precisions:
            return None
        fits = [(n2, m2) for n2, m2 in self.nm if (m % m2 == 0 and n <= n2) or (m2 % m == 0 and n * (m2 // m) <= n2)]
        return min(fits, key=lambda p: (p[0] / p[1], p[1])) if fits else None


# Sparse tensor cores (Ampere, Ada, Hopper) run 2:4 in tf32, fp16, bf16, int8 and fp8, not fp64.
_NVIDIA_24 = SparseSupport(
    nm=((2, 4),),
    nm_precisions=frozenset({"tf32", "float16", "bfloat16", "int8", "float8_e4m3fn", "float8_e5m2"}),
)
SPARSE_SUPPORT: dict[str, SparseSupport] = {
    "h100-sxm": _NVIDIA_24,
    "h100-pcie": _NVIDIA_24,
    "a100-sxm": _NVIDIA_24,
    "l4": _NVIDIA_24,
    "rtx-4090": _NVIDIA_24,
    "h200-sxm": _NVIDIA_24,
    "b200": _NVIDIA_24,
    "l40s": _NVIDIA_24,
    "a10g": _NVIDIA_24,
    "a100-pcie-40gb": _NVIDIA_24,
    # CDNA 3 (AMD Instinct MI300X data sheet): 2:4 in fp16, bf16, fp8 and int8, not tf32/fp32/fp64
    "mi300x": SparseSupport(
        nm=((2, 4),), nm_precisions=frozenset({"float16", "bfloat16", "int8", "float8_e4m3fnuz", "float8_e5m2fnuz"})
    ),
    "t4": SparseSupport(),  # Turing: no sparse tensor cores
    "xeon-8480-2s": SparseSupport(),  # AMX tiles take dense blocks, no N:M
    "m2-max": SparseSupport(),  # no tensor unit at all
    "nvdla-full": SparseSupport(),  # NVDLA compresses weights in memory but computes dense
}


def sparse_support(hw: Hardware, override: SparseSupport | None = None) -> SparseSupport:
    """``override``, else the preset's entry, else no N:M (unknown devices)."""
    return override if override is not None else SPARSE_SUPPORT.get(hw.name, SparseSupport())


# ================================================================================================
# The weight operand of a call
# ================================================================================================
_CONV = {
    "aten::_convolution",
    "aten::convolution",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::_convolution_mode",
}
_CONV_T = {"aten::conv_transpose1d", "aten::conv_transpose2d", "aten::conv_transpose3d"}
_PRODUCTS = {"aten::mm": (0, 1), "aten::matmul": (0, 1), "aten::addmm": (1, 2)}
CONV_TRANSPOSED = 6  # the ``transposed`` argument of aten::_convolution / convolution


@dataclass(frozen=True)
class WeightUse:
    """Where a call's weight is: its spec, its GEMM view, and N (the columns it is applied to)."""

    spec: TensorSpec
    view: str
    rows: int
    cols: int
    n: int


def weight_use(call: OpCall) -> WeightUse | None:
    """The weight of a linear, convolution or matrix product with a parameter operand, else None.

    A linear's or convolution's weight counts even when it is not a parameter (a module whose
    weight a forward pre-hook computes, as ``torch.nn.utils.prune`` does).
    """
    ins = call.inputs
    out = next((s for s in call.outputs if isinstance(s, TensorSpec)), None)
    if out is None:
        return None
    kind = call.kind
    if kind == "aten::linear" and len(ins) > 1 and isinstance(w := ins[1], TensorSpec) and w.rank == 2:
        view = "linear"
    elif kind in _CONV or kind in _CONV_T:
        if len(ins) < 2 or not isinstance(w := ins[1], TensorSpec):
            return None
        transposed = kind in _CONV_T or (
            kind in ("aten::_convolution", "aten::convolution")
            and len(ins) > CONV_TRANSPOSED
            and getattr(ins[CONV_TRANSPOSED], "value", False) is True
        )
        view = "conv_transpose" if transposed else "conv"
    elif kind in _PRODUCTS:
        left, right = (ins[i] if i < len(ins) else None for i in _PRODUCTS[kind])
        if isinstance(right, TensorSpec) and right.param is not None and right.rank == 2:
            w, view = right, "linear_t"
        elif isinstance(left, TensorSpec) and left.param is not None and left.rank == 2:
            w, view = left, "linear"
        else:
            return None
    else:
        return None
    rows, cols = _gemm_shape(w.shape, view)
    if rows * cols == 0:
        return None
    if view == "conv_transpose":  # col2im GEMM: applied to every input position
        x = ins[0]
        n = x.numel // cols if isinstance(x, TensorSpec) else 0
    else:  # every output element is one row of W applied to one of N columns
        n = out.numel // rows
    return WeightUse(w, view, rows, cols, n)


# ================================================================================================
# The report
# ================================================================================================
@dataclass(frozen=True)
class SparseLayer:
    """One weight layer, dense and sparse.

    ``sparsity``: declared or measured (``source``); ``format``: how the weight is stored on
    the hardware (it can differ from ``sparsity``: 1:4 runs as 2:4, N:M without support as CSR).
    ``nnz``: the weight's non-zeros (measured, or implied by a declared level). ``n``: the GEMM's N.
    """

    dense: LayerTime
    sparse: LayerTime
    weight: str
    rows: int
    cols: int
    n: int
    sparsity: Sparsity
    source: str
    format: Format
    nnz: int
    flops_per_mac: int = FLOPS_PER_MAC

    @property
    def module(self) -> str:
        return self.dense.layer.module

    @property
    def speedup(self) -> float:
        """Dense time / sparse time (exactly 1 for a dense weight)."""
        return _speedup(self.dense.time, self.sparse.time)

    @property
    def dense_flops(self) -> float:
        return self.rows * self.cols * self.n * self.flops_per_mac

    @property
    def sparse_flops(self) -> float:
        """Stored values x N x flops per multiply-add (seed 003, equation 1)."""
        return self.format.values * self.n * self.flops_per_mac


def _level_of(weights: Iterable[SparseLayer]) -> float:
    seen = {w.weight: (w.rows * w.cols, w.nnz) for w in weights}  # a shared weight counts once
    places = sum(p for p, _ in seen.values())
    return 1 - sum(nnz for _, nnz in seen.values()) / places if places else 0.0


def _speedup(dense: float, sparse: float) -> float:
    if sparse > 0:
        return dense / sparse
    return 1.0 if dense == 0 else math.inf


class SparsityReport:
    """The dense and the sparse speed of light of a model, layer by layer.

    ``dense`` and ``sparse`` are :class:`~opcount.roofline.RooflineReport` s over the same layers
    (so their tables, module roll-ups and charts all work); ``weights`` holds the weight layers,
    in execution order. ``speedup`` is the model's: dense total time / sparse total time.
    """

    def __init__(
        self,
        dense: RooflineReport,
        sparse: RooflineReport,
        weights: Sequence[SparseLayer],
        support: SparseSupport,
        index_dtype: str,
    ) -> None:
        self.dense = dense
        self.sparse = sparse
        self.weights: tuple[SparseLayer, ...] = tuple(weights)
        self.support = support
        self.index_dtype = index_dtype

    @property
    def hardware(self) -> Hardware:
        return self.dense.hardware

    @property
    def dtype(self) -> str:
        return self.dense.dtype

    @property
    def dense_time(self) -> float:
        return self.dense.total_time

    @property
    def sparse_time(self) -> float:
        return self.sparse.total_time

    @property
    def speedup(self) -> float:
        return _speedup(self.dense_time, self.sparse_time)

    @property
    def level(self) -> float:
        """Zeros over all weight-layer weights (a weight used by several calls counts once)."""
        return _level_of(self.weights)

    def module_levels(self) -> dict[str, float]:
        """The zero level of the weights of every module holding weight layers (the model is ``""``)."""
        mine: dict[str, list[SparseLayer]] = {}
        for w in self.weights:
            for owner in dict.fromkeys(("", *w.dense.layer.owners)):
                mine.setdefault(owner, []).append(w)
        return {name: _level_of(ws) for name, ws in mine.items()}

    @property
    def flop_speedup(self) -> float:
        """What FLOP counts alone would promise: all dense FLOPs / all sparse FLOPs."""
        return _speedup(self.dense.total_flops, self.sparse.total_flops)

    @property
    def series(self) -> str:
        """The pattern of the sparse weights (``"mixed"`` when they differ, ``"dense"`` if none)."""
        # An all-zero weight fits every pattern: it does not make a configuration mixed.
        found = {w.sparsity.series for w in self.weights if w.sparsity.pattern != "dense" and w.nnz > 0}
        return found.pop() if len(found) == 1 else "mixed" if found else "dense"

    # The analyses' protocol, so report tables can show sparsity columns next to theirs.
    def uncalled_modules(self) -> set[str]:
        return self.dense.uncalled_modules()

    def unsupported_ops(self, module_name: str = "") -> Counter[str]:
        return self.dense.unsupported_ops(module_name)

    def module_speedup(self, name: str = "") -> float:
        return _speedup(self.dense.module(name).time, self.sparse.module(name).time)

    def by_module(self) -> dict[str, tuple[Summary, Summary]]:
        """(dense, sparse) rows of every module that holds layers, the model first."""
        sparse = self.sparse.by_module()
        return {name: (d, sparse[name]) for name, d in self.dense.by_module().items()}

    def point(self, accuracy: float | None = None, series: str | None = None, label: str = "") -> SparsityPoint:
        """This configuration as a point of the Sparsity Roofline chart (accuracy is the user's)."""
        from .sparsity_plot import SparsityPoint

        return SparsityPoint(series or self.series, self.speedup, accuracy, self.level, self.flop_speedup, label)

    # ----- text ----------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        """One plain dict per weight layer (for CSV / JSON exports)."""
        return [
            {
                "module": w.module,
                "weight": w.weight,
                "op": w.dense.layer.op,
                "rows": w.rows,
                "cols": w.cols,
                "n": w.n,
                "sparsity": w.sparsity.label,
                "source": w.source,
                "level": w.sparsity.level,
                "nnz": w.nnz,
                "format": w.format.name,
                "stored": w.format.values,
                "weight_bytes": w.format.bytes,
                "index_bytes": w.format.index_bytes,
                "dense_flops": w.dense_flops,
                "sparse_flops": w.sparse_flops,
                "dense_bytes": w.dense.layer.bytes,
                "sparse_bytes": w.sparse.layer.bytes,
                "dense_unit": f"{w.dense.layer.unit}/{w.dense.layer.precision}",
                "sparse_unit": f"{w.sparse.layer.unit}/{w.sparse.layer.precision}",
                "dense_time": w.dense.time,
                "sparse_time": w.sparse.time,
                "speedup": w.speedup,
                "bound": w.sparse.bound,
            }
            for w in self.weights
        ]

    def table(self, by: str = "layer", top: int | None = 15) -> str:
        """``by="layer"``: the weight layers with the most dense time; ``"module"``: modules down the
        tree (the model first) with their dense and sparse time."""
        import tabulate

        if by == "layer":
            chosen = sorted(self.weights, key=lambda w: -w.dense.time)[:top]
            body = [
                [
                    w.module or "(model)",
                    f"{w.rows}x{w.cols}",
                    f"{w.n:,}",
                    w.sparsity.label,
                    w.format.name,
                    si(w.dense_flops),
                    si(w.sparse_flops),
                    size(w.dense.layer.bytes),
                    size(w.sparse.layer.bytes),
                    f"{w.dense.layer.unit}>{w.sparse.layer.unit}",
                    seconds(w.dense.time),
                    seconds(w.sparse.time),
                    f"{w.speedup:.3g}x",
                    w.sparse.bound,
                ]
                for w in chosen
            ]
            headers = [
                "layer",
                "W",
                "N",
                "sparsity",
                "format",
                "dense flops",
                "sparse flops",
                "dense bytes",
                "sparse bytes",
                "unit",
                "dense time",
                "sparse time",
                "speedup",
                "bound",
            ]
        elif by == "module":
            rows = sorted(self.by_module().items(), key=lambda kv: -kv[1][0].time)[:top]
            body = [
                [
                    name or "(model)",
                    si(d.flops),
                    si(s.flops),
                    seconds(d.time),
                    seconds(s.time),
                    f"{_speedup(d.time, s.time):.3g}x",
                ]
                for name, (d, s) in rows
            ]
            headers = ["module", "dense flops", "sparse flops", "dense time", "sparse time", "speedup"]
        else:
            raise ValueError(f"by must be 'layer' or 'module', got {by!r}")
        return tabulate.tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)

    def summary(self) -> str:
        share = sum(w.dense.effective_time for w in self.weights) / self.dense_time if self.dense_time else 0.0
        return (
            f"{self.hardware.name} ({self.dtype}), {self.series}: {seconds(self.dense_time)} dense -> "
            f"{seconds(self.sparse_time)} sparse at the speed of light, {self.speedup:.3g}x "
            f"(FLOPs alone: {self.flop_speedup:.3g}x); {len(self.weights)} weight layers, "
            f"{_percent(self.level)} zeros, {100 * share:.0f}% of the dense time"
        )

    def __repr__(self) -> str:
        return f"<SparsityReport {self.summary()}>"


def _percent(x: float) -> str:
    return "<0.01%" if 0 < x < 1e-4 else f"{100 * x:.4g}%"


# ================================================================================================
# sparsity_roofline
# ================================================================================================
SparsitySpec = Sparsity | str
SparsityArg = SparsitySpec | Mapping[str, SparsitySpec] | None


def sparsity_roofline(
    model: nn.Module | MemoryTrafficAnalysis,
    inputs: Any = None,
    hardware: Hardware | str = "h100-sxm",
    sparsity: SparsityArg = MEASURED,
    dtype: str | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    default: SparsitySpec = MEASURED,
    support: SparseSupport | None = None,
    index_dtype: str = "int32",
    flops_per_mac: int = FLOPS_PER_MAC,
    dense_if_faster: bool = False,
    weights: nn.Module | Mapping[str, torch.Tensor] | None = None,
    **options: Any,
) -> SparsityReport:
    """The Sparsity Roofline of ``model(*inputs, **kwargs)`` on ``hardware`` (seed 003).

    ``sparsity``: ``"measured"`` (count the zeros of the actual weights and detect their
    pattern), one pattern for every weight layer (a :class:`Sparsity` or its text, e.g. ``"2:4"``),
    or a mapping from module or parameter names or glob patterns (``"layer4.*"``) to either;
    exact names win over globs, globs apply in order, other layers get ``default``. A name that
    matches no weight layer is an error. ``support``: the device's N:M / block capabilities
    (default :data:`SPARSE_SUPPORT`). ``index_dtype``: of CSR / BSR indices.
    ``flops_per_mac`` only changes the FLOPs reported per weight layer; times always count 2.
    ``dense_if_faster``: a layer whose sparse time exceeds its dense time runs dense (a real
    deployment would keep it dense); off by default, as in the paper.
    ``weights``: where measured weights are read, by parameter name, when not from the traced
    model: a pruned copy of it, or a state dict (one trace then serves many what-if copies).
    ``options`` go to :func:`~opcount.roofline.roofline` (``allow_tf32``, ``fuse``, ``pipeline``, ...).
    """
    if index_dtype not in DTYPE_BYTES or index_dtype.startswith(("float", "bfloat", "complex")):
        raise ValueError(f"index_dtype must be an integer dtype name such as 'int32', got {index_dtype!r}")
    if flops_per_mac not in (1, 2):
        raise ValueError(f"flops_per_mac must be 1 or 2, got {flops_per_mac!r}")
    hw = lookup_hardware(hardware)
    dense = roofline(model, inputs, hw, dtype, kwargs, **options)
    net = model.model if isinstance(model, MemoryTrafficAnalysis) else model
    caps = sparse_support(hw, support)
    chooser = _Chooser(sparsity, default)
    source_model = weights if isinstance(weights, nn.Module) else net
    if weights is None:
        tensors = _named_tensors(net)
    elif isinstance(weights, nn.Module):
        tensors = _named_tensors(weights)
    else:
        tensors = dict(weights)
    value_size = DTYPE_BYTES[dense.dtype]
    index_size = DTYPE_BYTES[index_dtype]

    measured: dict[int, tuple[Sparsity, int]] = {}  # by tensor: a weight used by several calls is read once
    layers = []
    found: list[tuple[int, SparseLayer]] = []  # (index in layers, the layer with its sparse time unset)
    for t in dense.layers:
        call = t.layer.call
        use = weight_use(call) if call is not None else None
        if call is None or use is None:
            layers.append(t.layer)
            continue
        name, tensor = _weight_of(use, call, source_model, tensors)
        if tensor is None and use.spec.param is None:
            layers.append(t.layer)  # a computed weight that no module holds
            continue
        owner = name.rpartition(".")[0] if use.spec.param is not None else t.layer.module
        spec = chooser.choose(owner, name)
        if spec == MEASURED:
            if tensor is None:
                raise ValueError(
                    f"cannot read the weight {name!r} of {call.kind} in '{t.layer.module}' to measure "
                    "it; declare its sparsity instead"
                )
            if tuple(tensor.shape) != use.spec.shape:
                raise ValueError(
                    f"weight {name!r} is {tuple(tensor.shape)} but the traced model uses "
                    f"{use.spec.shape}: weights= must hold the traced model's parameters"
                )
            if id(tensor) not in measured:
                measured[id(tensor)] = (detect_sparsity(gemm_view(tensor, use.view)), int(torch.count_nonzero(tensor)))
            (chosen, nnz), source = measured[id(tensor)], "measured"
        else:
            chosen, source = Sparsity.parse(spec), "declared"
            nnz = _implied_nnz(chosen, use.rows, use.cols)
        fmt, unit, precision = _plan(chosen, nnz, use, t, hw, caps, value_size, index_size)
        layer = _sparse_layer(t, use, fmt, unit, precision, value_size)
        if dense_if_faster and layer is not t.layer and _time_of(layer, hw) > t.time:
            layer, fmt = t.layer, dense_format(use.rows, use.cols, value_size)
        found.append(
            (len(layers), SparseLayer(t, t, name, use.rows, use.cols, use.n, chosen, source, fmt, nnz, flops_per_mac))
        )
        layers.append(layer)
    chooser.check_used()

    sparse = speed_of_light(layers, hw, pipeline=dense.pipeline, dtype=dense.dtype)
    sparse.unsupported = dense.unsupported
    sparse.fused = dense.fused
    sparse.uncalled = dense.uncalled
    timed = [replace(w, sparse=sparse.layers[i]) for i, w in found]
    return SparsityReport(dense, sparse, timed, caps, index_dtype)


def _time_of(layer: Any, hw: Hardware) -> float:
    peak = hw.peak_of(layer.unit, layer.precision) or math.inf
    return max(layer.flops / peak, layer.bytes / hw.bandwidth)


def _implied_nnz(s: Sparsity, rows: int, cols: int) -> int:
    if s.pattern == "nm":
        return storage(s, rows, cols).values
    if s.pattern == "block":  # the non-zeros of whole blocks, clipped to the matrix
        return min(round((1 - s.level) * rows * cols), storage(s, rows, cols).values)
    return round((1 - s.level) * rows * cols)


def _plan(
    s: Sparsity,
    nnz: int,
    use: WeightUse,
    t: LayerTime,
    hw: Hardware,
    caps: SparseSupport,
    value_size: float,
    index_size: float,
) -> tuple[Format, str, str]:
    """The weight's stored format and the unit and precision its product runs on."""
    unit, precision = t.layer.unit, t.layer.precision
    rows, cols = use.rows, use.cols
    if s.pattern == "dense":
        return dense_format(rows, cols, value_size), unit, precision
    if s.pattern == "block":
        on_tensor = unit == TENSOR and caps.block and s.block_size >= caps.min_block
        where = (unit, precision) if on_tensor or unit != TENSOR else _vector(hw, precision, t)
        return storage(s, rows, cols, value_size, index_size), *where
    if s.pattern == "nm" and unit == TENSOR and (fit := caps.fit_nm(s.n, s.m, precision)) is not None:
        return nm_format(rows, cols, fit[0], fit[1], value_size), unit, precision
    # Unstructured, and N:M the tensor unit cannot run: CSR of the actual non-zeros on the vector unit.
    return csr_format(rows, cols, nnz, value_size, index_size), *_vector(hw, precision, t)


def _vector(hw: Hardware, precision: str, t: LayerTime) -> tuple[str, str]:
    dtype = "float32" if precision == "tf32" else precision
    for candidate in ((VECTOR, dtype), (VECTOR, "float32")):
        if hw.peak_of(*candidate) is not None:
            return candidate
    return t.layer.unit, t.layer.precision  # no vector unit: the dense layer's


def _sparse_layer(t: LayerTime, use: WeightUse, fmt: Format, unit: str, precision: str, value_size: float) -> Any:
    """The dense layer with the weight's flops and bytes replaced; a dense weight is left as is."""
    layer = t.layer
    if fmt.name == "dense" and unit == layer.unit:
        return layer
    numel = use.rows * use.cols
    dense_macs = numel * use.n
    # Flops the handle counts beyond the product (none for fvcore's formulas) stay.
    flops = layer.flops - FLOPS_PER_MAC * dense_macs * (1 - fmt.values / numel) if numel else layer.flops
    dense_bytes = numel * value_size
    weight_bytes, ifmap_bytes = layer.weight_bytes, layer.ifmap_bytes
    # The weight's read is in the weight bytes when it is a parameter, else in the ifmap; it may
    # be absent (resident parameters read by an earlier call): then there is nothing to replace.
    if use.spec.param is not None and weight_bytes >= dense_bytes * (1 - 1e-9):
        weight_bytes += fmt.bytes - dense_bytes
    elif use.spec.param is None and ifmap_bytes >= dense_bytes * (1 - 1e-9):
        ifmap_bytes += fmt.bytes - dense_bytes
    return replace(
        layer, flops=max(flops, 0.0), weight_bytes=weight_bytes, ifmap_bytes=ifmap_bytes, unit=unit, precision=precision
    )


def _named_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    named: dict[str, torch.Tensor] = dict(model.named_buffers(remove_duplicate=False))
    named.update(model.named_parameters(remove_duplicate=False))
    return named


def _weight_of(
    use: WeightUse, call: OpCall, model: nn.Module, tensors: Mapping[str, torch.Tensor]
) -> tuple[str, torch.Tensor | None]:
    """The weight's qualified name and tensor; a non-parameter weight is the running module's
    ``weight`` attribute when its shape matches (torch.nn.utils.prune computes it in a hook)."""
    if use.spec.param is not None:
        return use.spec.param, tensors.get(use.spec.param)
    module_name = call.scope[-1]
    try:
        module = model.get_submodule(module_name) if module_name else model
    except AttributeError:
        return f"{module_name}.weight", None
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and tuple(weight.shape) == use.spec.shape:
        return f"{module_name}.weight" if module_name else "weight", weight
    return f"{module_name}.weight", None


class _Chooser:
    """Resolves the declared sparsity of a weight from its module and parameter names."""

    def __init__(self, sparsity: SparsityArg, default: SparsitySpec) -> None:
        self.default = _normalize(default)
        if sparsity is None or isinstance(sparsity, (str, Sparsity)):
            self.exact: dict[str, Sparsity | str] = {}
            self.globs: list[tuple[str, Sparsity | str]] = []
            self.default = _normalize(sparsity if sparsity is not None else MEASURED)
        elif isinstance(sparsity, Mapping):
            items = [(str(k), _normalize(v)) for k, v in sparsity.items()]
            self.exact = {k: v for k, v in items if not _is_glob(k)}
            self.globs = [(k, v) for k, v in items if _is_glob(k)]
        else:
            raise TypeError(
                f"sparsity must be 'measured', a pattern or a mapping of names to patterns, "
                f"got {type(sparsity).__name__}"
            )
        self.used: set[str] = set()

    def choose(self, module: str, param: str) -> Sparsity | str:
        for key in (param, module):
            if key in self.exact:
                self.used.add(key)
                return self.exact[key]
        for key, value in self.globs:
            if fnmatch.fnmatchcase(param, key) or fnmatch.fnmatchcase(module, key):
                self.used.add(key)
                return value
        return self.default

    def check_used(self) -> None:
        unused = [k for k in (*self.exact, *(k for k, _ in self.globs)) if k not in self.used]
        if unused:
            raise ValueError(
                f"sparsity names no weight layer: {', '.join(map(repr, unused))} (keys are module or "
                "parameter names, or glob patterns, of linear, convolution and matmul weights)"
            )


def _is_glob(key: str) -> bool:
    return any(c in key for c in "*?[")


def _normalize(spec: SparsitySpec) -> Sparsity | str:
    if isinstance(spec, str) and spec.strip().lower() == MEASURED:
        return MEASURED
    return Sparsity.parse(spec)


def parse_sparsity_args(values: Sequence[str]) -> dict[str, Sparsity | str] | Sparsity | str:
    """Command-line ``--sparsity`` values: ``PATTERN`` for every weight layer, or ``PATTERN@NAME``
    for the modules or parameters NAME (a glob) names, e.g. ``["2:4", "dense@conv1", "dense@fc"]``.
    One bare value returns it alone; with names, a bare value becomes the ``"*"`` default."""
    if not values:
        return MEASURED
    mapping: dict[str, Sparsity | str] = {}
    bare: Sparsity | str | None = None
    for value in values:
        pattern, at, name = value.partition("@")
        if at and not name:
            raise ValueError(f"--sparsity {value!r}: a name must follow '@'")
        spec = _normalize(pattern)
        if at:
            mapping[name] = spec
        elif bare is not None:
            raise ValueError(f"--sparsity: two patterns for every layer ({bare} and {value})")
        else:
            bare = spec
    if not mapping:
        return bare if bare is not None else MEASURED
    if bare is not None:
        mapping["*"] = bare
    return mapping


# ================================================================================================
# Pruning a copy
# ================================================================================================
def prunable_weights(model: nn.Module) -> dict[str, tuple[torch.Tensor, str]]:
    """Weights of linears, convolutions and attention input projections, with their GEMM view."""
    found: dict[str, tuple[torch.Tensor, str]] = {}
    for prefix, module in model.named_modules():
        dot = f"{prefix}." if prefix else ""
        if isinstance(module, nn.Linear):
            found[f"{dot}weight"] = (module.weight, "linear")
        elif isinstance(module, nn.modules.conv._ConvNd):
            found[f"{dot}weight"] = (module.weight, "conv_transpose" if module.transposed else "conv")
        elif isinstance(module, nn.MultiheadAttention):
            for attr in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
                weight = getattr(module, attr, None)
                if isinstance(weight, nn.Parameter):
                    found[f"{dot}{attr}"] = (weight, "linear")
    return found


def _select(names: Iterable[str], include: Sequence[str] | None, exclude: Sequence[str] | None) -> list[str]:
    def hit(name: str, globs: Sequence[str]) -> bool:
        module = name.rpartition(".")[0]
        return any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(module, g) for g in globs)

    return [n for n in names if (include is None or hit(n, include)) and not (exclude and hit(n, exclude))]


def _keep_top(scores: Sequence[torch.Tensor], drop: int) -> list[torch.Tensor]:
    """Masks keeping all but the ``drop`` smallest scores over all tensors (ties broken by order)."""
    flat = torch.cat([s.reshape(-1) for s in scores])
    keep = torch.ones_like(flat, dtype=torch.bool)
    if drop > 0:
        threshold = flat.kthvalue(drop).values
        below = flat < threshold
        keep &= ~below
        ties = (flat == threshold).nonzero().reshape(-1)[: drop - int(below.sum())]
        keep[ties] = False
    return list(keep.split([s.numel() for s in scores]))


@torch.no_grad()
def prune(
    model: nn.Module,
    sparsity: SparsitySpec,
    *,
    scope: str = "global",
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
) -> nn.Module:
    """A pruned deep copy of ``model`` (``model`` itself is never changed), for what-if analysis.

    Prunes the weights of linears, convolutions and attention input projections (:func:`prunable_weights`;
    ``include`` / ``exclude``: globs over parameter or module names) by magnitude:
    unstructured keeps the largest |w|; block keeps the b x b blocks (of the GEMM view) with the
    largest mean |w|; N:M keeps the n largest |w| of every group of m along the reduction.
    ``scope="global"`` ranks weights or blocks across all selected weights together (global
    magnitude pruning, seed 003), ``"layer"`` prunes every weight to the level on its own.
    Biases and normalization parameters are left alone. The copy is not re-trained.
    """
    s = Sparsity.parse(sparsity)
    if scope not in ("global", "layer"):
        raise ValueError(f"scope must be 'global' or 'layer', got {scope!r}")
    pruned = copy.deepcopy(model)
    weights = prunable_weights(pruned)
    chosen = _select(weights, include, exclude)
    if include is not None and not chosen:
        raise ValueError(f"include={list(include)} selects no prunable weight")
    if s.pattern == "dense" or not chosen:
        return pruned
    views = [gemm_view(weights[n][0].detach(), weights[n][1]) for n in chosen]
    if s.pattern == "nm":
        masks = [_nm_mask(v, s.n, s.m) for v in views]
    else:
        b = s.block_size if s.pattern == "block" else 1
        # Block score: mean |w| over the block's real elements (edge blocks are smaller).
        scores = [
            _tile_sums(v.abs().float(), b) / _tile_sizes(v.shape[0], v.shape[1], b) if b > 1 else v.abs().float()
            for v in views
        ]
        groups = [scores] if scope == "global" else [[x] for x in scores]
        keeps = [k for g in groups for k in _keep_top(g, round(s.level * sum(x.numel() for x in g)))]
        masks = [_expand(k.reshape(x.shape), b, v.shape) for k, x, v in zip(keeps, scores, views)]
    for name, mask in zip(chosen, masks):
        weight, view = weights[name]
        weight.mul_(_from_gemm_view(mask, view, weight.shape).to(weight.dtype))
    return pruned


def _expand(keep: torch.Tensor, b: int, shape: torch.Size) -> torch.Tensor:
    if b == 1:
        return keep
    full = keep.repeat_interleave(b, 0).repeat_interleave(b, 1)
    return full[: shape[0], : shape[1]]


def _nm_mask(view: torch.Tensor, n: int, m: int) -> torch.Tensor:
    rows, cols = view.shape
    # Padding scores -1 sort below every |w|, so a partial last group keeps its real values.
    groups = _padded(view.abs().float(), 1, m, value=-1.0).reshape(rows, -1, m)
    keep = torch.zeros_like(groups, dtype=torch.bool)
    keep.scatter_(-1, groups.topk(n, dim=-1).indices, True)
    return keep.reshape(rows, -1)[:, :cols]


# ================================================================================================
# Report columns: ``module_table(flops, columns=("flops", "sparse_flops", "speedup"),
# extra={"sparsity": report})``
# ================================================================================================
def _sparse_flop_cuts(report: SparsityReport) -> dict[str, dict[str, float]]:
    """FLOPs each module (and operator in it) no longer does, in the report's flops-per-MAC convention."""
    cuts: dict[str, dict[str, float]] = {}
    for w in report.weights:
        for owner in dict.fromkeys(("", *w.dense.layer.owners)):
            ops = cuts.setdefault(owner, {})
            ops[w.dense.layer.op] = ops.get(w.dense.layer.op, 0.0) + w.dense_flops - w.sparse_flops
    return cuts


def _sparse_flops_modules(s: Any) -> dict[str, Any]:
    cuts = _sparse_flop_cuts(s.get("sparsity"))
    return {name: v - sum(cuts.get(name, {}).values()) for name, v in s.flops.by_module().items()}


def _sparse_flops_operators(s: Any) -> dict[str, dict[str, Any]]:
    cuts = _sparse_flop_cuts(s.get("sparsity"))
    return {
        m: {op: v - cuts.get(m, {}).get(op, 0.0) for op, v in ops.items()}
        for m, ops in s.flops.by_module_and_operator().items()
    }


def _sparse_time_modules(s: Any) -> dict[str, Any]:
    return {name: summary.time for name, summary in s.get("sparsity").sparse.by_module().items()}


def _sparse_time_operators(s: Any) -> dict[str, dict[str, Any]]:
    rows = s.get("sparsity").sparse.by_module_and_operator()
    return {m: {op: summary.time for op, summary in ops.items()} for m, ops in rows.items()}


def _speedup_modules(s: Any) -> dict[str, Any]:
    return {name: _speedup(d.time, sp.time) for name, (d, sp) in s.get("sparsity").by_module().items()}


def _speedup_operators(s: Any) -> dict[str, dict[str, Any]]:
    report: SparsityReport = s.get("sparsity")
    dense, sparse = report.dense.by_module_and_operator(), report.sparse.by_module_and_operator()
    return {m: {op: _speedup(d.time, sparse[m][op].time) for op, d in ops.items()} for m, ops in dense.items()}


def _speedup_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else f"{x:.3g}x"


def _level_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else f"{100 * x:.1f}%"


def _time_cell(x: Any, fmt: Any) -> str:
    if x is None:
        return ""
    return repr(x) if getattr(fmt, "unit", "") == "exact" else seconds(x)


def _register_columns() -> None:
    from .report import COLUMNS, Column, format_number, register_column

    def count_cell(x: Any, fmt: Any) -> str:
        return "" if x is None else format_number(x, fmt)

    columns = (
        Column(
            "sparse_flops",
            "#sparse flops",
            ("flops", "sparsity"),
            _sparse_flops_modules,
            _sparse_flops_operators,
            count_cell,
        ),
        Column("sparse_time", "sparse time", ("sparsity",), _sparse_time_modules, _sparse_time_operators, _time_cell),
        Column(
            "speedup", "speedup", ("sparsity",), _speedup_modules, _speedup_operators, _speedup_cell, additive=False
        ),
        Column(
            "sparsity",
            "% zero weights",
            ("sparsity",),
            lambda s: s.get("sparsity").module_levels(),
            None,
            _level_cell,
            additive=False,
        ),
    )
    for column in columns:
        if column.key not in COLUMNS:
            register_column(column)


_register_columns()
