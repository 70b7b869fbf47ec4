"""JetMoE's two mixture-of-experts blocks recognised and routed by expectation: its MLP
(``JetMoeMoE``: parallel experts, each a gated FFN) and its mixture of attention heads
(``JetMoeMoA``: each expert a query projection and an output projection around one shared
key/value projection; JetMoE paper, Shen et al. 2024, after Zhang et al. 2022, "Mixture of
Attention Heads").

Both routers run as the model wrote them up to their top-k and softmax; what follows them sorts
tokens by expert and reads the counts back (``.tolist()``), which meta tensors cannot follow. Expert
``e`` of ``E`` instead runs on :func:`.routing.expert_loads` of the ``T x top_k`` routes, reading its
slice of the stacked weights once, as a grouped GEMM does. The attention between the two query and
output projections attends each of a token's ``top_k x kv_heads`` query heads to one of the
``kv_heads`` cached key/value heads: the model copies the cache ``top_k`` times first
(``repeat``), which serving kernels do not (grouped-query attention reads each KV head once), so
under opcount's serving attention the copy is left out.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ...errors import OpcountError
from ...transformers_internals import attention_implementation
from ..attention.serving import ATTENTION
from ..patching import patched
from .routing import Experts, add_slices, expert_loads, remove_slices

FAMILY = "jetmoe"  # the Experts.family of the blocks this module recognises and routes
_MOE, _MOA = "JetMoeMoE", "JetMoeMoA"


def _stack(module: Any) -> bool:
    """JetMoE's parallel experts: ``weight`` of ``[experts, out, in]``."""
    weight, count = getattr(module, "weight", None), getattr(module, "num_experts", None)
    return (
        isinstance(weight, nn.Parameter) and weight.dim() == 3 and isinstance(count, int) and weight.shape[0] == count
    )


def _is_block(module: nn.Module, kind: str) -> bool:
    router = getattr(module, "router", None)
    return (
        type(module).__name__ == kind
        and all(_stack(getattr(module, n, None)) for n in ("input_linear", "output_linear"))
        and isinstance(getattr(router, "layer", None), nn.Linear)
        and isinstance(getattr(router, "top_k", None), int)
        and isinstance(getattr(module, "bias", None), nn.Parameter)
    )


def _is_attention(module: nn.Module) -> bool:
    """The attention around a mixture of attention heads: its ``experts``, a shared ``kv_proj``."""
    fields = ("top_k", "head_dim", "layer_idx")
    return (
        _is_block(getattr(module, "experts", nn.Module()), _MOA)
        and isinstance(getattr(module, "kv_proj", None), nn.Linear)
        and all(isinstance(getattr(module, f, None), int) for f in fields)
    )


def _record(name: str, block: str, module: Any) -> Experts:
    inp, out = module.input_linear.weight, module.output_linear.weight
    if inp.shape[0] != out.shape[0] or module.router.layer.out_features != inp.shape[0]:
        raise OpcountError(
            f"{name}: {inp.shape[0]} input experts, {out.shape[0]} output, router over a different count"
        )
    per_expert = inp[0].numel() + out[0].numel()
    return Experts(
        name=name,
        block=block,
        count=int(inp.shape[0]),
        top_k=int(module.router.top_k),
        per_expert=per_expert,
        family=FAMILY,
    )


def find(modules: dict[str, nn.Module], config: Any) -> tuple[list[Experts], set[str]]:
    """JetMoE's expert blocks in ``modules`` and every module name inside them. A ``JetMoeMoA``
    anywhere but in the attention it serves is left to :func:`.moe.find_experts`, which refuses it."""
    found: list[Experts] = []
    for name, module in modules.items():
        if _is_block(module, _MOE):
            found.append(_record(name, name, module))
        elif _is_attention(module):
            found.append(_record(f"{name}.experts", name, module.experts))
    blocks = tuple(e.block + "." for e in found)
    return found, {n for n in modules if (n + ".").startswith(blocks)}


# ------------------------------------------------------------------------------------------------
# Expected routing
# ------------------------------------------------------------------------------------------------
def _gates(router: Any, flat: torch.Tensor) -> torch.Tensor:
    """The router as the model runs it up to its weights: logits, top-k, softmax over the k."""
    logits = router.layer(flat).float()
    top, _ = logits.topk(router.top_k, dim=1)
    return torch.softmax(top, dim=1).type_as(flat)


def _project(stack: nn.Module, e: int, x: torch.Tensor) -> torch.Tensor:
    weight = stack._buffers[f"weight[{e}]"]
    assert weight is not None  # made by add_slices for every expert
    return torch.nn.functional.linear(x, weight)


