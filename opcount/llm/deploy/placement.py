"""What each device of a layout holds and runs: its pipeline stage's modules, its share of each weight (a
tensor-parallel split, a key or value projection copied where ``tp`` exceeds the KV heads
(:mod:`.kv_projections`), its expert slots), of the cache, and of each operator's work
(:class:`Placement`, :func:`share_of`); :mod:`.deployment` prices a phase from them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from ...errors import OpcountError
from ...ir import OpCall
from ..cache.probe import KVShape
from ..decoder import Decoder
from ..moe.routing import Experts
from . import cache_shares as device_cache
from .expert_routes import ExpertShare, expert_share
from .kv_projections import kv_projection_shares
from .layout import Parallel, Sharding, check_layout, experts_of, kv_heads_per_device
from .times import Share


class Placement:
    """A model's layout: its sharding, its decoder layers' stages, each parameter's bytes, its experts'
    top-k (the model's, :class:`.decoder.Decoder`)."""

    def __init__(self, llm: Decoder, parallel: Parallel) -> None:
        model, config = llm.model, llm.config
        self.parallel, self.config = parallel, config
        self.sharding = sharding_of(llm)
        check_layout(model, config, parallel, self.sharding)
        self.layers = int(getattr(config, "num_hidden_layers", 1))
        self.stage_of: dict[str, int] = {}  # module -> stage, for the modules of a decoder layer
        stack = _decoder_layers(model, self.layers) if parallel.pp > 1 else None
        order = [name for name, _ in model.named_modules()]
        self._after = set(order[order.index(stack[0]) + 1 :]) if stack else set()
        for index, name in enumerate(stack[1] if stack else ()):
            for sub, _ in model.get_submodule(name).named_modules(prefix=name):
                self.stage_of[sub] = index * parallel.pp // self.layers
        self.pricing = llm.pricing  # bytes per element by role, as the phase prices them
        self.param_bytes = llm.weights.bytes  # each weight's bytes as the footprint counts them
        # each experts module (and its block) as the experts were recognised: count, top-k, identity slots
        self.experts = {name: e for e in llm.experts for name in (e.name, e.block)}
        # a device's share of the expert weights: its (experts + redundant) / ep slots of the experts
        count = experts_of(model, self.sharding) if parallel.ep > 1 else None
        self.expert_weights = (count + parallel.redundant_experts) / (count * parallel.ep) if count else 1.0
        self._routes: dict[tuple[str, int], ExpertShare] = {}
        self._weights: list[float] | None = None
        self.kv_heads = _kv_heads(config, llm.caches.kv_shapes)
        # the key, value and fused projections a device holds more of than 1 / tp (KV heads copied)
        self.kv_projections = kv_projection_shares(
            model, self.sharding, llm.caches.kv_shapes, parallel.tp, lambda: _decoder_layers(model, self.layers)[1]
        )

    @classmethod
    def of(cls, llm: Decoder, parallel: Parallel) -> Placement:
        """The placement of ``llm`` on ``parallel``, built once per model and layout (kept by the model:
        every phase deployed on the layout reads the same one); a layout the model cannot run raises each time."""
        kept = llm.placements.get(parallel)
        if not isinstance(kept, Placement):
            kept = llm.placements[parallel] = cls(llm, parallel)
        return kept

    def experts_record(self, module: str) -> Experts:
        """The recognised experts of the experts module ``module`` the tensor-parallel plan names."""
        if module not in self.experts:
            raise OpcountError(
                f"{module}: the tensor-parallel plan names it as experts, but opcount recognises no "
                "mixture-of-experts block there: its tokens' all-to-all cannot be priced"
            )
        return self.experts[module]

    def expert_share(self, module: str, tokens: int) -> ExpertShare:
        """A device's share of the experts module ``module`` traced at ``tokens`` tokens (one replica's):
        the routes of the ``dp`` replicas sharing the experts, spread over the ``ep`` devices (:mod:`.expert_routes`)."""
        key = (module, tokens)
        if key not in self._routes:
            p = self.parallel
            self._routes[key] = expert_share(self.experts_record(module), tokens, p.dp, p.ep, p.redundant_experts)
        return self._routes[key]

    def stage(self, owners: Sequence[str]) -> int:
        """The pipeline stage running a module scope: its decoder layer's, else the first stage
        before the layers and the last after them."""
        for owner in reversed(owners):
            if owner in self.stage_of:
                return self.stage_of[owner]
        return self.parallel.pp - 1 if any(o in self._after for o in owners) else 0

    def weights_per_stage(self) -> list[float]:
        """Bytes of weights a device of each stage holds (worked out once: every phase deployed reads them)."""
        if self._weights is None:
            self._weights = self._stage_weights()
        return list(self._weights)

    def _stage_weights(self) -> list[float]:
        p, s = self.parallel, self.sharding
        out = [0.0] * p.pp
        for name, nbytes in self.param_bytes.items():
            module = s.owner.get(name, "")
            share = 1.0
            if s.expert_block((module,)) is not None and p.ep > 1:
                share = self.expert_weights
            elif s.split(name):
                share = self.kv_projections.get(module, 1 / p.tp)
            out[self.stage((module,))] += nbytes * share
        return out

    def kv_shares(self, calls: Sequence[OpCall]) -> dict[str, float]:
        """The share of each part of the cache a device holds (:mod:`.device_cache`): attention's
        ``kv_heads_per_device / kv_heads`` when the attention writing it is split, a latent whole."""
        heads = kv_heads_per_device(self.kv_heads, self.parallel.tp) / self.kv_heads
        split = lambda c: self.parallel.tp > 1 and self.sharding.in_region(c.scope) is not None
        return device_cache.part_shares(calls, split, self.parallel.tp, heads)

    def stage_layers(self) -> list[int]:
        counts = [0] * self.parallel.pp
        for i in range(self.layers):
            counts[i * self.parallel.pp // self.layers] += 1
        return counts


_SHARDING = "sharding"  # the key of the plan among a model's placements (keyed by layout)


def sharding_of(llm: Decoder) -> Sharding:
    """The model's tensor-parallel plan (:meth:`.layout.Sharding.of`), resolved once per model: it reads the model
    and its config alone, whatever the layout."""
    kept = llm.placements.get(_SHARDING)
    if not isinstance(kept, Sharding):
        kept = llm.placements[_SHARDING] = Sharding.of(llm.model, llm.config)
    return kept


def _kv_heads(config: Any, kv_shapes: Sequence[KVShape | None]) -> int:
    """The KV heads a layout's cache share is read from: the config's ``num_key_value_heads``, else those the
    cache probe found where every attention layer holds as many (Falcon names its own ``num_kv_heads``, or
    none with ``multi_query``), else the attention heads."""
    heads = getattr(config, "num_key_value_heads", None)
    probed = {s.kv_heads for s in kv_shapes if s is not None}
    if not isinstance(heads, int) and len(probed) == 1:
        heads = probed.pop()
    heads = heads if isinstance(heads, int) else getattr(config, "num_attention_heads", None)
    return heads if isinstance(heads, int) else 1


def _decoder_layers(model: nn.Module, layers: int) -> tuple[str, list[str]]:
    """The decoder layers' list (the first ``nn.ModuleList`` of ``layers`` entries) and its entries' names."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == layers:
            return name, [f"{name}.{child}" for child, _ in module.named_children()]
    raise OpcountError(f"{type(model).__name__}: no list of its {layers} decoder layers to split into pipeline stages")


def share_of(placement: Placement, owners: Sequence[str], tokens: int) -> Share:
    """The share a device runs of an operator in the scope ``owners``, of a phase traced at ``tokens`` tokens."""
    p, s = placement.parallel, placement.sharding
    block = s.expert_block(owners) if p.ep > 1 else None
    if block is not None:
        e = placement.expert_share(block, tokens)
        return Share(e.routes, e.experts, e.padded)
    if s.in_region(owners) is not None:
        copied = next((placement.kv_projections[o] for o in reversed(owners) if o in placement.kv_projections), None)
        share = 1 / p.tp if copied is None else copied
        return Share(share, share, share)
    return Share(1.0, 1.0, 1.0)
