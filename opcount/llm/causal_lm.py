"""A causal LM to analyze (:class:`CausalLM`): built once on the meta device (:class:`.decoder.Decoder`),
then each phase asked of it checked (what it refuses, before anything is traced, so a sweep refuses a
bad point before its first trace), traced and priced (:mod:`.phases`), and a phase or a generation put
on a parallel layout (:mod:`.deploy`).

Its checks, one name each: :meth:`CausalLM.check_sizes` (the size limits, :mod:`.models.limits`),
:meth:`CausalLM.check_phase` (a phase request) and :meth:`CausalLM.check_generation` (a generation,
:mod:`.generation`).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import replace
from typing import Any, NamedTuple

import torch

from ..analysis import FlopCountAnalysis
from ..errors import OpcountError, OpcountValueError
from ..handles.memory import Traffic
from ..hardware.lookup import Hardware
from ..ir import DTYPE_BYTES, OpCall
from ..memory import MemoryTrafficAnalysis
from ..roofline import roofline
from ..tracers.meta import TensorShape
from ..transformers_internals import cache_keyword, takes_cache_position
from . import PHASES
from .attention.indexed import sparse
from .attention.latent import absorbed, expanded
from .attention.prompt_tokens import cache_lengths, new_positions_only
from .attention.rope import dynamic_rope
from .attention.serving import serving_attention
from .attention.windows import windowed_prefill
from .cache.names import CACHE_NAMES
from .cache.specs import phase_cache
from .decoder import Decoder
from .deploy.deployment import Deployment, on_layout
from .deploy.layout import Parallel
from .kernels.estimate import MODES, schedule_kernels
from .models.limits import check_sizes
from .phases import GenerationFigures, Memory, PhaseCost, PhaseRequest, Schedules, peak_activations, resolved

logger = logging.getLogger(__name__)


class TracedPhase(NamedTuple):
    """A phase traced, before any device prices it (:meth:`CausalLM.traced`): the analyses of its one forward,
    its calls with their traffic, the experts blocks routed, its memory, and what every device's pricing of it
    shares: what deploying it works out per layout (:attr:`.phases.PhaseCost.layouts`), its calls' bytes and kernels."""

    flops: FlopCountAnalysis
    traffic: MemoryTrafficAnalysis
    per_call: list[tuple[OpCall, Traffic | None]]
    blocks: tuple[str, ...]
    memory: Memory
    layouts: dict[Any, Any]
    # what scheduling its kernels reads the same on every device (:func:`.kernels.estimate.schedule_kernels`)
    kernels: dict[Any, Any]


