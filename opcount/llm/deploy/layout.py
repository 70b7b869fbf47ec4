"""A parallel layout of an LLM over devices, and which of its weights each device holds.

:class:`Parallel` is the layout: ``tp`` (tensor parallel), ``pp`` (pipeline stages), ``ep`` (expert
parallel) and ``dp`` (data-parallel replicas), with ``micro_batches`` in flight in a pipeline. Its
devices are ``tp x pp x dp``; expert parallelism spreads the experts over the ``tp x dp`` devices
of a pipeline stage (``ep`` is 1 or ``tp x dp``, as vLLM's and SGLang's expert parallelism do), with
``redundant_experts`` more slots holding copies of experts (EPLB; SGLang's ``--ep-num-redundant-experts``):
the experts and the redundant slots together divide evenly over the ``ep`` devices.

:class:`Sharding` reads which modules tensor parallelism splits from the model's own plan,
transformers' ``tp_plan`` (``base_model_tp_plan`` of the config, ``colwise`` / ``rowwise`` per
module): a weight in the plan is split ``tp`` ways, any other is replicated; the parent of a
``colwise`` and a ``rowwise`` module (attention, MLP) runs on a ``1 / tp`` slice of its heads or
channels; a ``rowwise`` module's output is all-reduced, a ``colwise_gather_output`` one's
(vocab-parallel logits) all-gathered. A style opcount does not know is an error naming the module.
Where transformers' plan leaves a block of a served family whole (or the family has no plan: GPT-2),
:mod:`.engine_plans` completes it as vLLM splits it; a module run whole on every rank inside a split block
(an MLA latent's projection, DSA's indexer) keeps all of its work. A ``rowwise_unreduced`` module is split
as a row-wise one but its output is reduced with a later row-wise module's (Falcon's parallel attention
and MLP: one all-reduce a layer).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ...errors import OpcountError, OpcountValueError
from ...transformers_internals import layer_config
from ..models.composite import text_config
from .engine_plans import HEAD_FIELDS, engine_plan, refusal
from .engine_plans.styles import UNREDUCED

MAX_DEGREE = 65536  # devices in one dimension of a layout: more than any cluster built

# transformers' tensor-parallel styles (transformers.distributed.tensor_parallel) by what they do
# at inference: split the weight, then all-reduce or all-gather the output, or keep it whole.
SPLIT_REDUCE = frozenset({"rowwise", "rowwise_split_input", "rowwise_rep", "embedding_rowwise", "packed_rowwise"})
SPLIT_GATHER = frozenset({"colwise_gather_output", "colwise_rep", "embedding_colwise"})
# row-wise, the output reduced later with another row-wise module's (vLLM's reduce_results=False)
ROW_SPLIT = SPLIT_REDUCE | {UNREDUCED}
SPLIT = frozenset({"colwise", "packed_colwise", "local_params"}) | ROW_SPLIT | SPLIT_GATHER
EXPERTS = "moe_tp_experts"  # the experts' block: each device runs its slice of every expert, all-reduced
REDUCE = frozenset({"all_reduce", EXPERTS})  # the output all-reduced, the weights split by their own entries
# mla_kv_a_proj: an MLA latent's projection, whole on every rank (transformers 5.24's
# MlaKvAProjParallel only all-reduces its rope part's gradient in training)
WHOLE = frozenset({"replicate", "replicated_with_grad_allreduce", "moe_identity_expert", "mla_kv_a_proj"})
RUN_WHOLE = frozenset({"replicate", "mla_kv_a_proj"})  # a module each rank runs in full, inside a split block
KNOWN = SPLIT | REDUCE | WHOLE


@dataclass(frozen=True)
class Parallel:
    """A layout: ``tp x pp x dp`` devices, experts over ``ep`` of them, ``micro_batches`` in a pipeline."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    micro_batches: int = 1
    redundant_experts: int = 0

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "dp", "micro_batches", "redundant_experts"):
            value = getattr(self, name)
            low = 0 if name == "redundant_experts" else 1
            if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_DEGREE:
                raise OpcountValueError(
                    f"{flag(name)}: expected a whole number from {low} to {MAX_DEGREE:,}, got {value!r}"
                )
        if self.redundant_experts and self.ep == 1:
            raise OpcountValueError(
                f"{flag('redundant_experts')} {self.redundant_experts}: redundant experts are spread over "
                "expert-parallel devices: give --ep"
            )
        if self.ep > 1 and self.ep != self.tp * self.dp:
            raise OpcountValueError(
                f"--ep {self.ep}: expert parallelism spreads the experts over the devices of a stage: --ep must be 1 "
                f"or --tp x --dp ({self.tp * self.dp})"
            )

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def single(self) -> bool:
        return self.devices == 1

    def as_dict(self) -> dict[str, int]:
        out = {"tp": self.tp, "pp": self.pp, "ep": self.ep, "dp": self.dp, "devices": self.devices}
        return out | ({"redundant_experts": self.redundant_experts} if self.redundant_experts else {})

    def label(self) -> str:
        parts = [f"{k}{v}" for k, v in (("tp", self.tp), ("pp", self.pp), ("ep", self.ep), ("dp", self.dp)) if v > 1]
        micro = f", {self.micro_batches} micro-batches" if self.micro_batches > 1 else ""
        micro += f", {self.redundant_experts} redundant experts" if self.redundant_experts else ""
        return " x ".join(parts) + f" = {self.devices} devices{micro}" if parts else "1 device"


