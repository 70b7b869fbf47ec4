"""One phase of an LLM deployed on a parallel layout: what each device holds, the collectives it
runs, the layout's time, whether it fits, the largest batch that does, and the cost per token
(:mod:`.figures` holds the result under the names a phase's figures have).

Per device, from the phase's single-device trace (:mod:`.layout` says what is split, :mod:`.placement` each device's share):

- **weights**: a parameter split by the tensor-parallel plan holds ``1 / tp`` of its bytes (a key or
  value projection ``max(1, kv_heads / tp) / kv_heads``, copied as vLLM copies the KV heads:
  :mod:`.kv_projections`), the experts ``(experts + redundant) / ep`` expert slots under expert parallelism; a pipeline stage holds
  its layers (the first stage also what runs before them, the last what runs after); the device
  holding the most is reported;
- **KV cache**: ``kv_heads / tp`` heads a device (one when ``tp`` exceeds them, copied as vLLM
  does), the stage's layers; **activations**: the stage's peak working set, each tensor at the
  device's share of the operator writing it (:mod:`.activations`), for a step of at most
  ``max_batched_tokens`` tokens (chunked prefill); against the device's memory as an engine sizes it,
  with the largest batch and, where it does not fit, a layout that does (:mod:`.fit`);
- **time**: each kernel's FLOPs and bytes divided as its region is (``1 / tp`` in a split
  attention or MLP, a key or value projection's as its weights are; in an experts block the routes of every replica sharing the experts that reach
  the device, the distinct experts they hit and their padded GEMMs, :mod:`.expert_routes`;
  :mod:`.times`), two ways as a phase is: ``time``, the estimate (the device's share of the
  fused or eager kernels, then the collectives, which this estimate does not overlap with the
  compute unless two-batch overlap runs the all-to-alls under the other half's kernels:
  :attr:`.Deployment.step_time`), and ``time_bound``, the speed of light
  (``max(device FLOPs / peak, device compulsory bytes / bandwidth, communication)``, the whole
  batch's however the estimate splits it). Micro-batches (and two-batch overlap's halves) are the
  phase traced again at ``batch / micro_batches`` (``batch / 2``), with every setting it was traced with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from ...errors import OpcountError, OpcountValueError
from ...hardware.interconnect import Collective, all_gather, all_reduce, all_to_all, send_recv
from ...hardware.lookup import Hardware
from ...hardware.spec import TENSOR
from ...ir import DTYPE_BYTES, OpCall
from ...memory import MemoryTrafficAnalysis
from ..cache.names import CACHE_NAMES
from ..decoder import Decoder
from ..engines.profile import EngineProfile
from ..engines.terms import StepShape, terms
from ..phases import GenerationFigures, Memory, PhaseCost
from . import DEFAULT_GPU_MEMORY_UTILIZATION, MAX_PRICE
from . import cache_shares as device_cache
from . import fit as fitting
from .call_shares import call_shares, kernel_calls
from .expert_routes import Dispatch
from .figures import Deployment as Deployment  # where callers have always found it
from .figures import Fit
from .layout import Parallel
from .placement import Placement
from .times import stage_times


# ------------------------------------------------------------------------------------------------
# Time and communication per step
# ------------------------------------------------------------------------------------------------
@dataclass
class _Step:
    """One traced phase on the layout, per stage: the estimate's and the bound's seconds of its
    kernels, its collectives."""

    compute: list[float]
    bound: list[float]
    collectives: list[list[Collective]]
    p2p: Collective | None
    flops: list[float]
    limited_by: list[str]  # what limits each stage's speed of light: compute or memory

    def communication(self, stage: int) -> float:
        return sum(c.time for c in self.collectives[stage])

    def sent(self, stage: int) -> float:
        return sum(c.sent for c in self.collectives[stage])


def _step(placement: Placement, cost: PhaseCost, hardware: Hardware | None, dispatch: Dispatch) -> _Step:
    p, s = placement.parallel, placement.sharding
    on = call_shares(cost, placement)
    compute = bound = flops = [0.0] * p.pp
    limited_by = ["memory"] * p.pp
    if cost.roofline is not None and cost.schedule is not None:
        times = stage_times(kernel_calls(cost), on.arrays, p.pp)
        compute, bound, flops = times.estimate, times.bounds(cost.schedule), times.flops
        limited_by = times.limited_by(cost.schedule)
    link = hardware.interconnect if hardware is not None else None
    collectives: list[list[Collective]] = [[] for _ in range(p.pp)]
    # the residual stream is communicated in the dtype the model computes it in (bfloat16 under
    # 8-bit activations: NCCL reduces no 8-bit floats), the traced one
    act = float(DTYPE_BYTES[str(cost.precision.traced).removeprefix("torch.")])
    hidden = getattr(placement.config, "hidden_size", None)
    if (p.pp > 1 or p.ep > 1) and not (isinstance(hidden, int) and hidden > 0):
        raise OpcountError(
            f"{type(placement.config).__name__} does not say its hidden size: the stages' and experts' traffic"
        )
    hidden = hidden or 0
    for module, call in on.last.items():
        payload = _numel(call) * act
        stage = placement.stage(call.scope)
        if module in s.experts and p.ep > 1:
            # each route of this device's tokens carries its hidden state to its expert (dispatch, in the
            # dispatch dtype) and back (combine, in the residual stream's): its share of the group's routes
            routes = placement.expert_share(module, cost.tokens).dispatched
            collectives[stage] += [
                _priced(all_to_all, routes * dispatch.bytes_per_route(hidden, act), p.ep, link),
                _priced(all_to_all, routes * hidden * act, p.ep, link),
            ]
        elif module in s.reduced and p.tp > 1:
            kind = all_gather if s.reduced[module] == "all_gather" else all_reduce
            collectives[stage].append(_priced(kind, payload, p.tp, link))
    p2p = None
    if p.pp > 1:
        payload = cost.tokens * hidden * act
        p2p = (
            send_recv(payload, link, across_nodes=p.devices > link.devices_per_node)
            if link is not None
            else Collective("send_recv", 2, payload, payload, 1, math.nan)
        )
    return _Step(compute, bound, collectives, p2p, flops, limited_by)


def _priced(kind: Any, payload: float, devices: int, link: Any) -> Collective:
    if link is None:  # no hardware: the bytes, no time
        n = devices
        fraction = {"all_reduce": 2 * (n - 1) / n}.get(kind.__name__, (n - 1) / n)
        return Collective(kind.__name__, n, payload, fraction * payload, 0, math.nan)
    result: Collective = kind(payload, devices, link)
    return result


def _numel(call: OpCall) -> int:
    out = call.outputs[0] if call.outputs else None
    shape = getattr(out, "shape", None)
    if shape is None:
        raise OpcountError(f"{call.kind} in {call.scope[-1]}: no output tensor to communicate")
    return math.prod(shape)


# ------------------------------------------------------------------------------------------------
# A phase, a generation
# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Timing:
    """A whole step on the layout: the seconds of its kernels on the busiest path (``compute``) and
    of its collectives, the bytes a device sends, the kernels' speed of light, and what limits it."""

    compute: float
    communication: float
    sent: float
    compute_time_bound: float
    limited_by: str