class CausalLM(Decoder):
    """A causal LM to analyze: built on the meta device from a transformers config (or a model
    already on meta), with the dtypes of its roles (``CausalLM(model_or_config, precision=None)``)."""

    @property
    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def active_parameters(self) -> int:
        """Parameters one token touches: all of them less the routed experts it does not go to (:mod:`.moe.experts`)."""
        return self.parameters - sum(e.inactive for e in self.experts)

    def kv_bytes(self, tokens: int, batch: int) -> int:
        """Bytes of the cache holding ``tokens`` positions of ``batch`` sequences, each layer as its
        layer type holds them (a decode step's view: the last token just written), each part in its dtype."""
        return sum(self.kv_bytes_by_type(tokens - 1, 1, batch).values()) if tokens else 0

    def kv_bytes_by_type(self, kv_len: int, seq_len: int, batch: int) -> dict[str, int]:
        """Bytes of the cache per layer type when ``seq_len`` tokens follow ``kv_len`` cached ones, each
        part in its dtype (the KV cache's; a state's conv parts the model's, its recurrent parts the state's)."""
        lengths = cache_lengths(self.prefix, kv_len, seq_len)
        p = self.precision
        conv, state = DTYPE_BYTES[p.stored], DTYPE_BYTES[p.state_dtype]
        return self.caches.bytes_by_type(*lengths, batch, DTYPE_BYTES[p.kv_dtype], conv=conv, state=state)

    # --------------------------------------------------------------------------------------------
    # What is refused, before anything is traced
    # --------------------------------------------------------------------------------------------
    def check_sizes(self, batch: int, positions: int) -> None:
        """Refuse ``batch`` sequences of ``positions`` positions over :mod:`.models.limits`' bounds."""
        check_sizes(batch, positions, self.caches.largest(positions - 1, 1, batch))

    def check_phase(self, request: PhaseRequest) -> PhaseRequest:
        """Refuse a phase :meth:`cost` would refuse; returns the request with its ``seq_len`` (decode's
        1 where it was left out)."""
        phase, seq_len, kv_len, batch = request.phase, request.seq_len, request.kv_len, request.batch
        if phase not in PHASES:
            raise OpcountValueError(f"unknown phase {phase!r}; choose prefill or decode")
        if seq_len is None:
            if phase == "prefill":
                raise OpcountValueError("prefill needs seq_len (the prompt's tokens)")
            seq_len = 1
        for name, value, least in (("seq_len", seq_len, 1), ("kv_len", kv_len, 0), ("batch", batch, 1)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise OpcountValueError(f"{name} must be an integer >= {least}, got {value!r}")
        self.check_sizes(batch, kv_len + seq_len)
        positions = self.learned_positions
        if positions is not None and kv_len + seq_len > positions[1]:
            # On meta an out-of-range position is never looked up: the real model fails, the trace would not
            name, rows = positions
            raise OpcountValueError(
                f"{kv_len + seq_len} positions (kv_len {kv_len} + seq_len {seq_len}) exceed the {rows} rows of "
                f"{type(self.model).__name__}'s learned position table '{name}'"
            )
        if request.kernels not in MODES:
            raise OpcountValueError(f"unknown kernels {request.kernels!r}; choose {' or '.join(MODES)}")
        return request if request.seq_len == seq_len else request.at(batch, seq_len, kv_len)

    def check_generation(self, prompt_len: int | None, gen_len: int, *, batch: int = 1) -> None:
        """Refuse a generation :func:`.generation.generation` would refuse, in its order."""
        if not isinstance(gen_len, int) or gen_len < 0:
            raise OpcountValueError(f"gen_len must be an integer >= 0, got {gen_len!r}")
        if isinstance(prompt_len, int) and isinstance(batch, int):  # check_phase checks the types
            self.check_sizes(batch, prompt_len + gen_len)  # the last step's, before the prefill is traced
        prompt = self.check_phase(PhaseRequest(phase="prefill", seq_len=prompt_len, batch=batch)).new_tokens
        if gen_len:
            self.check_phase(PhaseRequest(phase="decode", kv_len=prompt, batch=batch))
            self.check_phase(PhaseRequest(phase="decode", kv_len=prompt + gen_len - 1, batch=batch))

    # --------------------------------------------------------------------------------------------
    # A phase
    # --------------------------------------------------------------------------------------------
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
        ``kv_len``: tokens cached before the new ones, decode's context or a prefill's cached prefix
        (:mod:`.phases`). ``kernels``: ``fused`` (as serving engines run them) or ``eager`` (one kernel
        per operator)."""
        request = PhaseRequest(
            phase=phase, seq_len=seq_len, kv_len=kv_len, batch=batch, hardware=resolved(hardware),
            flops_per_mac=flops_per_mac, preset=preset, kernels=kernels,
        )  # fmt: skip
        return self.cost(request)

    def cost(self, request: PhaseRequest) -> PhaseCost:
        """The cost of the phase ``request`` asks for (:meth:`phase`, its fields as one record)."""
        request = self.check_phase(request)
        return self.priced(self.traced(request), request)

    def traced(self, request: PhaseRequest) -> TracedPhase:
        """The phase ``request`` asks for (checked: :meth:`check_phase`) traced, whatever the device: what
        :meth:`priced` prices on each device asked (the trace reads neither ``hardware`` nor ``kernels``)."""
        flops, traffic, blocks = self._trace(request)
        by_type = self.kv_bytes_by_type(request.kv_len, request.new_tokens, request.batch)
        per_call = traffic.traffic_per_call()
        activations = peak_activations(per_call, self.pricing)
        memory = Memory(self.weights.total, sum(by_type.values()), activations, by_type)
        return TracedPhase(flops, traffic, per_call, tuple(blocks), memory, {}, {})

    def priced(self, traced: TracedPhase, request: PhaseRequest) -> PhaseCost:
        """``traced`` (the phase ``request`` asks for, its trace) on ``request``'s hardware: its roofline and
        kernels; the phases priced from one trace share it, and what deploying it works out per layout."""
        report = plans = None
        hw = request.hardware
        if hw is not None:
            report = roofline(traced.traffic, hardware=hw, dtype=self.precision.act, itemsize=self.pricing)
            plans = Schedules(
                MODES,
                functools.partial(
                    schedule_kernels, traced.traffic, report, dtype=self.precision.act, itemsize=self.pricing,
                    moe_blocks=traced.blocks, chains=self.indexers, kept=traced.kernels,
                ),
            )  # fmt: skip
        return PhaseCost(
            request=request, precision=self.precision, flops=traced.flops, memory=traced.memory, roofline=report,
            moe_blocks=traced.blocks, schedules=plans, traffic=traced.per_call, layouts=traced.layouts,
        )  # fmt: skip

    def records(self, request: PhaseRequest) -> FlopCountAnalysis:
        """The phase's trace alone, nothing rolled up yet: the records a sweep fits (:mod:`.sweep`)."""
        return self._trace(self.check_phase(request), records_only=True)[0]

    def deploy(
        self, cost: PhaseCost | GenerationFigures, parallel: Parallel | None = None, **options: Any
    ) -> Deployment:
        """``cost`` (a phase or a generation of this model) on a parallel layout: per-device memory,
        fit, communication, time and cost (:func:`opcount.llm.deploy.deployment.deploy`, its options).
        With micro-batches, a phase is traced again at one micro-batch (:meth:`micro_batch`), and under
        two-batch overlap at half its batch."""
        m = 1 if parallel is None else parallel.micro_batches
        if m > 1 and isinstance(cost, PhaseCost) and options.get("micro") is None:
            options["micro"] = self.micro_batch(cost, m)
        dispatch = options.get("dispatch")
        # traced only where deploy prices it (expert parallelism on one stage), which refuses it elsewhere
        one_stage = parallel is not None and parallel.ep > 1 and parallel.pp == 1 and m == 1
        overlap = one_stage and dispatch is not None and dispatch.two_batch_overlap
        if overlap and isinstance(cost, PhaseCost) and options.get("halves") is None and cost.batch % 2 == 0:
            options["halves"] = self.cost(replace(cost.request, batch=cost.batch // 2))
        return on_layout(self, cost, parallel, **options)

    def micro_batch(self, cost: PhaseCost, micro_batches: int) -> PhaseCost:
        """The phase ``cost`` at one of ``micro_batches`` micro-batches (``batch / micro_batches``
        sequences), asked as ``cost`` was (hardware, FLOP convention, preset, kernels)."""
        if cost.batch % micro_batches:
            raise OpcountValueError(
                f"--micro-batches {micro_batches}: does not divide the batch of {cost.batch} sequences"
            )
        return self.cost(replace(cost.request, batch=cost.batch // micro_batches))

    def _trace(
        self, request: PhaseRequest, records_only: bool = False
    ) -> tuple[FlopCountAnalysis, MemoryTrafficAnalysis, list[str]]:
        model, caches, dtype = self.model, self.caches, self.precision.traced
        seq_len, kv_len, batch = request.new_tokens, request.kv_len, request.batch
        lengths = cache_lengths(self.prefix, kv_len, seq_len)
        prompt = request.phase == "prefill"
        # a recurrent layer reads its state: a decode step's one-token update, even from an empty cache;
        # a prompt's chunk after a cached prefix, its scan from the state the prefix left
        held = not prompt or kv_len > 0
        with phase_cache(model, self.config, caches, batch, *lengths, dtype, held) as cache, new_positions_only(model):
            latents = {
                i: layer.latent for i, layer in enumerate(cache.layers) if getattr(layer, "latent", None) is not None
            }
            topk = {
                i: layer.topk for i, layer in enumerate(caches.layers) if layer.topk
            }  # DSA: absorbed in prompts too
            # a prefill (over a cached prefix too), or decode tokens with nothing cached, run as a prompt:
            # latent attention expanded (vLLM's MLA chunked prefill; DSA absorbed in both), sliding and
            # chunked layers by blocks, the last token's logits; a step over a cache absorbs, all logits
            as_prompt = prompt or not kv_len
            absorbing = {i: t for i, t in latents.items() if not as_prompt or i in topk}
            expanding = {i: t for i, t in latents.items() if i not in absorbing} if kv_len else {}
            with (
                self.routing() as blocks,
                serving_attention(model),
                absorbed(model, absorbing) as changed,
                expanded(model, expanding) as held_latents,
                sparse(model, {i: cache.layers[i] for i in topk}, kv_len, seq_len, dtype),
                windowed_prefill(model, caches.windows() if as_prompt else {}, seq_len, kv_len),
                dynamic_rope(model, sum(lengths)),
            ):
                if changed + held_latents != len(absorbing) + len(expanding):
                    raise OpcountError(
                        f"{type(model).__name__}: {len(latents)} latent-attention caches but "
                        f"{changed + held_latents} attention modules opcount recognises as multi-head latent attention"
                    )
                kwargs: dict[str, Any] = {
                    "input_ids": TensorShape((batch, seq_len), dtype=torch.long),
                    cache_keyword(model): cache,
                    "use_cache": True,
                }
                if takes_cache_position(model):
                    kwargs["cache_position"] = torch.arange(kv_len, kv_len + seq_len)
                if self.keeps_logits:  # logits of the last token only, as generation asks
                    kwargs["logits_to_keep"] = 1 if as_prompt else seq_len
                flops = FlopCountAnalysis(
                    model, (), kwargs, tracer="dispatch", flops_per_mac=request.flops_per_mac, preset=request.preset
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
