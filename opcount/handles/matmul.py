"""Matrix products: one multiply-add per output element per contracted index."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec
from ._shapes import numel, shape_of
from .registry import FLOPS

# aten::addmm(input, mat1, mat2, beta, alpha)
ADDMM_MAT1, ADDMM_MAT2 = 1, 2


def mm_macs(a: Sequence[int], b: Sequence[int]) -> int:
    """MACs of ``[n, m] @ [m, p]``: n*m*p."""
    (n, m), (m2, p) = a, b
    if m != m2:
        raise ValueError(f"mm: inner dimensions differ: {tuple(a)} @ {tuple(b)}")
    return n * m * p


@FLOPS.register("aten::addmm", macs=True, fvcore=True)
def addmm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, p] = addmm(bias, [n, m], [m, p]): n*m*p multiply-adds; the bias add is not counted (fvcore)."""
    return mm_macs(shape_of(inputs[ADDMM_MAT1]), shape_of(inputs[ADDMM_MAT2]))


@FLOPS.register("aten::mm", macs=True, fvcore=True)
def mm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, p] = mm([n, m], [m, p]): n*m*p multiply-adds."""
    return mm_macs(shape_of(inputs[0]), shape_of(inputs[1]))


@FLOPS.register("aten::bmm", macs=True, fvcore=True)
def bmm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[b, n, p] = bmm([b, n, m], [b, m, p]): b*n*m*p multiply-adds."""
    (b, n, m), (_, _, p) = shape_of(inputs[0]), shape_of(inputs[1])
    return b * n * m * p


def matmul_macs(a: Sequence[int], b: Sequence[int]) -> int:
    """MACs of ``torch.matmul(a, b)`` with 1-D operands and batch broadcasting.

    A 1-D left operand is a row vector, a 1-D right operand a column vector; the batch
    dimensions broadcast. MACs = prod(broadcast batch) * n * m * p.
    """
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    *ba, n, m = a2
    *bb, m2, p = b2
    if m != m2:
        raise ValueError(f"matmul: inner dimensions differ: {tuple(a)} @ {tuple(b)}")
    batch = numel(_broadcast(tuple(ba), tuple(bb)))
    return batch * n * m * p


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    width = max(len(a), len(b))
    a = (1,) * (width - len(a)) + a
    b = (1,) * (width - len(b)) + b
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ValueError(f"shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


@FLOPS.register("aten::matmul", macs=True, fvcore=True)
def matmul(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """out = matmul(a, b), numpy semantics: prod(batch) * n * m * p multiply-adds (1-D operands as vectors)."""
    return matmul_macs(shape_of(inputs[0]), shape_of(inputs[1]))


@FLOPS.register("aten::linear", macs=True, fvcore=True)
def linear(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[..., out] = linear([..., in], weight [out, in], bias): prod(x.shape) * out multiply-adds."""
    x, w = shape_of(inputs[0]), shape_of(inputs[1])
    out_features = w[0] if len(w) == 2 else 1
    return numel(x) * out_features
