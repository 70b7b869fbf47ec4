"""Sparsity patterns: what a weight's zeros look like (dense, unstructured, b x b blocks, N:M) and
how a pattern is written (``"2:4"``, ``"unstructured=0.9"``, ``"block16=87.5%"``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import OpcountValueError

PATTERNS = ("dense", "unstructured", "block", "nm")
MEASURED = "measured"  # not a pattern: "count the weight's own zeros and detect its pattern"


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
            raise OpcountValueError(f"unknown sparsity pattern {self.pattern!r}; choose one of {', '.join(PATTERNS)}")
        if self.pattern == "nm":
            if not (isinstance(self.n, int) and isinstance(self.m, int) and 1 <= self.n <= self.m and self.m >= 2):
                raise OpcountValueError(f"N:M needs integers 1 <= N <= M, M >= 2; got {self.n}:{self.m}")
            object.__setattr__(self, "level", 1 - self.n / self.m)
        elif self.pattern == "dense":
            object.__setattr__(self, "level", 0.0)
        if not (isinstance(self.level, (int, float)) and 0.0 <= self.level <= 1.0):
            raise OpcountValueError(f"sparsity level must be a fraction of zeros in [0, 1], got {self.level!r}")
        # 1 x 1 blocks are unstructured sparsity: they must not earn the tensor unit.
        if self.pattern == "block" and (not isinstance(self.block_size, int) or self.block_size < 2):
            raise OpcountValueError(
                f"block size must be an integer >= 2 (1 x 1 is unstructured), got {self.block_size!r}"
            )

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
                raise OpcountValueError(f"{text!r}: only square b x b blocks are modelled")
            return cls.block(int(found[1]), _level(found[3]))
        raise OpcountValueError(
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
        raise OpcountValueError(f"sparsity level {text!r} is not a fraction in [0, 1] (write 90% or 0.9)")
    return value
