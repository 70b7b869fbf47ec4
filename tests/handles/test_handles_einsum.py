"""einsum: the cheapest pairwise contraction order, against hand-worked orders and numpy."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opcount.handles.einsum import einsum_macs, parse_einsum
from tests.fixtures.specs import NONE, C, L, T, flops


def test_two_operand_contractions() -> None:
    # batched matmul: b*i*j*k
    assert einsum_macs("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]) == 2 * 3 * 4 * 5
    # fvcore's special case abc,abd->acd: a*b*c*d
    assert einsum_macs("abc,abd->acd", [(2, 3, 4), (2, 3, 5)]) == 120
    # maxvit's attention scores, with spaces in the equation
    assert einsum_macs("B G H I D, B G H J D -> B G H I J", [(1, 64, 2, 49, 32)] * 2) == 64 * 2 * 49 * 49 * 32


def test_chain_picks_the_cheapest_order() -> None:
    # (ij,jk) first: 10*100*5 = 5000, then ik,kl: 10*5*50 = 2500 -> 7500
    # (jk,kl) first would cost 100*5*50 + 10*100*50 = 75000
    assert einsum_macs("ij,jk,kl->il", [(10, 100), (100, 5), (5, 50)]) == 7500
    # reversed sizes: now (jk,kl) first is cheapest: 5*100*10 = 5000, then ij,jl: 50*5*10 = 2500
    assert einsum_macs("ij,jk,kl->il", [(50, 5), (5, 100), (100, 10)]) == 7500


def test_ellipsis_and_implicit_output() -> None:
    # '...ij,...jk' broadcasts the batch (2, 3) against none: 2*3*4*5*6
    assert einsum_macs("...ij,...jk", [(2, 3, 4, 5), (5, 6)]) == 720
    # implicit output of 'ij,jk' is 'ik'
    assert einsum_macs("ij,jk", [(3, 4), (4, 5)]) == 60
    _, output, sizes = parse_einsum("...ij,...jk", [(2, 3, 4, 5), (5, 6)])
    assert output == ("...1", "...0", "i", "k")
    assert sizes["...1"] == 2 and sizes["j"] == 5


def test_single_operand() -> None:
    assert einsum_macs("ij->ji", [(3, 4)]) == 0  # a permutation
    assert einsum_macs("ii->i", [(3, 3)]) == 0  # a diagonal
    assert einsum_macs("ij->j", [(3, 4)]) == 12  # a sum reads every element once
    assert einsum_macs("ii", [(5, 5)]) == 5  # trace: labels i summed


def test_outer_product_counts_every_product() -> None:
    assert einsum_macs("i,j->ij", [(3,), (4,)]) == 12


def test_handle_reads_equation_and_operands() -> None:
    inputs = [C("bhqd,bhkd->bhqk"), L(T(2, 4, 8, 16), T(2, 4, 10, 16)), NONE]
    assert flops("aten::einsum", inputs, [T(2, 4, 8, 10)]) == 2 * 4 * 8 * 10 * 16


def test_bad_equations_fail_loudly() -> None:
    with pytest.raises(ValueError, match="einsum"):
        einsum_macs("ij,jk->ik", [(2, 3)])
    with pytest.raises(ValueError, match="einsum"):
        einsum_macs("ij,jk->ik", [(2, 3), (4, 5)])
    with pytest.raises(ValueError, match="einsum"):
        einsum_macs("ij->iz", [(2, 3)])


def _numpy_path_macs(equation: str, shapes) -> int:
    """Our cost of the order numpy's optimizer picks (numpy only chooses; no text is parsed)."""
    arrays = [np.zeros(s) for s in shapes]
    path, _ = np.einsum_path(equation, *arrays, optimize=("optimal", 1e30))
    terms, out = equation.split("->")
    labels = [set(t) for t in terms.split(",")]
    sizes = {c: n for t, s in zip(terms.split(","), shapes, strict=True) for c, n in zip(t, s, strict=True)}
    total = 0
    for pair in path[1:]:
        picked = [labels[i] for i in pair]
        for i in sorted(pair, reverse=True):
            labels.pop(i)
        union = set().union(*picked)
        total += math.prod(sizes[c] for c in union)
        labels.append(union & (set(out) | set().union(*labels)))
    return total


def _brute_force_macs(terms: list[str], out: str, sizes: dict[str, int]) -> int:
    """Every order of pairwise contractions, tried recursively."""
    if len(terms) == 1:
        return 0
    best = None
    for i, j in itertools.combinations(range(len(terms)), 2):
        rest = [t for k, t in enumerate(terms) if k not in (i, j)]
        union = set(terms[i]) | set(terms[j])
        keep = "".join(sorted(union & (set(out) | set("".join(rest)))))
        cost = math.prod(sizes[c] for c in union) + _brute_force_macs([*rest, keep], out, sizes)
        best = cost if best is None else min(best, cost)
    assert best is not None
    return best


EQUATIONS = ["ij,jk,kl->il", "ij,jk,kl,lm->im", "bij,bjk,kl->bil", "ab,bc,ca->", "abc,cd,de->abe"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(EQUATIONS), st.lists(st.integers(1, 7), min_size=6, max_size=6))
def test_optimal_order_matches_brute_force_and_beats_numpy(equation: str, dims: list[int]) -> None:
    terms, out = equation.split("->")
    letters = sorted(set(terms) - {","})
    sizes = dict(zip(letters, dims, strict=False))  # six sizes drawn, at most six letters used
    shapes = [tuple(sizes[c] for c in t) for t in terms.split(",")]
    macs = einsum_macs(equation, shapes)
    assert macs == _brute_force_macs(terms.split(","), out, sizes)
    # numpy charges contractions without a summed index half, so its order can cost us more
    assert macs <= _numpy_path_macs(equation, shapes)


def test_bilinear_is_the_cheapest_einsum_order() -> None:
    # nn.Bilinear(5, 3, 4) on a batch of 2, y[n,o] = x1[n,i] W[o,i,j] x2[n,j]:
    # x1 into W first: 2*4*5*3 = 120, then with x2 over j: 2*4*3 = 24 -> 144
    # (x2 first: 120 + 2*4*5 = 160; the outer product x1 x2 first: 2*5*3 + 2*4*5*3 = 150)
    args = [T(2, 5), T(2, 3), T(4, 5, 3), T(4)]
    assert flops("aten::bilinear", args, [T(2, 4)]) == 144
    # leading batch dims fold into n: [3, 2, 5] -> n = 6
    args = [T(3, 2, 5), T(3, 2, 3), T(4, 5, 3), NONE]
    assert flops("aten::bilinear", args, [T(3, 2, 4)]) == 3 * 144
