"""Pruning what-ifs: a pruned deep copy of a model (by magnitude, to a sparsity pattern) whose
zeros the sparsity roofline then measures. The model itself is never changed."""

from __future__ import annotations

import copy
import fnmatch
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from ..errors import OpcountValueError
from .declared import SparsitySpec
from .gemm import from_gemm_view, gemm_view, padded, tile_sizes, tile_sums
from .patterns import Sparsity


def prunable_weights(model: nn.Module) -> dict[str, tuple[torch.Tensor, str]]:
    """Weights of linears, convolutions and attention input projections, with their GEMM view."""
    found: dict[str, tuple[torch.Tensor, str]] = {}
    for prefix, module in model.named_modules():
        dot = f"{prefix}." if prefix else ""
        if isinstance(module, nn.Linear):
            found[f"{dot}weight"] = (module.weight, "linear")
        elif isinstance(module, nn.modules.conv._ConvNd):
            found[f"{dot}weight"] = (module.weight, "conv_transpose" if module.transposed else "conv")
        elif isinstance(module, nn.MultiheadAttention):
            for attr in ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight"):
                weight = getattr(module, attr, None)
                if isinstance(weight, nn.Parameter):
                    found[f"{dot}{attr}"] = (weight, "linear")
    return found


def _select(names: Iterable[str], include: Sequence[str] | None, exclude: Sequence[str] | None) -> list[str]:
    def hit(name: str, globs: Sequence[str]) -> bool:
        module = name.rpartition(".")[0]
        return any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(module, g) for g in globs)

    return [n for n in names if (include is None or hit(n, include)) and not (exclude and hit(n, exclude))]


def _keep_top(scores: Sequence[torch.Tensor], drop: int) -> list[torch.Tensor]:
    """Masks keeping all but the ``drop`` smallest scores over all tensors (ties broken by order)."""
    flat = torch.cat([s.reshape(-1) for s in scores])
    keep = torch.ones_like(flat, dtype=torch.bool)
    if drop > 0:
        threshold = flat.kthvalue(drop).values
        below = flat < threshold
        keep &= ~below
        ties = (flat == threshold).nonzero().reshape(-1)[: drop - int(below.sum())]
        keep[ties] = False
    return list(keep.split([s.numel() for s in scores]))  # type: ignore[no-untyped-call]  # torch leaves Tensor.split unannotated


@torch.no_grad()
def prune(
    model: nn.Module,
    sparsity: SparsitySpec,
    *,
    scope: str = "global",
    include: Sequence[str] | None = None,
    exclude: Sequence[str] | None = None,
) -> nn.Module:
    """A pruned deep copy of ``model`` (``model`` itself is never changed), for what-if analysis.

    Prunes the weights of linears, convolutions and attention input projections (:func:`prunable_weights`;
    ``include`` / ``exclude``: globs over parameter or module names) by magnitude:
    unstructured keeps the largest |w|; block keeps the b x b blocks (of the GEMM view) with the
    largest mean |w|; N:M keeps the n largest |w| of every group of m along the reduction.
    ``scope="global"`` ranks weights or blocks across all selected weights together (global
    magnitude pruning, as in the Sparsity Roofline paper), ``"layer"`` prunes every weight to the
    level on its own.
    Biases and normalization parameters are left alone. The copy is not re-trained.
    """
    s = Sparsity.parse(sparsity)
    if scope not in ("global", "layer"):
        raise OpcountValueError(f"scope must be 'global' or 'layer', got {scope!r}")
    pruned = copy.deepcopy(model)
    weights = prunable_weights(pruned)
    chosen = _select(weights, include, exclude)
    if include is not None and not chosen:
        raise OpcountValueError(f"include={list(include)} selects no prunable weight")
    if s.pattern == "dense" or not chosen:
        return pruned
    views = [gemm_view(weights[n][0].detach(), weights[n][1]) for n in chosen]
    if s.pattern == "nm":
        masks = [_nm_mask(v, s.n, s.m) for v in views]
    else:
        b = s.block_size if s.pattern == "block" else 1
        # Block score: mean |w| over the block's real elements (edge blocks are smaller).
        scores = [
            tile_sums(v.abs().float(), b) / tile_sizes(v.shape[0], v.shape[1], b) if b > 1 else v.abs().float()
            for v in views
        ]
        groups = [scores] if scope == "global" else [[x] for x in scores]
        keeps = [k for g in groups for k in _keep_top(g, round(s.level * sum(x.numel() for x in g)))]
        masks = [_expand(k.reshape(x.shape), b, v.shape) for k, x, v in zip(keeps, scores, views, strict=True)]
    for name, mask in zip(chosen, masks, strict=True):
        weight, view = weights[name]
        weight.mul_(from_gemm_view(mask, view, weight.shape).to(weight.dtype))
    return pruned


def _expand(keep: torch.Tensor, b: int, shape: torch.Size) -> torch.Tensor:
    if b == 1:
        return keep
    full = keep.repeat_interleave(b, 0).repeat_interleave(b, 1)
    return full[: shape[0], : shape[1]]


def _nm_mask(view: torch.Tensor, n: int, m: int) -> torch.Tensor:
    rows, cols = view.shape
    # Padding scores -1 sort below every |w|, so a partial last group keeps its real values.
    groups = padded(view.abs().float(), 1, m, value=-1.0).reshape(rows, -1, m)
    keep = torch.zeros_like(groups, dtype=torch.bool)
    keep.scatter_(-1, groups.topk(n, dim=-1).indices, True)
    return keep.reshape(rows, -1)[:, :cols]