def _timing(step: _Step, micro: int) -> _Timing:
    """Every stage once, then ``micro - 1`` more micro-batches through the slowest stage (the
    pipeline's bubble); at the bound the slowest stage is the bound's, and binds as it does."""
    pp = len(step.compute)
    totals = [step.compute[i] + step.communication(i) for i in range(pp)]
    slowest = max(range(pp), key=totals.__getitem__)
    compute = sum(step.compute) + (micro - 1) * step.compute[slowest]
    hops = pp - 1 + micro - 1 if pp > 1 else 0
    p2p_time = step.p2p.time if step.p2p is not None else 0.0
    p2p_sent = step.p2p.sent if step.p2p is not None else 0.0
    communication = sum(step.communication(i) for i in range(pp)) + (micro - 1) * step.communication(slowest)
    communication += hops * p2p_time
    sent = max(step.sent(i) for i in range(pp)) * micro + (micro if pp > 1 else 0) * p2p_sent
    bound = sum(step.bound) + (micro - 1) * max(step.bound)
    return _Timing(compute, communication, sent, bound, step.limited_by[max(range(pp), key=step.bound.__getitem__)])


class _Sizing:
    """What a device of any layout holds for ``steps`` (the phase, or a generation's prompt and last decode
    step) with the cache of ``memory``: each step's records read once, each layout's holdings from them, and
    whether they fit a device as an engine sizes it (:mod:`.fit`), within ``budget`` tokens a step."""

    def __init__(self, llm: Decoder, steps: Sequence[PhaseCost], memory: Memory, budget: int) -> None:
        self.llm, self.steps, self.memory, self.budget = llm, steps, memory, budget
        self.traffic = []
        for cost in steps:
            if cost.traffic is not None:  # the phase's own analysis, kept (one analysis per traced phase)
                self.traffic.append(cost.traffic)
                continue
            traffic = MemoryTrafficAnalysis(cost.flops.trace(), named_views=CACHE_NAMES)  # no second forward
            traffic.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
            self.traffic.append(traffic.traffic_per_call())

    def holdings(self, placement: Placement) -> list[fitting.Holding]:
        """Each stage's device: its weights, its layers' share of the cache (at the last step), the largest
        working set of its share of each step's operators, with that step's tokens."""
        shares = call_shares(self.steps[-1], placement).kv
        kv_cache = device_cache.held(self.memory.kv_cache_by_type, self.memory.kv_cache, shares)
        peaks = [
            call_shares(step, placement).peaks(per_call)
            for per_call, step in zip(self.traffic, self.steps, strict=True)
        ]
        return [
            fitting.Holding(
                w,
                kv_cache * n / placement.layers,
                tuple((p[i], s.tokens) for p, s in zip(peaks, self.steps, strict=True)),
            )
            for i, (w, n) in enumerate(zip(placement.weights_per_stage(), placement.stage_layers(), strict=True))
        ]

    def fit(self, holdings: Sequence[fitting.Holding], hardware: Hardware | None, utilization: float) -> Fit | None:
        """``holdings`` against ``hardware``'s memory times ``utilization``; where they do not fit, the
        smallest layout that does (None without a device's memory)."""
        capacity = fitting.capacity(hardware, utilization)
        if hardware is None or capacity is None:
            return None
        judged = Fit(
            per_device=fitting.busiest(holdings, self.budget),
            capacity=capacity,
            gpu_memory_utilization=utilization,
            max_batched_tokens=self.budget,
            chunked=any(s.tokens > self.budget for s in self.steps),
        )
        if judged.fits:
            return judged
        # one device's bytes, its activations chunked too: no layout of n devices holds less than 1 / n of them
        steps = tuple((s.memory.activations, s.tokens) for s in self.steps)
        alone = fitting.Holding(self.memory.weights, self.memory.kv_cache, steps).memory(self.budget).total
        hint = fitting.suggest(self._holdings_of, hardware, capacity, self.budget, alone)
        return replace(
            judged,
            layout_that_fits=hint.layout,
            layout_per_device=hint.per_device,
            searched=hint.searched,
            reason=hint.reason,
        )

    def _holdings_of(self, layout: Parallel) -> list[fitting.Holding] | None:
        try:  # a layout the model cannot run (heads, layers, a cache split both ways) is no candidate
            return self.holdings(Placement.of(self.llm, layout))
        except OpcountError:
            return None


