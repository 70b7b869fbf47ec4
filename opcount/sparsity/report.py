"""The sparsity roofline's report: every weight layer dense and sparse (:class:`SparseLayer`), the
model's speedup, and their text (tables, summary) and rows for exports."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import OpcountValueError
from ..hardware.lookup import Hardware
from ..hardware.sparse_support import SparseSupport
from ..rollup import grouped
from ..roofline import FLOPS_PER_MAC, LayerTime, RooflineReport, Summary
from ..units import seconds, si, size
from .formats import Format
from .patterns import Sparsity
from .plot import SparsityResult


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
        return speedup_ratio(self.dense.time, self.sparse.time)

    @property
    def dense_flops(self) -> float:
        return self.rows * self.cols * self.n * self.flops_per_mac

    @property
    def sparse_flops(self) -> float:
        """Stored values x N x flops per multiply-add (the Sparsity Roofline paper, equation 1)."""
        return self.format.values * self.n * self.flops_per_mac


def _level_of(weights: Iterable[SparseLayer]) -> float:
    seen = {w.weight: (w.rows * w.cols, w.nnz) for w in weights}  # a shared weight counts once
    places = sum(p for p, _ in seen.values())
    return 1 - sum(nnz for _, nnz in seen.values()) / places if places else 0.0


def speedup_ratio(dense: float, sparse: float) -> float:
    """Dense time over sparse time (1 when both are 0)."""
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
        return speedup_ratio(self.dense_time, self.sparse_time)

    @property
    def level(self) -> float:
        """Zeros over all weight-layer weights (a weight used by several calls counts once)."""
        return _level_of(self.weights)

    def module_levels(self) -> dict[str, float]:
        """The zero level of the weights of every module holding weight layers (the model is ``""``)."""
        mine = grouped((w.dense.layer.owners, w) for w in self.weights)
        return {name: _level_of(ws) for name, ws in mine.items()}

    @property
    def flop_speedup(self) -> float:
        """What FLOP counts alone would promise: all dense FLOPs / all sparse FLOPs."""
        return speedup_ratio(self.dense.total_flops, self.sparse.total_flops)

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
        return speedup_ratio(self.dense.module(name).time, self.sparse.module(name).time)

    def by_module(self) -> dict[str, tuple[Summary, Summary]]:
        """(dense, sparse) rows of every module that holds layers, the model first."""
        sparse = self.sparse.by_module()
        return {name: (d, sparse[name]) for name, d in self.dense.by_module().items()}

    def point(self, accuracy: float | None = None, series: str | None = None, label: str = "") -> SparsityResult:
        """This configuration as a point of the Sparsity Roofline chart (accuracy is the user's)."""
        return SparsityResult(series or self.series, self.speedup, accuracy, self.level, self.flop_speedup, label)

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
                "bound": w.sparse.limited_by,
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
                    w.sparse.limited_by,
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
                    f"{speedup_ratio(d.time, s.time):.3g}x",
                ]
                for name, (d, s) in rows
            ]
            headers = ["module", "dense flops", "sparse flops", "dense time", "sparse time", "speedup"]
        else:
            raise OpcountValueError(f"by must be 'layer' or 'module', got {by!r}")
        table: str = tabulate.tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)
        return table

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
