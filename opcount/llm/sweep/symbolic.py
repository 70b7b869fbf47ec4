"""A phase's operator records as polynomials in batch ``B``, new tokens ``T`` and cache length ``L``.

Every integer of a record (each dimension of each tensor, each integer argument) is fitted as a
polynomial in ``(B, T, L)`` with rational coefficients, exactly, from a few traces of the same
phase: a base point and one step along each swept variable (an affine fit), then every corner of
the box when a product appears (a multilinear fit, ``B*T`` of a flattened batch of tokens). A
record's structure (its operator, scope, dtypes, parameters, tensor identities and every other
argument) must be the same in every trace. The fit is then checked against one more trace at a
point where every swept variable differs from the base: a dimension that is not multilinear, or an
operator sequence that changes with the sizes, disagrees and the fit is refused with the reason.

Points are first split into regions where the structure is known not to change
(:func:`region`): on either side of a sliding window (``min(L + T, W)``), within one attention
chunk (positions count from its start), on either side of a
mixture-of-experts block's integer-divided loads (``B*T*k // E``, affine within one residue
``B*T*k mod E``), of a single new token (attention is not causal) and of an empty cache (the logits
kept). Each region is fitted on its own.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ...errors import OpcountError
from ...ir import Const, ListSpec, OpCall, Spec, TensorSpec
from ...tracing import Trace

Point = tuple[int, int, int]  # (batch, new tokens, cache length)
VARIABLES = ("batch", "tokens", "cache")
Monomial = tuple[int, ...]  # indices into a Point, multiplied
_INT = "i"


class FitError(OpcountError):
    """The records cannot be fitted or the fit disagrees with a trace: say why, then trace instead."""


@dataclass(frozen=True)
class Poly:
    """``sum(num * prod(point[i] for i in mono)) / den``, an integer at every point it is used."""

    terms: tuple[tuple[Monomial, int], ...]
    den: int = 1

    def at(self, point: Point) -> int:
        return _value_at(self, point)

    def over(self, points: np.ndarray) -> np.ndarray:
        """Values at many points (rows of ``points``, int64)."""
        total = np.zeros(len(points), dtype=np.int64)
        for mono, n in self.terms:
            col = np.ones(len(points), dtype=np.int64)
            for i in mono:
                col = col * points[:, i]
            total = total + n * col
        if self.den != 1:
            if np.any(total % self.den):
                raise FitError("a fitted size is not a whole number at a swept point")
            total = total // self.den
        return total


@functools.lru_cache(maxsize=65536)  # a decoder's layers repeat the same few polynomials
def _value_at(poly: Poly, point: Point) -> int:
    total = sum(n * math.prod(point[i] for i in mono) for mono, n in poly.terms)
    q, r = divmod(total, poly.den)
    if r:
        raise FitError(f"a fitted size is not a whole number at {_describe(point)}")
    return q


def _describe(point: Point) -> str:
    return ", ".join(f"{name} {v}" for name, v in zip(VARIABLES, point, strict=True))


# ------------------------------------------------------------------------------------------------
# Records as a structure and a list of integers
# ------------------------------------------------------------------------------------------------
def _spec_parts(spec: Spec, ints: list[int]) -> Any:
    if isinstance(spec, TensorSpec):
        ints.extend(spec.shape)
        return ("T", len(spec.shape), spec.dtype, spec.param, spec.id)
    if isinstance(spec, ListSpec):
        return ("L", tuple(_spec_parts(s, ints) for s in spec.items))
    return ("C", _value_parts(spec.value, ints), spec.known)


def _value_parts(value: object, ints: list[int]) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        ints.append(value)
        return _INT
    if isinstance(value, tuple):
        return ("t", tuple(_value_parts(v, ints) for v in value))
    return ("v", type(value).__name__, repr(value))


def flatten(call: OpCall) -> tuple[Any, list[int]]:
    """The record's structure (what must not change between points) and its integers, in order."""
    ints: list[int] = []
    inputs = tuple(_spec_parts(s, ints) for s in call.inputs)
    outputs = tuple(_spec_parts(s, ints) for s in call.outputs)
    return (call.kind, call.scope, call.within, inputs, outputs), ints


def _rebuild_spec(template: Spec, values: Iterator[int]) -> Spec:
    if isinstance(template, TensorSpec):
        shape = tuple(next(values) for _ in template.shape)
        return TensorSpec(shape, template.dtype, template.param, template.id)
    if isinstance(template, ListSpec):
        return ListSpec(tuple(_rebuild_spec(s, values) for s in template.items))
    return Const(_rebuild_value(template.value, values), template.known)


