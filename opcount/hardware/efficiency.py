"""What fraction of its peaks a device reaches in practice, and what each kernel launch costs.

The estimate of an LLM phase (:mod:`opcount.llm.kernels.estimate`) prices each fused kernel with these
factors; the bound (:mod:`opcount.roofline.bound`) uses none of them. Defaults, from published
microbenchmarks rather than from the serving measurements they are checked against:

- ``gemm`` 0.8 (a GEMM in 16-bit or wider) and ``gemm_fp8`` 0.7 (in an 8-bit float): the
  "Maximum Achievable Matmul FLOPS" table of Stas Bekman's *Machine Learning Engineering*
  (``mamf-finder.py``, the best of a sweep of shapes): an H100 SXM reaches 794.5 of 989 TFLOP/s in
  BF16 (80.3%) and 1,402.6 of 1,979 in FP8 (70.9%), an A100 SXM 271.2 of 312 in BF16 (86.9%); the
  H100's figures, since inference GEMMs are thinner than the best shape. A GEMM's rows are further
  padded to whole tiles (:func:`tile_utilization`).
- ``attention`` 0.6: FlashAttention-2 reaches 50-73% of the A100's peak (Dao 2023, abstract);
  FlashAttention-3 reaches 75% of the H100's in FP16 and about 1.2 of its 1.98 PFLOP/s in FP8,
  61% (Shah et al. 2024, abstract): one factor serves both, as FP8 reaches no less.
- ``stream`` 0.9: a streaming kernel reaches about 90% of the datasheet bandwidth on HBM GPUs
  (BabelStream's triad on A100 and H100; an A100 80 GB read kernel at 1.80 of 2.04 TB/s, 88%, in
  NVIDIA's developer forum; a 1 GiB copy at 2.99 of 3.35 TB/s, 89%, on an H100 SXM in
  docs/measured/h100_llm_step.md).
- ``launch_s`` 2e-6: the gap a kernel launch leaves between back-to-back kernels on one stream
  without CUDA graphs: about 2.1 us on an H100 (Hazy Research's "No Bubbles" blog; 1.3 us within
  a graph), 0.9 us on a V100 (NVIDIA's "Getting Started with CUDA Graphs" blog: 3.8 us per
  2.9 us kernel).

A hardware file overrides any of them (``[efficiency]`` with ``gemm``, ``gemm_fp8``, ``attention``,
``stream``, ``launch_s``); each is checked to lie in a physical range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from ..errors import OpcountValueError

# Fractions of a peak lie in (0, 1]; a launch between 0 and 1 ms (a slow host takes tens of us).
_RANGES = {
    "gemm": (1e-3, 1.0),
    "gemm_fp8": (1e-3, 1.0),
    "attention": (1e-3, 1.0),
    "stream": (1e-3, 1.0),
    "launch_s": (0.0, 1e-3),
}
TILE_ROWS, TILE_COLS = 64, 128  # the smallest output tile CUTLASS's Ampere and Hopper GEMMs run efficiently


@dataclass(frozen=True)
class Efficiency:
    """Fractions of peak reached (``gemm``, ``gemm_fp8``, ``attention`` on the tensor unit;
    ``stream`` of the bandwidth) and ``launch_s`` seconds per kernel."""

    gemm: float = 0.8
    gemm_fp8: float = 0.7
    attention: float = 0.6
    stream: float = 0.9
    launch_s: float = 2e-6

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            low, high = _RANGES[f.name]
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not number or not low <= value <= high:
                raise OpcountValueError(f"efficiency.{f.name} must be a number from {low:g} to {high:g}, got {value!r}")
            object.__setattr__(self, f.name, float(value))

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Efficiency:
        unknown = set(data) - set(_RANGES)
        if unknown:
            raise OpcountValueError(f"unknown efficiency keys {sorted(unknown)}; allowed: {sorted(_RANGES)}")
        return cls(**data)  # type: ignore[arg-type]

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def gemm_at(self, precision: str) -> float:
        """The GEMM factor at ``precision`` (a tensor peak's key): ``gemm_fp8`` for the 8-bit
        floats (every ``float8_*``), ``gemm`` for any other."""
        return self.gemm_fp8 if precision.startswith("float8") else self.gemm


def tile_utilization(rows: int, cols: int) -> float:
    """Useful / computed outputs of a GEMM whose ``rows x cols`` output is padded to whole
    ``TILE_ROWS x TILE_COLS`` tiles: 1 when both divide, ``rows / 64`` for a decode step's few rows."""
    if rows <= 0 or cols <= 0:
        return 1.0
    padded = math.ceil(rows / TILE_ROWS) * TILE_ROWS * math.ceil(cols / TILE_COLS) * TILE_COLS
    return rows * cols / padded
