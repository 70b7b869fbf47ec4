"""einsum: the multiply-adds of the cheapest pairwise contraction order, computed here.

Each pairwise contraction of two intermediates costs the product of the sizes of every index
either of them carries (output, batch and summed indices alike): one multiply-add per point of
the joint index space. The order is chosen by an exact dynamic program over operand subsets
(as numpy's ``optimize="optimal"`` does, but without a memory limit on intermediates, and its
cost is computed here, never parsed from ``einsum_path`` text). ``...`` broadcasts like torch.

fvcore's values agree wherever every pairwise contraction sums over at least one index (e.g. the
batched matmuls ``abc,abd->acd``); numpy, which fvcore asks, charges a contraction without a
summed index (an outer product) half, and may pick another order under its memory limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from ..ir import Spec, const, tensors
from ._shapes import first_tensor_out, shape_of
from .registry import FLOPS

EINSUM_EQUATION, EINSUM_OPERANDS = 0, 1
# Above this many operands the exact search (3^n) gives way to a greedy pairing.
EXACT_MAX_OPERANDS = 10

Label = str


def parse_einsum(
    equation: str, shapes: Sequence[Sequence[int]]
) -> tuple[list[tuple[Label, ...]], tuple[Label, ...], dict[Label, int]]:
    """Operand labels, output labels and label sizes of an einsum equation.

    Dimensions under ``...`` get labels ``"...k"`` (k counted from the right, so they broadcast
    right-aligned); an implicit output is the ellipsis then the letters used once, sorted.
    """
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ValueError(f"einsum {equation!r}: {len(terms)} terms for {len(shapes)} operands")
    operands: list[tuple[Label, ...]] = []
    sizes: dict[Label, int] = {}
    ellipsis_rank = 0
    for term, shape in zip(terms, shapes, strict=True):
        labels = _term_labels(term, len(shape), equation)
        ellipsis_rank = max(ellipsis_rank, sum(1 for lab in labels if lab.startswith("...")))
        for lab, size in zip(labels, shape, strict=True):
            known = sizes.get(lab, 1)
            if size != known and 1 not in (size, known):
                raise ValueError(
                    f"einsum {equation!r}: index {lab!r} has sizes {known} and {size} in {list(map(tuple, shapes))}"
                )
            sizes[lab] = max(size, known)
        operands.append(labels)
    ellipsis = tuple(f"...{k}" for k in range(ellipsis_rank - 1, -1, -1))
    if arrow:
        head, dots, tail = rhs.partition("...")
        output = (*head, *ellipsis, *tail) if dots else tuple(rhs)
    else:
        counts: dict[Label, int] = {}
        for labels in operands:
            for lab in labels:
                counts[lab] = counts.get(lab, 0) + 1
        output = (*ellipsis, *sorted(lab for lab, c in counts.items() if c == 1 and not lab.startswith("...")))
    for lab in output:
        if lab not in sizes:
            raise ValueError(f"einsum {equation!r}: output index {lab!r} is in no operand")
    return operands, output, sizes


def _term_labels(term: str, rank: int, equation: str) -> tuple[Label, ...]:
    if "..." not in term:
        if len(term) != rank:
            raise ValueError(f"einsum {equation!r}: term {term!r} has {len(term)} indices for rank {rank}")
        return tuple(term)
    head, _, tail = term.partition("...")
    n_ellipsis = rank - len(head) - len(tail)
    if n_ellipsis < 0:
        raise ValueError(f"einsum {equation!r}: term {term!r} does not fit rank {rank}")
    return (*head, *(f"...{k}" for k in range(n_ellipsis - 1, -1, -1)), *tail)


def contraction_macs(operands: Sequence[Sequence[Label]], output: Sequence[Label], sizes: Mapping[Label, int]) -> int:
    """Multiply-adds of the cheapest pairwise contraction order.

    One operand: a pure permutation or diagonal costs 0; a sum over indices costs the product of
    all its index sizes (one add per element read, as numpy counts it).
    """
    sets = [frozenset(op) for op in operands]
    out = frozenset(output)
    if len(sets) == 1:
        return _volume(sets[0], sizes) if sets[0] - out else 0
    if len(sets) > EXACT_MAX_OPERANDS:
        return _greedy(sets, out, sizes)
    return _optimal(sets, out, sizes)


def _volume(labels: frozenset[Label], sizes: Mapping[Label, int]) -> int:
    return math.prod(sizes[lab] for lab in labels)


def _optimal(sets: list[frozenset[Label]], out: frozenset[Label], sizes: Mapping[Label, int]) -> int:
    n = len(sets)
    full = (1 << n) - 1
    labels_of: list[frozenset[Label]] = [frozenset()] * (1 << n)  # all labels of the operands in a subset
    for s in range(1, 1 << n):
        low = s & -s
        labels_of[s] = labels_of[s ^ low] | sets[low.bit_length() - 1]
    # Indices an intermediate must keep: in the output or still needed by an operand outside it.
    kept = [labels_of[s] & (out | labels_of[full ^ s]) for s in range(1 << n)]
    best = [0] * (1 << n)
    for s in range(1, 1 << n):
        if s & (s - 1) == 0:
            continue  # a single operand is free until contracted
        low = s & -s
        cheapest = None
        sub = (s - 1) & s
        while sub:
            if sub & low:  # each split once: the part holding the lowest operand
                rest = s ^ sub
                cost = best[sub] + best[rest] + _volume(kept[sub] | kept[rest], sizes)
                if cheapest is None or cost < cheapest:
                    cheapest = cost
            sub = (sub - 1) & s
        best[s] = cheapest if cheapest is not None else 0
    return best[full]


def _greedy(sets: list[frozenset[Label]], out: frozenset[Label], sizes: Mapping[Label, int]) -> int:
    items = list(sets)
    total = 0
    while len(items) > 1:
        choice = None
        for i in range(len(items)):
            for j in range(i + 1, len(items)):
                cost = _volume(items[i] | items[j], sizes)
                if choice is None or cost < choice[0]:
                    choice = (cost, i, j)
        assert choice is not None
        cost, i, j = choice
        others = frozenset().union(*(items[k] for k in range(len(items)) if k not in (i, j)))
        merged = (items[i] | items[j]) & (out | others)
        items = [items[k] for k in range(len(items)) if k not in (i, j)] + [merged]
        total += cost
    return total


def einsum_macs(equation: str, shapes: Sequence[Sequence[int]]) -> int:
    """Multiply-adds of ``torch.einsum(equation, *operands of these shapes)``."""
    operands, output, sizes = parse_einsum(equation, shapes)
    return contraction_macs(operands, output, sizes)


# out = einsum(equation, [operands...], path=None)
@FLOPS.register("aten::einsum", macs=True, fvcore=True)
def einsum(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """Sum over the cheapest pairwise contraction order of prod(sizes of every index of the pair), found by exact search (greedy above 10 operands); any number of operands and ``...``."""
    equation = const(inputs[EINSUM_EQUATION])
    if not isinstance(equation, str):
        raise ValueError(f"aten::einsum: argument {EINSUM_EQUATION} is not the equation: {equation!r}")
    shapes = [t.shape for t in tensors(inputs[EINSUM_OPERANDS])]
    return einsum_macs(equation, shapes)


# [*, out] = bilinear([*, in1], [*, in2], weight [out, in1, in2], bias)
BILINEAR_X1, BILINEAR_X2, BILINEAR_WEIGHT = 0, 1, 2


@FLOPS.register("aten::bilinear", macs=True)
def bilinear(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """y = x1^T W x2 + b as einsum('ni,oij,nj->no'), n = prod(batch): the cheapest of its three orders, typically n * out * (in1 * in2 + min(in1, in2)); bias not counted."""
    x1, x2, w = (shape_of(inputs[i]) for i in (BILINEAR_X1, BILINEAR_X2, BILINEAR_WEIGHT))
    n = first_tensor_out(outputs).numel // w[0] if w[0] else 0
    return einsum_macs("ni,oij,nj->no", [(n, x1[-1]), tuple(w), (n, x2[-1])])