def _held(
    cost: PhaseCost, generation: GenerationFigures | None, micro: PhaseCost | None
) -> tuple[list[PhaseCost], Memory]:
    """The steps whose working sets a device holds, and the memory whose cache it holds: a phase's (or its
    micro-batch's), or a generation's prompt and last decode step, with the cache at its end."""
    if generation is None:
        return [micro or cost], cost.memory
    return [cost, *[s for s in (generation.first_step, generation.last_step) if s][-1:]], generation.memory


def deploy(
    llm: Decoder,
    cost: PhaseCost,
    parallel: Parallel,
    *,
    hardware: Hardware | None = None,
    price: float | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_batched_tokens: int | None = None,
    max_batch: bool = False,
    generation: GenerationFigures | None = None,
    micro: PhaseCost | None = None,
    dispatch: Dispatch | None = None,
    halves: PhaseCost | None = None,
    engine: EngineProfile | None = None,
) -> Deployment:
    """``cost`` (a phase, or with ``generation`` its prefill) on ``parallel``; with micro-batches,
    ``micro`` is the phase traced at one micro-batch with every setting it was
    (:meth:`.causal_lm.CausalLM.micro_batch`), so the pipeline runs the kernels the user asked for.
    Fit and the largest batch are against ``hardware``'s memory times ``gpu_memory_utilization``, each
    step's activations those of at most ``max_batched_tokens`` tokens (None: vLLM's default for the
    device, :func:`.fit.default_max_batched_tokens`). ``dispatch``: how the experts' all-to-all runs
    (:class:`.expert_routes.Dispatch`); under two-batch overlap, ``halves`` is the phase traced at half its
    batch, as a micro-batch is. ``engine``: an engine profile whose terms join the estimate
    (:mod:`opcount.llm.engines.terms`), a step's and the server's time to first token."""
    fitting.check(gpu_memory_utilization, max_batched_tokens)
    dispatch = dispatch or Dispatch()
    _check_dispatch(dispatch, parallel, cost, generation, halves)
    if price is not None and not (math.isfinite(price) and 0 < price <= MAX_PRICE):
        raise OpcountValueError(f"price must be dollars per device-hour above 0 and up to {MAX_PRICE:g}, got {price!r}")
    if parallel.micro_batches > 1 and generation is not None:
        raise OpcountValueError(f"--micro-batches {parallel.micro_batches} prices one phase, not a generation")
    if parallel.micro_batches > 1 and (micro is None or micro.batch * parallel.micro_batches != cost.batch):
        raise OpcountValueError(
            f"--micro-batches {parallel.micro_batches}: needs the phase traced at batch / micro-batches "
            f"(--batch {cost.batch} must be a multiple of it)"
        )
    is_generation = generation is not None
    if generation is not None and generation.first_step is None:  # --gen-len 0: no decode step, its prefill alone
        generation = None
    placement = Placement.of(llm, parallel)
    steps = [cost] if generation is None else [s for s in (generation.first_step, generation.last_step) if s]
    held, memory_of = _held(cost, generation, micro)
    sizing = _Sizing(llm, held, memory_of, max_batched_tokens or fitting.default_max_batched_tokens(hardware))
    stages = sizing.holdings(placement)
    traced = [_step(placement, micro or s, hardware, dispatch) for s in steps]
    timed = [_timing(t, parallel.micro_batches) for t in traced]
    compute = sum(t.compute for t in timed) / len(timed)  # a generation: the mean of its first and last step
    communication = communication_bound = sum(t.communication for t in timed) / len(timed)
    bound = sum(t.compute_time_bound for t in timed) / len(timed)
    sized = sizing.fit(stages, hardware, gpu_memory_utilization)
    sent = max(t.sent for t in timed)
    timed_ok = hardware is not None and cost.roofline is not None
    overlapped = 0.0
    if halves is not None:  # the estimate runs two halves, each one's all-to-all under the other's kernels
        compute, communication, overlapped, sent = _two_halves(_step(placement, halves, hardware, dispatch), timed_ok)
    d = Deployment(
        parallel=parallel,
        hardware=hardware.name if hardware is not None else None,
        per_device=sized.per_device if sized is not None else fitting.busiest(stages, sizing.budget),
        model_bytes=float(memory_of.total),
        fit=sized,
        communication_bytes=sent,
        communication_time=communication if timed_ok else None,
        compute_time=compute if timed_ok else None,
        tokens=steps[-1].tokens,
        compute_time_bound=bound if timed_ok else None,
        limited_by=("communication" if communication_bound > bound else timed[-1].limited_by) if timed_ok else None,
        price=price,
        generation=is_generation,
        generated=0 if generation is None else generation.gen_len,
    )
    if halves is not None and timed_ok:
        d.overlapped_time, d.communication_time_bound = overlapped, communication_bound
    d.matmul_flops = max(traced[-1].flops) * parallel.micro_batches if timed_ok else None
    if timed_ok:
        assert hardware is not None
        d.shape = _shape(placement, steps[-1], traced[-1], d, hardware)
        d.engine_terms = {} if engine is None else terms(engine, d.shape)
    server = engine.ttft_overhead_s if engine is not None else 0.0
    if generation is not None and timed_ok:
        assert hardware is not None
        step = _step(placement, cost, hardware, dispatch)
        prefill = _timing(step, 1)
        d.time_to_first_token = prefill.compute + prefill.communication + server
        if engine is not None:
            d.time_to_first_token += sum(terms(engine, _shape(placement, cost, step, d, hardware, prefill)).values())
        d.time_to_first_token_bound = max(prefill.compute_time_bound, prefill.communication)
    elif is_generation:  # no decode step: the prompt is the whole generation
        d.time_to_first_token, d.time_to_first_token_bound = d.step_time, d.step_time_bound
        if d.time_to_first_token is not None:
            d.time_to_first_token += server
    if price is not None and d.step_time:
        per_second = parallel.tp * parallel.pp * price / 3600  # one replica's devices, dollars a second
        prompt = (d.time_to_first_token, d.time_to_first_token_bound) if generation is not None else (None, None)
        d.cost = _costs(per_second, cost, generation is not None, prompt[0], d.step_time, d.tokens)
        d.cost_bound = _costs(per_second, cost, generation is not None, prompt[1], d.step_time_bound, d.tokens)
    if max_batch and sized is not None:
        d.max_batch = fitting.largest_batch(stages, steps[-1].batch, sized.capacity, sizing.budget)
    return d


