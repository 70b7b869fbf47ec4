"""Expected routing's arithmetic, shared by every mixture-of-experts family (:mod:`.experts`,
:mod:`.jetmoe`, :mod:`.zero_experts`): the tokens each expert receives when every token's ``top_k``
routes are spread evenly, the record of one recognised set of routed experts, and an expert's slice
of a stacked weight named so that it is priced as the weight it is."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn


def expert_loads(tokens: int, top_k: int, experts: int) -> list[int]:
    """Tokens per expert under expected routing: ``tokens * top_k`` spread as evenly as integers allow."""
    share, extra = divmod(tokens * top_k, experts)
    return [share + (1 if e < extra else 0) for e in range(experts)]


@dataclass(frozen=True, kw_only=True)
class Experts:
    """One recognised set of routed experts: its module name, ``count`` experts of ``per_expert``
    parameters each, ``top_k`` of them per token, and the block that routes to them. ``identity``
    more slots the router may pick run no computation (LongCat-Flash's zero-computation experts):
    a token's ``top_k`` picks then reach ``top_k x count / (count + identity)`` real experts on
    average, rounded down (:func:`real_routes`). ``family``: the module that recognised and routes
    them, ``""`` for :mod:`.experts`' own layouts, else a family's ``FAMILY`` (:mod:`.jetmoe`,
    :mod:`.zero_experts`)."""

    name: str
    block: str
    count: int
    top_k: int
    per_expert: int
    identity: int = 0
    family: str = ""

    @property
    def inactive(self) -> int:
        """Parameters of the experts a token does not go to: ``(count - top_k) x per_expert``, or
        ``count`` less the real experts a token reaches on average where some slots are identities."""
        return self.count * self.per_expert - real_routes(1, self.top_k * self.per_expert, self.count, self.identity)

    @property
    def regions(self) -> tuple[int, int]:
        """``(k, n)`` such that the loads of ``T`` tokens are affine in ``T`` within one residue of
        ``T·k mod n`` (:func:`.symbolic.region`): ``(top_k, count)``; with identity slots, the real
        routes ``⌊T·top_k·count / (count + identity)⌋`` repeat their residue mod ``count`` every
        ``b·count`` tokens, ``b`` the denominator of ``top_k·count / (count + identity)``: ``(1, b·count)``."""
        if not self.identity:
            return self.top_k, self.count
        slots = self.count + self.identity
        return 1, slots // math.gcd(self.top_k * self.count, slots) * self.count


def real_routes(tokens: int, top_k: int, count: int, identity: int) -> int:
    """Routes of ``tokens`` tokens that reach one of ``count`` real experts when the router spreads
    their ``tokens x top_k`` picks evenly over ``count + identity`` slots: ``⌊tokens·top_k·count /
    (count + identity)⌋``."""
    return tokens * top_k * count // (count + identity)


def add_slices(module: nn.Module, name: str, count: int) -> None:
    """Each expert's slice of the stacked parameter ``name`` (``[count, ...]``) as a named buffer
    (``weight[3]``): the trace prices it as the weight it is and reads it once per expert that runs."""
    stack = module._parameters[name]
    assert stack is not None and stack.shape[0] >= count
    with torch.enable_grad():  # a training step's gradient flows from each slice into its stack
        for e in range(count):
            module.register_buffer(f"{name}[{e}]", stack[e], persistent=False)


def remove_slices(module: nn.Module) -> None:
    """The buffers :func:`add_slices` made, removed."""
    for n in [n for n in module._buffers if "[" in n]:
        del module._buffers[n]
