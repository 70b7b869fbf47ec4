"""Mixture-of-experts blocks whose router may also pick zero-computation experts (LongCat-Flash:
``zero_expert_num`` identity slots beside ``n_routed_experts`` FFN experts; LongCat-Flash
technical report, arXiv 2509.01322, section 2.1), recognised and routed by expectation.

The router scores ``E + Z`` slots and keeps ``top_k`` (as the model wrote it, bias correction
included). Expected routing spreads every token's ``top_k`` picks evenly over the ``E + Z`` slots,
so a token's picks land on real experts in proportion ``E / (E + Z)``: of the ``T x top_k`` routes,
``⌊T·top_k·E / (E + Z)⌋`` reach the real experts (spread evenly over them, :func:`.routing.expert_loads`)
and the rest an identity, which costs the token itself weighted and added back (one multiply and
one add per element for each token an identity reaches, as vLLM's zero-expert path adds
``x·w``). LongCat-Flash's 12 picks over 512 + 256 slots reach 8 real experts on average: its
published ~27B average activated parameters (18.6B to 31.3B per token).

transformers 5 stores the gate and up projections of ``E + Z`` experts (``gate_up_proj``) where
only the first ``E`` are ever read and the checkpoint holds ``E`` (vLLM allocates ``n_routed_experts``
experts): :func:`drop_unused` leaves the model opcount builds with the ``E`` it runs.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from ...errors import OpcountError
from ..patching import patched
from .routing import Experts, add_slices, expert_loads, real_routes, remove_slices

FAMILY = "zero_experts"  # the Experts.family of the blocks this module recognises and routes


def _counts(module: nn.Module) -> tuple[int, int] | None:
    """``(E, Z)`` of a block of experts with identity slots, None for any other module."""
    real, zero = getattr(module, "num_routed_experts", None), getattr(module, "zero_expert_num", None)
    if not (isinstance(real, int) and isinstance(zero, int) and zero > 0):
        return None
    if not isinstance(getattr(module, "identity_expert", None), nn.Identity):
        return None
    weights = [getattr(module, n, None) for n in ("gate_up_proj", "down_proj")]
    if not all(isinstance(w, nn.Parameter) and w.dim() == 3 for w in weights):
        return None
    return real, zero


def drop_unused(model: nn.Module) -> None:
    """Each identity-slot block's ``gate_up_proj`` cut to the ``E`` experts that read it (a view on
    meta: nothing allocated)."""
    for module in model.modules():
        counts = _counts(module)
        stack = getattr(module, "gate_up_proj", None)
        if counts is not None and isinstance(stack, nn.Parameter) and stack.shape[0] > counts[0]:
            module.gate_up_proj = nn.Parameter(stack[: counts[0]], requires_grad=stack.requires_grad)


def find(modules: dict[str, nn.Module], config: Any) -> tuple[list[Experts], set[str]]:
    """The experts with identity slots in ``modules`` (a block's ``experts``) and every module name
    inside their blocks; such experts anywhere else are left to :func:`.moe.find_experts`, which refuses them."""
    found: list[Experts] = []
    for block, holder in modules.items():
        module = getattr(holder, "experts", None)
        if not isinstance(module, nn.Module) or (counts := _counts(module)) is None:
            continue
        (real, zero), name = counts, f"{block}.experts"
        router = getattr(holder, "router", None)
        top_k, slots = getattr(router, "top_k", None), getattr(router, "n_routed_experts", None)
        if not isinstance(top_k, int) or slots != real + zero:
            raise OpcountError(f"{name}: {real} experts and {zero} identity slots, but no router choosing among both")
        gate_up, down = module._parameters["gate_up_proj"], module._parameters["down_proj"]
        assert gate_up is not None and down is not None  # checked by _counts
        if gate_up.shape[0] != real or down.shape[0] != real:
            raise OpcountError(
                f"{name}: gate_up_proj holds {gate_up.shape[0]} experts and down_proj {down.shape[0]} for {real} "
                "that run (transformers' stack for the identity slots too): build it with opcount "
                "(CausalLM(config)), which keeps the ones that run"
            )
        found.append(
            Experts(
                name=name,
                block=block,
                count=real,
                top_k=top_k,
                per_expert=gate_up[0].numel() + down[0].numel(),
                identity=zero,
                family=FAMILY,
            )
        )
    blocks = tuple(e.block + "." for e in found)
    return found, {n for n in modules if (n + ".").startswith(blocks)}


def _forward(found: Experts) -> Any:
    def forward(self: Any, hidden: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> Any:
        if top_k_index.shape[-1] != found.top_k or hidden.dim() != 2:
            raise OpcountError(f"{found.name}: called without (hidden [tokens, width], {found.top_k} experts a token)")
        tokens = hidden.shape[0]
        real = real_routes(tokens, found.top_k, found.count, found.identity)
        out = torch.zeros_like(hidden)
        for e, load in enumerate(expert_loads(real, 1, found.count)):
            if load == 0:
                continue  # an expert no token reaches is not read
            gate, up = torch.nn.functional.linear(hidden[:load], self._buffers[f"gate_up_proj[{e}]"]).chunk(2, dim=-1)
            y = torch.nn.functional.linear(self.act_fn(gate) * up, self._buffers[f"down_proj[{e}]"])
            out.index_add_(0, torch.arange(load, device=hidden.device), (y * top_k_weights[:load, :1]).to(hidden.dtype))
        reached = min(tokens, tokens * found.top_k - real)  # tokens an identity slot gives back, weighted
        if reached:
            y = hidden[:reached] * top_k_weights[:reached, :1]
            out.index_add_(0, torch.arange(reached, device=hidden.device), y.to(hidden.dtype))
        return out

    return forward


@contextlib.contextmanager
def routed(model: nn.Module, found: list[Experts]) -> Iterator[list[str]]:
    """The blocks in ``found`` route by expectation for the block; yields their names."""
    modules = dict(model.named_modules())
    held = [modules[e.name] for e in found]
    try:
        with patched((modules[e.name], "forward", types.MethodType(_forward(e), modules[e.name])) for e in found):
            for e, experts in zip(found, held, strict=True):
                for name in ("gate_up_proj", "down_proj"):
                    add_slices(experts, name, e.count)
            yield [e.block for e in found]
    finally:
        for experts in held:
            remove_slices(experts)
