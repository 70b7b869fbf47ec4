"""The cost of one inference phase of a causal LM, and of a whole generation.

- **prefill**: ``seq_len`` prompt tokens per sequence into an empty cache (time to first token);
- **decode**: ``seq_len`` new tokens (usually 1) attending to ``kv_len`` cached tokens and to
  themselves (time per output token).

Each phase is one trace of the model on the meta device (nothing of the weights' size is
allocated) with the dispatch tracer; FLOPs, bytes, the memory footprint and the roofline all
come from its records. A generation of ``gen_len`` tokens is the prefill plus ``gen_len``
decode steps; a step's cost per operator is affine in the cache length (linear layers do not
depend on it, attention and the cache reads grow by one token's worth per step) over each run of
steps in which no sliding window fills and no chunk starts (:mod:`.cache`), so two traces a run,
at its first and last step, give every step exactly.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from ..analysis import FlopCountAnalysis
from ..errors import OpcountError, OpcountTypeError, OpcountValueError
from ..handles.memory import Traffic
from ..hardware.lookup import Hardware
from ..hardware.lookup import hardware as lookup_hardware
from ..ir import OpCall, TensorSpec
from ..memory import MemoryTrafficAnalysis
from ..roofline import RooflineReport, roofline
from ..roofline.bound import sum_of_max
from ..tracers.meta import TensorShape
from ..transformers_internals import cache_keyword, takes_cache_position
from .attention.indexed import indexer_scopes, sparse
from .attention.latent import absorbed
from .attention.prompt_tokens import cache_lengths, new_positions_only, prompt_length
from .attention.serving import serving_attention
from .attention.windows import windowed_prefill
from .cache.names import CACHE_NAMES
from .cache.plan import CachePlan, cache_plan, phase_cache
from .deploy.deployment import Deployment, on_layout
from .deploy.layout import Parallel
from .kernels.estimate import MODES, KernelPlan, PlanFigures, plan
from .models.build import build_on_meta, learned_positions, text_config
from .models.limits import check_phase
from .moe.experts import active_parameters, expected_routing
from .moe.zero_experts import drop_unused
from .phase_checks import PHASES as PHASES  # the phases, where callers have always found them
from .phase_checks import check_generation, check_phase_request
from .precision.dtypes import Precision, footprint_weights, pricing_for

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Memory:
    """Bytes resident during a phase: the weights, the cache (what each layer holds for ``kv_len +
    seq_len`` positions: :mod:`.cache`) and the peak working set of activations (tensors alive at
    once, cache excluded); ``kv_cache_by_type`` splits the cache by layer kind."""

    weights: int
    kv_cache: int
    activations: int
    kv_cache_by_type: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations

    def as_dict(self) -> dict[str, Any]:
        return {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "kv_cache_by_type": dict(self.kv_cache_by_type),
            "activations": self.activations,
        }


@dataclass
class PhaseCost(PlanFigures):
    """What one phase costs: ``flops`` (the analysis: totals, per operator and module),
    ``memory``, and with hardware its ``roofline`` (each operator's roofline as its own kernel),
    its kernels per mode (``plans``, :mod:`.kernels`) and its two times: ``time``, the estimate
    of the chosen mode's kernels, and ``time_bound``, the speed of light."""

    phase: str
    batch: int
    seq_len: int
    kv_len: int
    precision: Precision
    flops: FlopCountAnalysis
    memory: Memory
    roofline: RooflineReport | None = None
    moe_blocks: tuple[str, ...] = ()
    plans: dict[str, KernelPlan] | None = None  # with hardware: the kernels of each mode (kernels.py)
    kernels: str = "fused"

    @property
    def tokens(self) -> int:
        """Tokens processed: ``batch x seq_len``."""
        return self.batch * self.seq_len

    @property
    def plan(self) -> KernelPlan | None:
        """The kernels of the chosen mode (None without hardware)."""
        return None if self.plans is None else self.plans[self.kernels]


class CausalLM:
    """A causal LM to analyze: built on the meta device from a transformers config (or a model
    already on meta), with the dtypes of its roles."""

    def __init__(self, model_or_config: Any, precision: Precision | None = None) -> None:
        self.precision = precision or Precision()
        if isinstance(model_or_config, nn.Module):
            model = model_or_config
            config = getattr(model, "config", None)
            if config is None:
                raise OpcountTypeError(f"{type(model).__name__} has no transformers config (.config)")
            if any(not p.is_meta for p in model.parameters()):
                raise OpcountValueError(
                    f"{type(model).__name__} holds real weights: build it under torch.device('meta') "
                    "(or pass its config), so nothing of the weights' size is allocated"
                )
        else:
            config = model_or_config
            model = build_on_meta(config, self.precision.traced)
            drop_unused(model)  # transformers' LongCat-Flash stacks weights for its identity experts too
        self.model: nn.Module = model
        self.config = text_config(config)
        self.caches: CachePlan = cache_plan(model, config, expected_routing)
        self._weights = footprint_weights(model, self.precision)
        self._keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._pricing = pricing_for(model, self.precision)
        self._positions = learned_positions(model, self.config)
        self._prefix = prompt_length(model)  # positions run in front of every sequence (CPM-Ant)
        self.indexers = indexer_scopes(model)  # DSA indexers: their scores run as one kernel

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def active_parameters(self) -> int:
        """Parameters one token touches: all of them less the routed experts it does not go to (:mod:`.moe`)."""
        return active_parameters(self.model, self.parameters, self.config)

    def kv_bytes(self, tokens: int, batch: int) -> int:
        """Bytes of the cache holding ``tokens`` positions of ``batch`` sequences, each layer as its
        kind holds them (a decode step's view: the last token just written), in the KV dtype."""
        return sum(self.kv_bytes_by_type(tokens - 1, 1, batch).values()) if tokens else 0

    def kv_bytes_by_type(self, kv_len: int, seq_len: int, batch: int) -> dict[str, int]:
        """Bytes of the cache per layer kind when ``seq_len`` tokens follow ``kv_len`` cached ones."""
        from ..ir import DTYPE_BYTES

        lengths = cache_lengths(self._prefix, kv_len, seq_len)
        return self.caches.bytes_by_kind(*lengths, batch, DTYPE_BYTES[self.precision.kv_dtype])

    def check_sizes(self, batch: int, positions: int) -> None:
        """Refuse ``batch`` sequences of ``positions`` positions over :mod:`.limits`' bounds, before tracing."""
        check_phase(batch, positions, self.caches.largest(positions - 1, 1, batch))

    @property
    def learned_positions(self) -> tuple[str, int] | None:
        """The learned position table's name and rows, if the model has one."""
        return self._positions

    def validate_generation(self, prompt_len: int, gen_len: int, *, batch: int = 1) -> None:
        """Refuse a generation :func:`generation` would refuse, before tracing it."""
        check_generation(self, prompt_len, gen_len, batch)

    def validate(self, phase: str, *, seq_len: int | None = None, kv_len: int = 0, batch: int = 1) -> int:
        """Refuse a phase :meth:`phase` would refuse, before tracing it; returns its ``seq_len``."""
        return check_phase_request(self, phase, seq_len, kv_len, batch)

    def phase(
        self,
        phase: str = "prefill",
        *,
        seq_len: int | None = None,
        kv_len: int = 0,
        batch: int = 1,
        hardware: Hardware | str | None = None,
        flops_per_mac: int = 1,
        preset: str = "default",
        kernels: str = "fused",
    ) -> PhaseCost:
        """The cost of one phase; ``seq_len`` defaults to 1 for decode and is required for prefill.
        ``kernels``: ``fused`` (as serving engines run them) or ``eager`` (one kernel per operator)."""
        seq_len = self.validate(phase, seq_len=seq_len, kv_len=kv_len, batch=batch)
        if kernels not in MODES:
            raise OpcountValueError(f"unknown kernels {kernels!r}; choose {' or '.join(MODES)}")
        hw = lookup_hardware(hardware) if hardware is not None else None
        flops, traffic, blocks = self._trace(seq_len, kv_len, batch, flops_per_mac, preset)
        by_type = self.kv_bytes_by_type(kv_len, seq_len, batch)
        memory = Memory(
            self._weights,
            sum(by_type.values()),
            peak_activations(traffic.traffic_per_call(), self._pricing),
            by_type,
        )
        report = plans = None
        if hw is not None:
            report = roofline(traffic, hardware=hw, dtype=self.precision.act, itemsize=self._pricing)
            plans = {
                mode: plan(
                    traffic,
                    report,
                    mode,
                    dtype=self.precision.act,
                    itemsize=self._pricing,
                    moe_blocks=blocks,
                    chains=self.indexers,
                )
                for mode in MODES
            }
        cost = PhaseCost(phase, batch, seq_len, kv_len, self.precision, flops, memory, report, tuple(blocks))
        cost.plans, cost.kernels = plans, kernels
        return cost

    def records(
        self,
        phase: str = "prefill",
        *,
        seq_len: int | None = None,
        kv_len: int = 0,
        batch: int = 1,
        flops_per_mac: int = 1,
        preset: str = "default",
    ) -> FlopCountAnalysis:
        """The phase's trace alone, nothing rolled up yet: the records a sweep fits (:mod:`.sweep`)."""
        seq_len = self.validate(phase, seq_len=seq_len, kv_len=kv_len, batch=batch)
        return self._trace(seq_len, kv_len, batch, flops_per_mac, preset, records_only=True)[0]

    def deploy(self, cost: PhaseCost | GenerationCost, parallel: Parallel | None = None, **options: Any) -> Deployment:
        """``cost`` (a phase or a generation of this model) on a parallel layout: per-device memory,
        fit, communication, time and cost (:func:`opcount.llm.deploy.deployment.deploy`, its options)."""
        return on_layout(self, cost, parallel, **options)

    def _trace(
        self, seq_len: int, kv_len: int, batch: int, flops_per_mac: int, preset: str, records_only: bool = False
    ) -> tuple[FlopCountAnalysis, MemoryTrafficAnalysis, list[str]]:
        model = self.model
        plan, dtype = self.caches, self.precision.traced
        lengths = cache_lengths(self._prefix, kv_len, seq_len)
        with phase_cache(model, self.config, plan, batch, *lengths, dtype) as cache, new_positions_only(model):
            latents = {
                i: layer.latent for i, layer in enumerate(cache.layers) if getattr(layer, "latent", None) is not None
            }
            topk = {i: layer.topk for i, layer in enumerate(plan.layers) if layer.topk}  # DSA: absorbed in prompts too
            absorbing = latents if kv_len else {i: t for i, t in latents.items() if i in topk}
            with (
                expected_routing(model) as blocks,
                serving_attention(model),
                absorbed(model, absorbing) as changed,
                sparse(model, {i: cache.layers[i] for i in topk}, kv_len, seq_len, dtype),
                windowed_prefill(model, {} if kv_len else plan.windows(), seq_len),
            ):
                if changed != len(absorbing):
                    raise OpcountError(
                        f"{type(model).__name__}: {len(latents)} latent-attention caches but {changed} attention "
                        "modules opcount recognises as multi-head latent attention"
                    )
                kwargs: dict[str, Any] = {
                    "input_ids": TensorShape((batch, seq_len), dtype=torch.long),
                    cache_keyword(model): cache,
                    "use_cache": True,
                }
                if takes_cache_position(model):
                    kwargs["cache_position"] = torch.arange(kv_len, kv_len + seq_len)
                if self._keeps_logits:  # logits of the last token only, as generation asks
                    kwargs["logits_to_keep"] = 1 if kv_len == 0 else seq_len
                flops = FlopCountAnalysis(
                    model, (), kwargs, tracer="dispatch", flops_per_mac=flops_per_mac, preset=preset
                )
                flops.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
                if records_only:
                    return flops, MemoryTrafficAnalysis(flops.trace(), named_views=CACHE_NAMES), blocks
                flops.total()
                # the same trace: one forward per phase
                traffic = MemoryTrafficAnalysis(flops.trace(), named_views=CACHE_NAMES)
                traffic.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
                traffic.total()
        return flops, traffic, blocks


def peak_activations(per_call: Sequence[tuple[OpCall, Traffic | None]], itemsize: Any) -> int:
    """The most bytes of activations alive at once: a tensor lives from the call that writes it
    to the last call that touches it; parameters and the cache (named tensors) are not counted,
    views add nothing (they write nothing)."""
    last: dict[int, int] = {}
    specs: dict[int, TensorSpec] = {}
    for i, (_, t) in enumerate(per_call):
        for a in (*t.read, *t.write) if t is not None else ():
            s = a.tensor
            if s is not None and s.param is None and s.id is not None:
                last[s.id] = i
                specs.setdefault(s.id, s)
    ends: dict[int, list[int]] = defaultdict(list)
    for uid, i in last.items():
        ends[i].append(uid)
    born: set[int] = set()
    live = peak = 0
    for i, (_, t) in enumerate(per_call):
        for a in t.write if t is not None else ():
            s = a.tensor
            if s is not None and s.param is None and s.id is not None and s.id not in born:
                born.add(s.id)
                live += _bytes(s, itemsize)
        peak = max(peak, live)
        for uid in ends.get(i, ()):
            if uid in born:
                live -= _bytes(specs[uid], itemsize)
    return peak


def _bytes(spec: TensorSpec, itemsize: Any) -> int:
    size = itemsize(spec)
    return math.ceil(spec.numel * (size if size is not None else spec.itemsize))  # whole bytes


# ------------------------------------------------------------------------------------------------
# A whole generation
# ------------------------------------------------------------------------------------------------
class GenerationFigures:
    """A generation's figures from its prefill and decode steps, whether traced
    (:class:`GenerationCost`) or rebuilt from a fit (:class:`~opcount.llm.sweep.figures.GenerationPoint`)."""

    prefill: Any
    last_step: Any
    fullest_step: Any
    gen_len: int
    decode_time: float | None
    decode_time_bound: float | None

    @property
    def memory(self) -> Memory:
        """The most the generation holds: the cache at its last step (prompt + generated tokens),
        the larger activation working set of prefill and decode."""
        last = self.last_step or self.prefill
        fullest = self.fullest_step or last
        return Memory(
            self.prefill.memory.weights,
            fullest.memory.kv_cache,
            max(self.prefill.memory.activations, last.memory.activations),
            fullest.memory.kv_cache_by_type,
        )

    @property
    def time(self) -> float | None:
        prefill: float | None = self.prefill.time
        return None if prefill is None or self.decode_time is None else prefill + self.decode_time

    @property
    def time_bound(self) -> float | None:
        prefill: float | None = self.prefill.time_bound
        return None if prefill is None or self.decode_time_bound is None else prefill + self.decode_time_bound

    @property
    def time_to_first_token(self) -> float | None:
        value: float | None = self.prefill.time
        return value

    @property
    def time_to_first_token_bound(self) -> float | None:
        value: float | None = self.prefill.time_bound
        return value

    @property
    def time_per_output_token(self) -> float | None:
        return None if self.decode_time is None or not self.gen_len else self.decode_time / self.gen_len

    @property
    def time_per_output_token_bound(self) -> float | None:
        d = self.decode_time_bound
        return None if d is None or not self.gen_len else d / self.gen_len

    @property
    def tokens_per_s(self) -> float | None:
        """Generated tokens per second in the decode phase, over the whole batch."""
        tpot = self.time_per_output_token
        return None if not tpot else self.prefill.batch / tpot

    @property
    def tokens_per_s_bound(self) -> float | None:
        tpot = self.time_per_output_token_bound
        return None if not tpot else self.prefill.batch / tpot


@dataclass
class GenerationCost(GenerationFigures):
    """A prompt of ``prompt_len`` tokens then ``gen_len`` generated ones, per sequence of ``batch``."""

    prefill: PhaseCost
    first_step: PhaseCost | None
    last_step: PhaseCost | None
    gen_len: int
    decode_flops: float
    decode_time: float | None
    # the traced step holding the most cache (the last, unless a chunked layer started a new chunk)
    fullest_step: PhaseCost | None = None
    decode_time_bound: float | None = None

    @property
    def flops(self) -> float:
        return self.prefill.flops.total() + self.decode_flops


def generation(
    llm: CausalLM,
    prompt_len: int,
    gen_len: int,
    *,
    batch: int = 1,
    hardware: Hardware | str | None = None,
    flops_per_mac: int = 1,
    preset: str = "default",
    kernels: str = "fused",
) -> GenerationCost:
    """Prefill ``prompt_len`` tokens, then ``gen_len`` decode steps of one token each; step
    ``j`` (0-based) attends to ``prompt_len + j`` cached tokens. Three traces whatever ``gen_len``
    (two more for each run a sliding window fills or a chunk starts: :meth:`.CachePlan.affine_steps`)."""
    llm.validate_generation(prompt_len, gen_len, batch=batch)
    step: dict[str, Any] = {
        "batch": batch,
        "hardware": hardware,
        "flops_per_mac": flops_per_mac,
        "preset": preset,
        "kernels": kernels,
    }
    prefill = llm.phase("prefill", seq_len=prompt_len, **step)
    if gen_len == 0:
        zero = 0.0 if hardware is not None else None
        return GenerationCost(prefill, None, None, 0, 0.0, zero, None, zero)
    # each run of steps over which every operator's cost is affine in the cache length (a sliding
    # window filling, a chunk): two traces a run, the sum over its steps an arithmetic series
    flops, traced, opening = 0.0, [], None
    time = bound = 0.0 if hardware is not None else None
    for a, b in llm.caches.affine_steps(prompt_len, gen_len):
        first = llm.phase("decode", kv_len=prompt_len + a, **step)
        last = first if a == b else llm.phase("decode", kv_len=prompt_len + b, **step)
        traced.append(last)
        flops += (first.flops.total() + last.flops.total()) * (b - a + 1) / 2
        if time is not None and bound is not None and first.plan is not None and last.plan is not None:
            run_time, run_bound = decode_times(first.plan, last.plan, b - a + 1)
            time, bound = time + run_time, bound + run_bound
        if a == 0:
            opening = first
    fullest = max(traced, key=lambda p: p.memory.kv_cache)
    return GenerationCost(prefill, opening, traced[-1], gen_len, flops, time, fullest, bound)


def decode_times(first: KernelPlan, last: KernelPlan, steps: int) -> tuple[float, float]:
    """(estimate, bound) summed over ``steps`` decode steps, each kernel's and the bound's figures
    interpolated linearly between the first and the last step, in closed form (:func:`.bound.sum_of_max`)."""
    if len(first.kernels) != len(last.kernels) or any(
        a.calls != b.calls for a, b in zip(first.kernels, last.kernels, strict=True)
    ):
        raise OpcountError("internal error: decode steps at two cache lengths ran different kernels")
    estimate = float(sum_of_max(first.compute_memory(), last.compute_memory(), steps).sum())
    estimate += steps * first.launch_s
    (c0, m0), (c1, m1) = first.bound_terms(), last.bound_terms()
    one = (np.array([c0]), np.array([m0])), (np.array([c1]), np.array([m1]))
    return estimate, float(sum_of_max(*one, steps).sum())
