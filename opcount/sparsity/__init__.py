"""The Sparsity Roofline (Shinn et al., *The Sparsity Roofline: Understanding the Hardware Limits
of Sparse Neural Networks*): what sparse weights could buy at the speed of light.

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

Formats (the paper, sections 3.2 and 5.3):

- **unstructured -> CSR**: ``nnz`` values, ``nnz`` column indices, ``rows + 1`` row pointers;
  runs on the vector unit (general sparse kernels cannot feed tensor units).
- **block b x b -> BSR**: ``blocks x b x b`` values (zeros inside a kept block are stored),
  ``blocks`` block-column indices, ``ceil(rows / b) + 1`` block-row pointers; the tiles are
  dense, so it runs on the unit the dense layer uses (tensor where there is one).
- **N:M**: ``N`` values kept in every group of ``M`` along the reduction, each with a
  ``ceil(log2 M)``-bit position; runs on the tensor unit where the hardware supports that
  pattern (``Hardware.sparse``, a :class:`~opcount.hardware.sparse_support.SparseSupport`), stored as the
  supported pattern it fits in (1:4 weights on 2:4 hardware store 2 values per 4). Elsewhere it
  runs as unstructured CSR.

The modules, one concern each: :mod:`.patterns` (what the zeros look like), :mod:`.formats`
(bytes of a stored weight), :mod:`.gemm` (weights as GEMM matrices), :mod:`.detect` (measuring a
weight's zeros), :mod:`.declared` (the user's per-name declarations, ``--sparsity``),
:mod:`.roofline` (the analysis), :mod:`.report` (its report), :mod:`.columns` (report-table
columns), :mod:`.pruning` (pruned copies for what-ifs), :mod:`.plot` (charts).
"""

from ..hardware.sparse_support import SparseSupport
from . import columns as _columns  # noqa: F401  (registers the sparsity columns of report tables)
from .declared import SparsityArg, SparsitySpec, parse_sparsity_args
from .detect import DETECT_BLOCKS, DETECT_GROUPS, MIN_MEASURED_LEVEL, detect_sparsity
from .formats import Format, bsr_format, csr_format, dense_format, nm_format, storage
from .gemm import VIEWS, WeightUse, gemm_view, weight_use
from .patterns import DENSE, MEASURED, PATTERNS, Sparsity
from .plot import SparsityResult, sparsity_roofline_chart, speedup_chart
from .pruning import prunable_weights, prune
from .report import SparseLayer, SparsityReport
from .roofline import SPARSE_SUPPORT, sparse_support, sparsity_roofline

__all__ = [
    "DENSE",
    "DETECT_BLOCKS",
    "DETECT_GROUPS",
    "MEASURED",
    "MIN_MEASURED_LEVEL",
    "PATTERNS",
    "SPARSE_SUPPORT",
    "VIEWS",
    "Format",
    "SparseLayer",
    "SparseSupport",
    "Sparsity",
    "SparsityArg",
    "SparsityReport",
    "SparsityResult",
    "SparsitySpec",
    "WeightUse",
    "bsr_format",
    "csr_format",
    "dense_format",
    "detect_sparsity",
    "gemm_view",
    "nm_format",
    "parse_sparsity_args",
    "prunable_weights",
    "prune",
    "sparse_support",
    "sparsity_roofline",
    "sparsity_roofline_chart",
    "speedup_chart",
    "storage",
    "weight_use",
]
