"""Matrix products: one multiply-add per output element per contracted index."""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import Spec, const
from ._shapes import first_tensor_out, numel, shape_of
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
    for x, y in zip(a, b, strict=True):
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


# --- the rest of the matmul family -------------------------------------------------

# baddbmm(self, batch1, batch2, beta, alpha) / addbmm(self, batch1, batch2, beta, alpha)
BADDBMM_BATCH1, BADDBMM_BATCH2 = 1, 2


def bmm_macs(a: Sequence[int], b: Sequence[int], op: str = "bmm") -> int:
    """MACs of ``[b, n, m] @ [b, m, p]``: b*n*m*p."""
    if len(a) != 3 or len(b) != 3:
        raise ValueError(f"{op}: expected 3-D operands, got {tuple(a)} and {tuple(b)}")
    (batch, n, m), (batch2, m2, p) = a, b
    if m != m2 or batch != batch2:
        raise ValueError(f"{op}: shapes do not fit: {tuple(a)} @ {tuple(b)}")
    return batch * n * m * p


@FLOPS.register("aten::baddbmm", "aten::baddbmm_", macs=True)
def baddbmm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[b, n, p] = baddbmm(bias, [b, n, m], [b, m, p]): b*n*m*p multiply-adds; the bias add is not counted (as addmm in fvcore)."""
    return bmm_macs(shape_of(inputs[BADDBMM_BATCH1]), shape_of(inputs[BADDBMM_BATCH2]), "aten::baddbmm")


@FLOPS.register("aten::addbmm", "aten::addbmm_", macs=True)
def addbmm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, p] = addbmm(bias, [b, n, m], [b, m, p]) (sum over b): b*n*m*p multiply-adds; the bias add is not counted."""
    return bmm_macs(shape_of(inputs[BADDBMM_BATCH1]), shape_of(inputs[BADDBMM_BATCH2]), "aten::addbmm")


# [n] = mv([n, m], [m]); addmv(bias, mat, vec, beta, alpha)
ADDMV_MAT, ADDMV_VEC = 1, 2


def mv_macs(a: Sequence[int], v: Sequence[int], op: str = "mv") -> int:
    """MACs of ``[n, m] @ [m]``: n*m."""
    if len(a) != 2 or len(v) != 1 or a[1] != v[0]:
        raise ValueError(f"{op}: shapes do not fit: {tuple(a)} @ {tuple(v)}")
    return a[0] * a[1]


@FLOPS.register("aten::mv", macs=True)
def mv(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n] = mv([n, m], [m]): n*m multiply-adds."""
    return mv_macs(shape_of(inputs[0]), shape_of(inputs[1]), "aten::mv")


@FLOPS.register("aten::addmv", "aten::addmv_", macs=True)
def addmv(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n] = addmv(bias, [n, m], [m]): n*m multiply-adds; the bias add is not counted."""
    return mv_macs(shape_of(inputs[ADDMV_MAT]), shape_of(inputs[ADDMV_VEC]), "aten::addmv")


# [] = dot([n], [n])
@FLOPS.register("aten::dot", "aten::vdot", macs=True)
def dot(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[] = dot([n], [n]): n multiply-adds."""
    (n,), (n2,) = shape_of(inputs[0]), shape_of(inputs[1])
    if n != n2:
        raise ValueError(f"aten::dot: lengths differ: {n} and {n2}")
    return n


# [n, m] = outer([n], [m])
@FLOPS.register("aten::outer", "aten::ger", macs=True)
def outer(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """[n, m] = outer([n], [m]): n*m multiplies, each counted as one multiply-add."""
    (n,), (m,) = shape_of(inputs[0]), shape_of(inputs[1])
    return n * m


# tensordot(self, other, dims_self, dims_other): contract the listed dimensions pairwise.
TENSORDOT_DIMS_A = 2


@FLOPS.register("aten::tensordot", macs=True)
def tensordot(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """out = tensordot(a, b, dims_a, dims_b): numel(out) * prod(contracted sizes) multiply-adds."""
    a = shape_of(inputs[0])
    dims = const(inputs[TENSORDOT_DIMS_A])
    if not isinstance(dims, tuple):
        raise ValueError(f"aten::tensordot: expected a list of dims, got {dims!r}")
    return first_tensor_out(outputs).numel * numel([a[d] for d in dims])
