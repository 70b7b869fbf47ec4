"""Declared sparsity: what the user says each weight has (one pattern for all, or a mapping of
module / parameter names and globs), the ``--sparsity`` command-line values that express it, and
its resolution weight by weight."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence

from ..errors import OpcountTypeError, OpcountValueError
from .patterns import MEASURED, Sparsity

SparsitySpec = Sparsity | str
SparsityArg = SparsitySpec | Mapping[str, SparsitySpec] | None


class Chooser:
    """Resolves the declared sparsity of a weight from its module and parameter names."""

    def __init__(self, sparsity: SparsityArg, default: SparsitySpec) -> None:
        self.default = normalize(default)
        if sparsity is None or isinstance(sparsity, (str, Sparsity)):
            self.exact: dict[str, Sparsity | str] = {}
            self.globs: list[tuple[str, Sparsity | str]] = []
            self.default = normalize(sparsity if sparsity is not None else MEASURED)
        elif isinstance(sparsity, Mapping):
            items = [(str(k), normalize(v)) for k, v in sparsity.items()]
            self.exact = {k: v for k, v in items if not _is_glob(k)}
            self.globs = [(k, v) for k, v in items if _is_glob(k)]
        else:
            raise OpcountTypeError(
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
            raise OpcountValueError(
                f"sparsity names no weight layer: {', '.join(map(repr, unused))} (keys are module or "
                "parameter names, or glob patterns, of linear, convolution and matmul weights)"
            )


def _is_glob(key: str) -> bool:
    return any(c in key for c in "*?[")


def normalize(spec: SparsitySpec) -> Sparsity | str:
    """``"measured"`` as is, any other spec as its :class:`Sparsity`."""
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
            raise OpcountValueError(f"a name must follow '@' in {value!r}")
        spec = normalize(pattern)
        if at:
            mapping[name] = spec
        elif bare is not None:
            raise OpcountValueError(f"two patterns for every layer ({bare} and {value})")
        else:
            bare = spec
    if not mapping:
        return bare if bare is not None else MEASURED
    if bare is not None:
        mapping["*"] = bare
    return mapping