def _shape(
    placement: Placement, cost: PhaseCost, step: _Step, d: Deployment, hardware: Hardware, timing: _Timing | None = None
) -> StepShape:
    """What an engine profile's terms read of a deployed step (:class:`.engines.terms.StepShape`): the
    deployment's kernels and collectives (``timing``'s for a generation's prompt), the calls of the last
    step, the experts blocks, the KV cache a device streams at decode."""
    kernels = d.compute_time if timing is None else timing.compute
    communication = d.communication_time if timing is None else timing.communication
    weights = cost.precision.weights.text()
    scaled = [f for f in ("mxfp4", "nvfp4") if f in weights]
    stream = hardware.bandwidth * hardware.efficiency.stream
    return StepShape(
        phase=cost.phase,
        tokens=cost.tokens,
        kernels_s=kernels or 0.0,
        communication_s=communication or 0.0,
        collectives=sum(len(c) for c in step.collectives),
        moe_blocks=len(placement.sharding.experts),
        kv_read_s=d.per_device.kv_cache / stream if cost.phase == "decode" else 0.0,
        software_dequant=any(hardware.precision_of(TENSOR, f) is None for f in scaled),
    )


def fit(
    llm: Decoder,
    cost: PhaseCost | GenerationFigures,
    parallel: Parallel | None = None,
    *,
    hardware: Hardware | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    max_batched_tokens: int | None = None,
) -> Fit | None:
    """Whether a phase or a generation fits the devices of ``parallel`` (one device by default) as
    :func:`deploy` judges it, without pricing its time; None where the hardware (the phase's, by
    default) says no memory."""
    fitting.check(gpu_memory_utilization, max_batched_tokens)
    generation = cost if isinstance(cost, GenerationFigures) and cost.first_step is not None else None
    phase = cost.prefill if isinstance(cost, GenerationFigures) else cost
    if hardware is None and phase.roofline is not None:
        hardware = phase.roofline.hardware
    held, memory_of = _held(phase, generation, None)
    sizing = _Sizing(llm, held, memory_of, max_batched_tokens or fitting.default_max_batched_tokens(hardware))
    return sizing.fit(sizing.holdings(Placement.of(llm, parallel or Parallel())), hardware, gpu_memory_utilization)