def _rebuild_value(value: object, values: Iterator[int]) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return next(values)
    if isinstance(value, tuple):
        return tuple(_rebuild_value(v, values) for v in value)
    return value


def rebuild(call: OpCall, values: Sequence[int]) -> OpCall:
    """``call`` with its integers (in :func:`flatten`'s order) replaced by ``values``."""
    it = iter(values)
    inputs = tuple(_rebuild_spec(s, it) for s in call.inputs)
    outputs = tuple(_rebuild_spec(s, it) for s in call.outputs)
    return OpCall(call.kind, inputs, outputs, call.scope, call.within)


# ------------------------------------------------------------------------------------------------
# Regions and designs
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Structure:
    """What splits the points into regions: the windows a cache is cut at, and each
    mixture-of-experts block's ``(top_k, experts)``."""

    windows: tuple[int, ...] = ()
    experts: tuple[tuple[int, int], ...] = ()
    chunks: tuple[int, ...] = ()


def region(structure: Structure, point: Point) -> tuple[Any, ...]:
    """Points with the same region have the same records, sizes multilinear in the point."""
    batch, tokens, cache = point
    moe = []
    for k, e in structure.experts:
        routed = batch * tokens * k
        # below E routed tokens, some experts get none (and do not run): each count its own region
        moe.append(("few", routed) if routed < e else ("mod", routed % e))
    # a sliding window: below it, full, or filling (the cache, the new tokens, both against W)
    windows = tuple((cache + tokens <= w, cache <= w, tokens <= w) for w in structure.windows)
    # a chunk: positions count from its start, so every chunk the cache and the new tokens reach
    chunks = tuple((cache // c, (cache + tokens - 1) // c) for c in structure.chunks)
    return (tokens > 1, cache == 0, windows, chunks, tuple(moe))


def affine_design(points: Sequence[Point]) -> tuple[list[int], list[Point]]:
    """The swept variables and the design: the first point, then one step along each variable
    (to its largest value), so the first point is always traced."""
    base = points[0]
    swept = [i for i in range(3) if len({p[i] for p in points}) > 1]
    design = [base]
    for i in swept:
        far = max(p[i] for p in points if p[i] != base[i])
        step = [far if j == i else base[j] for j in range(3)]
        design.append((step[0], step[1], step[2]))
    return swept, design


def corner_design(points: Sequence[Point], swept: Sequence[int]) -> list[Point]:
    """Every corner of the box between the first point and each variable's largest other value."""
    base = points[0]
    far = {i: max(p[i] for p in points if p[i] != base[i]) for i in swept}
    corners = []
    for chosen in itertools.product((False, True), repeat=len(swept)):
        value = list(base)
        for i, up in zip(swept, chosen, strict=True):
            if up:
                value[i] = far[i]
        corners.append((value[0], value[1], value[2]))
    return corners


def check_point(points: Sequence[Point], design: Sequence[Point], swept: Sequence[int]) -> Point | None:
    """A point to check the fit at: not in the design, every swept variable off the first point's
    value (so a product of two variables the fit left out shows); None when no point is left."""
    base = points[0]
    taken = set(design)
    for p in points:
        if p not in taken and all(p[i] != base[i] for i in swept):
            return p
    return None


def monomials(swept: Sequence[int], multilinear: bool) -> list[Monomial]:
    if not multilinear:
        return [(), *((i,) for i in swept)]
    return [m for r in range(len(swept) + 1) for m in itertools.combinations(swept, r)]


# ------------------------------------------------------------------------------------------------
# The fit
# ------------------------------------------------------------------------------------------------
@dataclass
class Template:
    """The records of one region: each record's structure and the polynomials of its integers."""

    trace: Trace
    calls: list[OpCall]
    polys: list[list[Poly]]
    structures: list[Any]

    def at(self, point: Point) -> list[OpCall]:
        return [self.rebuilt(i, point) for i in range(len(self.calls))]

    def rebuilt(self, index: int, point: Point) -> OpCall:
        """Record ``index`` at ``point``."""
        return rebuild(self.calls[index], [p.at(point) for p in self.polys[index]])

    def tensor_shapes(self) -> dict[int, tuple[TensorSpec, tuple[Poly, ...]]]:
        """Each tensor (by id) as first recorded, with the polynomials of its dimensions."""
        out: dict[int, tuple[TensorSpec, tuple[Poly, ...]]] = {}
        for call, polys in zip(self.calls, self.polys, strict=True):
            it = iter(polys)
            for spec in (*call.inputs, *call.outputs):
                _walk(spec, it, out)
        return out


def _walk(spec: Spec, polys: Iterator[Poly], out: dict[int, tuple[TensorSpec, tuple[Poly, ...]]]) -> None:
    """Consume ``spec``'s polynomials in :func:`flatten`'s order, noting each tensor's."""
    if isinstance(spec, TensorSpec):
        dims = tuple(next(polys) for _ in spec.shape)
        if spec.id is not None:
            out.setdefault(spec.id, (spec, dims))
    elif isinstance(spec, ListSpec):
        for s in spec.items:
            _walk(s, polys, out)
    else:
        _skip(spec.value, polys)


def _skip(value: object, polys: Iterator[Poly]) -> None:
    if isinstance(value, int) and not isinstance(value, bool):
        next(polys)
    elif isinstance(value, tuple):
        for v in value:
            _skip(v, polys)


def _solve(design: Sequence[Point], monos: Sequence[Monomial]) -> list[list[Fraction]]:
    """The inverse of the design matrix (rows: points, columns: monomials), exactly."""
    n = len(monos)
    a = [
        [Fraction(math.prod(p[i] for i in m)) for m in monos] + [Fraction(int(r == c)) for c in range(n)]
        for r, p in enumerate(design)
    ]
    for col in range(n):
        pivot = next((r for r in range(col, n) if a[r][col] != 0), None)
        if pivot is None:
            raise FitError("the design points do not determine the fit")
        a[col], a[pivot] = a[pivot], a[col]
        lead = a[col][col]
        a[col] = [x / lead for x in a[col]]
        for r in range(n):
            if r != col and a[r][col] != 0:
                f = a[r][col]
                a[r] = [x - f * y for x, y in zip(a[r], a[col], strict=True)]
    return [row[n:] for row in a]


def fit(traces: Sequence[Trace], design: Sequence[Point], monos: Sequence[Monomial]) -> Template:
    """The template of ``traces`` (one per design point, in order)."""
    flat = [[flatten(c) for c in t.calls] for t in traces]
    first = flat[0]
    for t, p in zip(flat[1:], design[1:], strict=True):
        if len(t) != len(first):
            raise FitError(
                f"the model runs {len(first)} operators at {_describe(design[0])} and {len(t)} at {_describe(p)}"
            )
        for i, ((s0, _), (s1, _)) in enumerate(zip(first, t, strict=True)):
            if s0 != s1:
                call = traces[0].calls[i]
                raise FitError(
                    f"operator {i} ({call.kind} in '{call.scope[-1]}') differs between {_describe(design[0])} "
                    f"and {_describe(p)} beyond its sizes"
                )
    inverse = _solve(design, monos)
    solved: dict[tuple[int, ...], Poly] = {}  # by the values at the design points: most sizes repeat

    def poly(values: tuple[int, ...]) -> Poly:
        if values not in solved:
            coeffs = [sum((a * x for a, x in zip(row, values, strict=True)), Fraction(0)) for row in inverse]
            den = math.lcm(*(c.denominator for c in coeffs))
            solved[values] = Poly(tuple((m, int(c * den)) for m, c in zip(monos, coeffs, strict=True) if c), den)
        return solved[values]

    polys = [[poly(values) for values in zip(*(t[i][1] for t in flat), strict=True)] for i in range(len(first))]
    return Template(traces[0], list(traces[0].calls), polys, [structure for structure, _ in first])


def verify(template: Template, trace: Trace, point: Point) -> None:
    """Refuse the fit unless it rebuilds ``trace`` (taken at ``point``) record for record."""
    calls = trace.calls
    if len(calls) != len(template.calls):
        raise FitError(f"the model runs {len(calls)} operators at {_describe(point)}, {len(template.calls)} elsewhere")
    for i, (c, ps, expected) in enumerate(zip(template.calls, template.polys, template.structures, strict=True)):
        structure, ints = flatten(calls[i])
        if structure != expected or ints != [p.at(point) for p in ps]:
            raise FitError(
                f"operator {i} ({c.kind} in '{c.scope[-1]}') at {_describe(point)} is not what the fit predicts: "
                "its sizes are not multilinear in batch, tokens and cache length"
            )