def flag(name: str) -> str:
    return "--ep-num-redundant-experts" if name == "redundant_experts" else "--" + name.replace("_", "-")


def kv_heads_per_device(kv_heads: int, tp: int) -> int:
    """KV heads a device holds: ``kv_heads / tp``, or one (replicated) when ``tp`` exceeds them, as vLLM does."""
    return max(1, kv_heads // tp)


def check_heads(config: Any, tp: int) -> None:
    """``tp`` splits the attention heads evenly; above the KV heads it must be a multiple of them
    (each KV head is then copied on ``tp / kv_heads`` devices, as vLLM does)."""
    heads = getattr(config, "num_attention_heads", None)
    kv = getattr(config, "num_key_value_heads", None) or heads
    if tp == 1 or not isinstance(heads, int):
        return
    if heads % tp:
        raise OpcountValueError(f"--tp {tp}: does not divide the {heads} attention heads of {type(config).__name__}")
    if isinstance(kv, int) and (kv % tp if tp <= kv else tp % kv):
        raise OpcountValueError(
            f"--tp {tp}: the {kv} KV heads of {type(config).__name__} are neither split evenly nor copied evenly "
            f"(--tp must divide them, or be a multiple of them)"
        )


@dataclass
class Sharding:
    """What tensor parallelism splits in one model, from its ``tp_plan``: module and parameter
    names by style, the regions that run on a slice (:meth:`share`), the experts' blocks."""

    styles: dict[str, str]  # module or parameter name -> style
    regions: frozenset[str]  # modules whose every operator runs on 1 / tp of the work
    experts: frozenset[str]  # the experts' blocks (split over ep, or over tp)
    reduced: dict[str, str] = field(default_factory=dict)  # module -> "all_reduce" / "all_gather" of its output
    owner: dict[str, str] = field(default_factory=dict)  # parameter -> its module

    sources: tuple[str, ...] = ()  # the vLLM sources of the engine supplements applied

    @classmethod
    def of(cls, model: nn.Module, config: Any = None) -> Sharding:
        """The model's plan (completed by :func:`.engine_plans.engine_plan`) resolved against its
        module and parameter names; an empty plan (a model given none) splits nothing."""
        plan, sources = engine_plan(model, config if config is not None else getattr(model, "config", None))
        patterns = [(re.compile("^" + re.escape(k).replace(r"\*", r"\d+") + "$"), k, v) for k, v in plan.items()]
        styles: dict[str, str] = {}
        names = [n for n, _ in model.named_modules()] + [n for n, _ in model.named_parameters()]
        for name in names:
            for pattern, key, style in patterns:
                if pattern.match(name):
                    if style not in KNOWN:
                        raise OpcountError(
                            f"{name}: tensor-parallel style {style!r} (tp_plan {key!r}) is not one opcount knows: "
                            "it cannot say which weights and outputs it splits"
                        )
                    styles[name] = style
        modules = dict(model.named_modules())
        reduced = {
            n: ("all_gather" if s in SPLIT_GATHER else "all_reduce")
            for n, s in styles.items()
            if n in modules and (s in SPLIT_REDUCE or s in SPLIT_GATHER or s in REDUCE)
        }
        experts = frozenset(n for n, s in styles.items() if s == EXPERTS and n in modules)
        kinds: dict[str, set[str]] = {}  # a module -> the kinds of split children it has
        owner: dict[str, str] = {}  # a parameter -> its module
        for parent, module in modules.items():
            for child, _ in module.named_children():
                s = styles.get(f"{parent}.{child}" if parent else child)
                if s in ROW_SPLIT or s in ("colwise", "packed_colwise"):
                    kinds.setdefault(parent, set()).add("row" if s in ROW_SPLIT else "col")
            for param, _ in module.named_parameters(recurse=False):
                owner[f"{parent}.{param}" if parent else param] = parent
        regions = frozenset({p for p, k in kinds.items() if k == {"row", "col"}} | experts)
        return cls(styles, regions, experts, reduced, owner, tuple(sources))

    def split(self, parameter: str) -> bool:
        """Whether tensor parallelism splits ``parameter`` (its own entry, or its module's)."""
        own = self.styles.get(parameter)
        style = own or self.styles.get(self.owner.get(parameter, ""))
        if own is None and style in ROW_SPLIT and parameter.endswith(".bias"):
            return False  # a row-wise module's bias is whole on every rank, added once after the reduce
        return style in SPLIT

    def in_region(self, owners: Iterable[str]) -> str | None:
        """The sliced region (or plan module) among ``owners`` (a scope, outermost first), if any; none
        when a module inside it runs whole on every rank."""
        found = None
        for owner in owners:
            if found is None and (owner in self.regions or self.styles.get(owner) in SPLIT):
                found = owner
            elif found is not None and self.styles.get(owner) in RUN_WHOLE:
                return None
        return found

    def expert_block(self, owners: Iterable[str]) -> str | None:
        return next((o for o in owners if o in self.experts), None)


def experts_of(model: nn.Module, sharding: Sharding) -> int | None:
    """The experts per block (the same in every block), None for a dense model."""
    counts = set()
    for name in sharding.experts:
        module = model.get_submodule(name)
        count = getattr(module, "num_experts", None)
        if not isinstance(count, int):
            count = len(module) if isinstance(module, nn.ModuleList) else None
        if count is None:
            raise OpcountError(f"{name}: an experts block that does not say how many experts it holds (num_experts)")
        counts.add(count)
    if len(counts) > 1:
        raise OpcountError(f"experts blocks of different sizes ({sorted(counts)}): --ep needs one count")
    return counts.pop() if counts else None


def check_per_layer_attention(model: nn.Module, config: Any, layout: Parallel) -> None:
    """Refuse a layout of a config whose attention is set per layer (transformers 5's ``per_layer_config``:
    Dots 3's DSA layers have 64 heads, its sliding ones 128): a layout reads one count of heads for the
    model, which such a config does not give (it raises on reading one)."""
    if not getattr(config, "is_heterogeneous", False):
        return
    heads: dict[Any, int] = {}
    for index in range(len(config.per_layer_config)):
        count = getattr(layer_config(config, index), "num_attention_heads", None)
        heads[count] = heads.get(count, 0) + 1
    ordered = sorted(heads.items(), key=lambda item: str(item[0]).zfill(12))  # fewest heads first
    said = ", ".join(f"{n} layer{'s' if n != 1 else ''} of {h} heads" for h, n in ordered)
    flags = " ".join(f"{flag(k)} {v}" for k, v in layout.as_dict().items() if k != "devices" and v > 1)
    raise OpcountValueError(
        f"{flags or 'a deployment'}: {type(model).__name__}'s attention heads are set per layer "
        f"({type(config).__name__}.per_layer_config: {said}): opcount lays a model out by one count of heads "
        "for all its layers, which this config does not give"
    )


def check_layout(model: nn.Module, config: Any, layout: Parallel, sharding: Sharding) -> None:
    """Refuse a layout the model cannot run, naming the flag: attention set per layer, tp against the heads
    (and a model without a tensor-parallel plan), pp against the layers, ep against the experts."""
    name = type(config).__name__
    check_per_layer_attention(model, config, layout)
    if layout.tp > 1:
        if not sharding.styles:
            family = getattr(text_config(config), "model_type", None)
            raise OpcountValueError(
                f"--tp {layout.tp}: {type(model).__name__} has no tensor-parallel plan (tp_plan) in transformers and "
                f"opcount no engine plan for its family ({family!r}; those vLLM splits are listed in docs/deploy.md): "
                "opcount does not guess which weights to split"
            )
        if not sharding.regions:  # e.g. GPT-OSS in transformers 5: the vocabulary tables alone, every layer replicated
            raise OpcountValueError(
                f"--tp {layout.tp}: {type(model).__name__}'s tensor-parallel plan (tp_plan) splits no attention, MLP "
                f"or experts block (only {', '.join(sorted(sharding.styles))}): opcount does not guess which weights to split"
            )
        check_heads(config, layout.tp)
        c = text_config(config)
        for field_name in HEAD_FIELDS.get(str(getattr(c, "model_type", None)), ()):
            count = getattr(c, field_name, None)
            if isinstance(count, int) and count % layout.tp:
                raise OpcountValueError(
                    f"--tp {layout.tp}: does not divide {type(c).__name__}'s {field_name} ({count}): opcount splits "
                    "them evenly over the devices, as vLLM does where it can, and models no other layout"
                )
        why = refusal(config, layout.tp)
        if why is not None:
            raise OpcountValueError(f"--tp {layout.tp}: {why}")
    layers = getattr(config, "num_hidden_layers", None)
    if isinstance(layers, int) and layout.pp > layers:
        raise OpcountValueError(f"--pp {layout.pp}: more pipeline stages than the {layers} layers of {name}")
    if layout.ep > 1:
        experts = experts_of(model, sharding)
        if experts is None:
            raise OpcountValueError(f"--ep {layout.ep}: {name} has no experts blocks in its tensor-parallel plan")
        slots = experts + layout.redundant_experts
        if slots % layout.ep:
            more = f" + {layout.redundant_experts} redundant" if layout.redundant_experts else ""
            raise OpcountValueError(
                f"--ep {layout.ep}: does not divide the {experts}{more} expert slots of {name} "
                "(--ep-num-redundant-experts adds slots holding copies of experts)"
            )