def _check_dispatch(
    dispatch: Dispatch,
    parallel: Parallel,
    cost: PhaseCost,
    generation: GenerationFigures | None,
    halves: PhaseCost | None,
) -> None:
    """An all-to-all's settings apply to expert parallelism; two-batch overlap splits one phase's batch in
    two on one pipeline stage, and needs that half traced."""
    if parallel.ep == 1 and (dispatch.dtype is not None or dispatch.two_batch_overlap):
        given = "--dispatch-dtype" if dispatch.dtype is not None else "--enable-two-batch-overlap"
        raise OpcountValueError(f"{given} applies to the experts' all-to-all: give --ep")
    if not dispatch.two_batch_overlap:
        if halves is not None:
            raise OpcountValueError(
                "a phase traced at half its batch is for two-batch overlap (Dispatch.two_batch_overlap)"
            )
        return
    if generation is not None or parallel.pp > 1 or parallel.micro_batches > 1:
        raise OpcountValueError(
            "--enable-two-batch-overlap prices one phase on one pipeline stage, not a generation, --pp or --micro-batches"
        )
    if halves is None or halves.batch * 2 != cost.batch or halves.kernels != cost.kernels:
        raise OpcountValueError(
            f"--enable-two-batch-overlap: needs the phase traced at half its batch (--batch {cost.batch} must be even)"
        )