def _moe_forward(self: Any, layer_input: torch.Tensor) -> torch.Tensor:
    """The MLP block: expert ``e`` on its share of the tokens (gate and up, the activation, down),
    weighted by the router and summed back into their rows, then the block's bias."""
    batch, length, width = layer_input.shape
    flat = layer_input.reshape(-1, width)
    gates = _gates(self.router, flat)
    out = torch.zeros_like(flat)
    for e, load in enumerate(expert_loads(flat.shape[0], self.router.top_k, self.input_linear.num_experts)):
        if load == 0:
            continue  # an expert no token reaches is not read
        gate, up = _project(self.input_linear, e, flat[:load]).chunk(2, dim=-1)
        y = _project(self.output_linear, e, self.activation(gate) * up) * gates[:load, :1]
        out.index_add_(0, torch.arange(load, device=flat.device), y)
    bias: torch.Tensor = self.bias
    return out.view(batch, length, width) + bias


def _attention_forward(
    self: Any,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    cache: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, Any, torch.Tensor]:
    """JetMoE's attention with its query and output experts routed by expectation; the KV heads
    copied ``top_k`` times only where transformers' own attention runs (it needs them so)."""
    model_code = sys.modules[type(self).__module__]
    moa, k = self.experts, self.top_k
    batch, length, width = hidden_states.shape
    flat = hidden_states.reshape(-1, width)
    tokens = flat.shape[0]
    gates = _gates(moa.router, flat)
    loads = expert_loads(tokens, k, moa.num_experts)
    starts = [sum(loads[:e]) for e in range(len(loads))]
    query = flat.new_zeros((tokens * k, moa.input_linear.output_size))  # in route order: token t's k routes
    for e, (start, load) in enumerate(zip(starts, loads, strict=True)):
        if load:
            rows = torch.arange(start, start + load, device=flat.device)
            query.index_add_(0, rows, _project(moa.input_linear, e, flat[:load]))
    query = query.view(batch, length, -1, self.head_dim).transpose(1, 2)
    key, value = self.kv_proj(hidden_states).chunk(2, dim=-1)
    key = key.view(batch, length, -1, self.head_dim).transpose(1, 2)
    value = value.view(batch, length, -1, self.head_dim).transpose(1, 2)
    if position_embeddings is None:
        raise OpcountError(f"{type(self).__name__}: called without position embeddings")
    cos, sin = position_embeddings
    query, key = model_code.apply_rotary_pos_emb(query, key, cos, sin)
    cache = cache if cache is not None else kwargs.pop("past_key_values", None)
    if cache is not None:
        key, value = cache.update(key, value, self.layer_idx, kwargs=kwargs)
    implementation = attention_implementation(self.config)
    if implementation != ATTENTION:  # transformers' kernels pair query head h with KV head h mod kv_heads
        key, value = key.repeat(1, k, 1, 1), value.repeat(1, k, 1, 1)
    attend = model_code.ALL_ATTENTION_FUNCTIONS.get_interface(implementation, model_code.eager_attention_forward)
    out, weights = attend(self, query, key, value, attention_mask, dropout=0.0, scaling=self.scaling, **kwargs)
    rows, weight = out.reshape(tokens * k, -1), gates.reshape(-1, 1)
    merged = torch.zeros_like(flat)
    for e, (start, load) in enumerate(zip(starts, loads, strict=True)):
        if load:
            y = _project(moa.output_linear, e, rows[start : start + load]) * weight[start : start + load]
            merged.index_add_(0, torch.arange(load, device=flat.device), y)
    return merged.view(batch, length, width) + moa.bias, weights, gates


@contextlib.contextmanager
def routed(model: nn.Module, found: list[Experts]) -> Iterator[list[str]]:
    """JetMoE's blocks in ``found`` route by expectation for the block; yields their names."""
    modules = dict(model.named_modules())
    forwards: list[tuple[object, str, Any]] = []
    for e in found:
        block, experts = modules[e.block], modules[e.name]
        forward = _attention_forward if block is not experts else _moe_forward
        forwards.append((block, "forward", types.MethodType(forward, block)))
    stacks = [stack for e in found for stack in (modules[e.name].input_linear, modules[e.name].output_linear)]
    try:
        with patched(forwards):
            for e in found:
                experts = modules[e.name]
                for stack in (experts.input_linear, experts.output_linear):
                    add_slices(stack, "weight", e.count)
            yield [e.block for e in found]
    finally:
        for stack in stacks:
            remove_slices(stack)
