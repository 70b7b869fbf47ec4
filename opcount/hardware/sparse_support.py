"""What a device's tensor unit can do with sparse weights, as a field of :class:`~opcount.hardware.lookup.Hardware`.

Plain data with its TOML/JSON form (the ``[sparse]`` table of a hardware file); the sparsity
roofline (:mod:`opcount.sparsity`) reads it to decide which unit a sparse weight runs on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OpcountValueError

__all__ = ["NVIDIA_2_4", "SparseSupport"]


@dataclass(frozen=True)
class SparseSupport:
    """What a device's tensor unit can do with sparse weights.

    ``nm``: the N:M patterns it runs natively (at its dense peak over the kept values);
    ``nm_precisions``: the peak-table keys it runs them in (None: all of the tensor unit's).
    ``block``: block-sparse weights (dense b x b tiles) run on the tensor unit when
    ``block_size >= min_block``; otherwise BSR runs on the vector unit.
    The default, ``SparseSupport()``, runs no N:M pattern natively.
    """

    nm: tuple[tuple[int, int], ...] = ()
    nm_precisions: frozenset[str] | None = None
    block: bool = True
    min_block: int = 2

    def __post_init__(self) -> None:
        patterns = []
        for pattern in self.nm:
            n, m = tuple(pattern) if isinstance(pattern, (tuple, list)) and len(pattern) == 2 else (None, None)
            if not (isinstance(n, int) and isinstance(m, int) and 1 <= n <= m and m >= 2):
                raise OpcountValueError(f"N:M needs integers 1 <= N <= M, M >= 2; got {pattern!r}")
            patterns.append((n, m))
        object.__setattr__(self, "nm", tuple(patterns))
        if self.nm_precisions is not None:
            object.__setattr__(self, "nm_precisions", frozenset(self.nm_precisions))
        if not isinstance(self.block, bool):
            raise OpcountValueError(f"block must be true or false, got {self.block!r}")
        if not isinstance(self.min_block, int) or isinstance(self.min_block, bool) or self.min_block < 1:
            raise OpcountValueError(f"min_block must be a positive integer, got {self.min_block!r}")

    def fit_nm(self, n: int, m: int, precision: str) -> tuple[int, int] | None:
        """The supported pattern an n:m weight runs as (fewest stored values), or None.

        n:m fits n2:m2 when every group of m2 then holds at most n2 non-zeros: m2 divides m and
        n <= n2, or m divides m2 and n x m2/m <= n2.
        """
        if self.nm_precisions is not None and precision not in self.nm_precisions:
            return None
        fits = [(n2, m2) for n2, m2 in self.nm if (m % m2 == 0 and n <= n2) or (m2 % m == 0 and n * (m2 // m) <= n2)]
        return min(fits, key=lambda p: (p[0] / p[1], p[1])) if fits else None

    # ----- (de)serialization ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The ``[sparse]`` table of a hardware file: N:M patterns as ``"N:M"`` strings."""
        out: dict[str, Any] = {"nm": [f"{n}:{m}" for n, m in self.nm]}
        if self.nm_precisions is not None:
            out["nm_precisions"] = sorted(self.nm_precisions)
        out["block"] = self.block
        out["min_block"] = self.min_block
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SparseSupport:
        """Build from ``{"nm": ["2:4"], "nm_precisions": ["float16"], "block": true, "min_block": 2}``;
        every key is optional, unknown keys are errors."""
        allowed = {"nm", "nm_precisions", "block", "min_block"}
        unknown = set(data) - allowed
        if unknown:
            raise OpcountValueError(f"unknown sparse keys {sorted(unknown)}; allowed: {sorted(allowed)}")
        nm = data.get("nm", [])
        if isinstance(nm, str) or not isinstance(nm, (list, tuple)):
            raise OpcountValueError(f"sparse.nm must be a list of 'N:M' strings such as ['2:4'], got {nm!r}")
        precisions = data.get("nm_precisions")
        if precisions is not None and (isinstance(precisions, str) or not all(isinstance(p, str) for p in precisions)):
            raise OpcountValueError(f"sparse.nm_precisions must be a list of dtype names, got {precisions!r}")
        return cls(
            nm=tuple(_pattern(p) for p in nm),
            nm_precisions=None if precisions is None else frozenset(precisions),
            block=data.get("block", True),
            min_block=data.get("min_block", 2),
        )


def _pattern(text: object) -> tuple[int, int]:
    found = re.fullmatch(r"\s*(\d+)\s*:\s*(\d+)\s*", text) if isinstance(text, str) else None
    if found is None:
        raise OpcountValueError(f"sparse.nm: cannot read {text!r}; write N:M patterns as strings such as '2:4'")
    return int(found[1]), int(found[2])


# Sparse tensor cores (Ampere, Ada, Hopper, Blackwell) run 2:4 in tf32, fp16, bf16, int8 and fp8, not fp64
# (NVIDIA's Ampere architecture whitepaper, "Fine-grained structured sparsity"; its datasheets' starred
# figures). The block-scaled FP4 formats (Blackwell) are left out: the sparsity roofline prices N:M
# weights in torch's dtypes only.
NVIDIA_2_4 = SparseSupport(
    nm=((2, 4),),
    nm_precisions=frozenset({"tf32", "float16", "bfloat16", "int8", "float8_e4m3fn", "float8_e5m2"}),
)