def _two_halves(half: _Step, timed: bool) -> tuple[float, float, float, float]:
    """Two-batch overlap (:mod:`.expert_routes`): the two halves' kernels one after the other, their
    collectives, the all-to-alls' seconds hidden under the kernels (all of them, up to the kernels'
    seconds: each half's dispatch and combine run while the other half computes), the bytes sent."""
    t = _timing(half, 1)
    compute, communication = 2 * t.compute, 2 * t.communication
    all_to_all = 2 * sum(c.time for c in half.collectives[0] if c.kind == "all_to_all")
    return compute, communication, min(compute, all_to_all) if timed else 0.0, 2 * t.sent


def _costs(
    per_second: float, cost: PhaseCost, generation: bool, prefill: float | None, step: float | None, tokens: int
) -> dict[str, float]:
    """Dollars per million prompt and generated tokens at the step time ``step`` (a generation's
    prompt at ``prefill``): ``per_second`` is one replica's devices' dollars a second."""
    out: dict[str, float] = {}
    if generation and prefill:
        out["prompt"] = per_second * prefill / cost.tokens * 1e6
    if step:
        out["generated" if generation or cost.phase == "decode" else "prompt"] = per_second * step / tokens * 1e6
    return out


def on_layout(
    llm: Decoder, cost: PhaseCost | GenerationFigures, parallel: Parallel | None = None, **options: Any
) -> Deployment:
    """:func:`deploy` of a phase or a whole generation (its prefill, first and last decode steps)."""
    if isinstance(cost, GenerationFigures):
        phase: PhaseCost = cost.prefill
        options.setdefault("generation", cost)
    else:
        phase = cost
    options.setdefault("hardware", phase.roofline.hardware if phase.roofline is not None else None)
    return deploy(llm, phase, parallel or Parallel(), **options)
