"""A simulation of served traffic (:func:`simulate`): one deployment (a model, a device, a layout, its
precision), a workload (:mod:`.workload`), the engine's scheduler (:mod:`.scheduler`) over step costs fitted
from a few traced phases (:mod:`.step_cost`); per-request latencies and their percentiles, throughput, and
the cache's use, under the names ``vllm bench serve`` gives them (``mean_ttft_ms``, ``p99_tpot_ms``...;
``BenchmarkMetrics`` in vllm/benchmarks/serve.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..._runtime import gc_paused
from ...errors import OpcountValueError
from ...hardware.lookup import Hardware
from ...hardware.lookup import hardware as lookup_hardware
from ..attention.indexed import INDEXED, INDEXER_KEYS
from ..cache.specs import FULL, LATENT
from ..causal_lm import CausalLM
from ..deploy import DEFAULT_GPU_MEMORY_UTILIZATION
from ..deploy.expert_routes import Dispatch
from ..deploy.fit import LARGE_DEFAULT, default_max_batched_tokens
from ..deploy.layout import Parallel
from ..engines.profile import EngineProfile
from ..phases import PhaseCost, PhaseRequest
from . import outputs, scheduler
from .drafting import Drafter, WithDraft, mtp_head, projection, shared_share
from .slo import Slo
from .speculative import Speculation
from .step_cost import Fitted, StepCost, fitted
from .workload import Workload

DEFAULT_BLOCK_SIZE = 16  # vLLM's --block-size on CUDA (CacheConfig.block_size, vllm/config/cache.py)
# vLLM V1's max_num_seqs for its OpenAI-compatible server (EngineArgs.get_batch_defaults in
# vllm/engine/arg_utils.py): 1024 on a device of 70 GiB or more that is not an A100, 256 on the others
LARGE_MAX_NUM_SEQS, SMALL_MAX_NUM_SEQS = 1024, 256
PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2el")
DECODE_FIT_BATCH = 64  # the larger batch a decode step is traced at for the fit (or max_num_seqs, if fewer)
# the layer types whose cache grows with every token (vLLM's FullAttentionManager and MLA's pages): the blocks
PER_TOKEN = (FULL, LATENT, INDEXED, INDEXER_KEYS)


def default_max_num_seqs(hardware: Hardware | None) -> int:
    """vLLM V1's ``max_num_seqs`` on ``hardware`` (its OpenAI-compatible server's default)."""
    return LARGE_MAX_NUM_SEQS if default_max_batched_tokens(hardware) == LARGE_DEFAULT else SMALL_MAX_NUM_SEQS


@dataclass(frozen=True)
class Simulation:
    """What a workload saw: ``metrics`` under vLLM's benchmark names (milliseconds, tokens, requests a
    second), the same from the bound's step costs (``bound``, None where not priced), the engine's
    settings, the cache, and how the step cost was fitted."""

    workload: Workload
    engine: scheduler.Engine
    devices: int
    metrics: dict[str, float]
    bound: dict[str, float] | None
    kv_bytes_per_token: float | None  # per device, a token's in the layers that grow with it (:func:`kv_layout`)
    fit: Fitted | None
    per_request: list[dict[str, float]]
    goodput: outputs.Goodput | None = None  # under the latency targets given (None: none given)
    kv_bytes_per_sequence: float = 0.0  # per device, what a running request holds whatever its length
    speculation: Speculation | None = None
    draft_fit: Fitted | None = None  # the draft's (or MTP head's) step cost, fitted as the target's
    # the step costs the run priced with (the estimate's, the bound's): the fit's, with the draft's added where
    # one drafts; what a replay of the same engine under other traffic takes (:func:`replay`)
    costs: tuple[StepCost, StepCost | None] | None = None
    engine_profile: EngineProfile | None = None  # whose terms joined every step's estimate (None: none)

    def as_dict(self) -> dict[str, Any]:
        e = self.engine
        return {
            "workload": self.workload.as_dict(),
            "engine": {
                "max_num_seqs": e.max_num_seqs, "max_num_batched_tokens": e.max_num_batched_tokens,
                "block_size": e.block_size, "num_gpu_blocks": e.num_blocks, "enable_prefix_caching": e.enable_prefix_caching,
                "kv_bytes_per_token_per_device": self.kv_bytes_per_token,
                "kv_bytes_per_sequence_per_device": self.kv_bytes_per_sequence,
                "blocks_per_sequence": e.blocks_per_sequence,
            },
            "devices": self.devices,
            "step_cost": None if self.fit is None else {
                "traced_phases": self.fit.traces, "decode_fit_error": self.fit.check_error,
                "prefill_chunk_fit_error": self.fit.chunk_error,
                "prefill_chunk": "P(n) + k (c + e n): a prompt of n tokens and what k cached positions add, "
                "fitted from prefill phases traced over a cached prefix",
            },
            "speculative": None if self.speculation is None else self.speculation.as_dict() | {
                "draft_traced_phases": None if self.draft_fit is None else self.draft_fit.traces,
                "verify": "a prefill of 1 + k tokens over the cache, traced and fitted as the decode step is",
            },
            "engine_profile": None if self.engine_profile is None else self.engine_profile.as_dict(),
            "metrics": self.metrics,
            "bound": self.bound,
        } | outputs.summary(self.metrics, self.devices, self.goodput)  # fmt: skip


def metrics(
    run: scheduler.Run, workload: Workload, devices: int, num_blocks: int, server_s: float = 0.0
) -> dict[str, float]:
    """The run's figures as ``vllm bench serve`` names them, milliseconds for latencies; throughput per
    second of the run (its first arrival to its last token), also per device; the cache's use; ``server_s``
    the server's own time to first token (:func:`per_request`)."""
    done, rows = run.requests, per_request(run, server_s)
    duration = max(r.token_times[-1] for r in done)
    ttft = [row["ttft"] * 1e3 for row in rows]
    e2el = [row["e2el"] * 1e3 for row in rows]
    tpot = [row["tpot"] * 1e3 for row, r in zip(rows, done, strict=True) if r.output > 1]
    # one gap per step that brought tokens: a verify step's several tokens stream as one chunk, and vllm bench
    # serve records one ITL a chunk (its request functions, vllm/benchmarks/lib/endpoint_request_func.py)
    itl = np.concatenate([np.diff(np.unique(np.frombuffer(r.token_times))) for r in done]) * 1e3
    inputs, outputs = sum(r.prompt for r in done), sum(r.output for r in done)
    out: dict[str, float] = {
        "completed": len(done),
        "total_input_tokens": inputs,
        "total_output_tokens": outputs,
        "duration": duration,
        "request_throughput": len(done) / duration,
        "output_throughput": outputs / duration,
        "total_token_throughput": (inputs + outputs) / duration,
    }
    for key in ("request_throughput", "output_throughput", "total_token_throughput"):
        out[f"{key}_per_device"] = out[key] / devices
    for name, values in zip(METRICS, (np.asarray(ttft), np.asarray(tpot), itl, np.asarray(e2el)), strict=True):
        data = values if values.size else np.zeros(1)  # none: answers of one token have no TPOT or ITL
        out[f"mean_{name}_ms"] = float(data.mean())
        out[f"median_{name}_ms"] = float(np.median(data))
        out[f"std_{name}_ms"] = float(data.std())
        for p in PERCENTILES:
            out[f"p{p}_{name}_ms"] = float(np.percentile(data, p))
    out |= {
        "steps": run.steps,
        "preemptions": run.preemptions,
        "busy": run.busy / duration,
        "kv_utilization": run.block_seconds / (duration * num_blocks),  # the mean share of the blocks in use
        "peak_kv_utilization": run.peak_blocks / num_blocks,
    }
    if run.prefix_queried:  # vLLM's prefix cache hit rate (PrefixCacheStats): prompt tokens found cached
        out["prefix_cache_hit_rate"] = run.prefix_hit / run.prefix_queried
    if run.verifies:  # vLLM's spec decode metrics' "mean acceptance length" (vllm/v1/spec_decode/metrics.py)
        out["mean_acceptance_length"] = run.verified_tokens / run.verifies
    return out


def per_request(run: scheduler.Run, server_s: float = 0.0) -> list[dict[str, float]]:
    """One row a request: its index, arrival, lengths and the latencies of :func:`metrics`, in seconds; TPOT as
    vLLM's benchmark counts it, the time after the first token over the tokens after it (0 for an answer of one
    token). ``server_s``, an engine profile's server time to first token (HTTP, tokenisation), is added to each
    request's TTFT and end-to-end latency as a separate term: the schedule itself is not delayed by it."""
    return [
        {
            "index": r.index, "arrival": r.arrival, "prompt": r.prompt, "output": r.output,
            "ttft": r.token_times[0] - r.arrival + server_s, "e2el": r.token_times[-1] - r.arrival + server_s,
            "tpot": (r.token_times[-1] - r.token_times[0]) / (r.output - 1) if r.output > 1 else 0.0,
            "preempted": r.preempted,
        }
        for r in run.requests
    ]  # fmt: skip


def replay(
    workload: Workload,
    engine: scheduler.Engine,
    cost: StepCost,
    bound: StepCost | None = None,
    devices: int = 1,
    *,
    slos: Sequence[Slo] = (),
    on_step: scheduler.OnStep | None = None,
    progress: scheduler.OnProgress | None = None,
    speculation: Speculation | None = None,
    server_s: float = 0.0,
) -> Simulation:
    """``workload`` through ``engine`` with a step cost given (and the bound's, run again beside it); goodput
    under ``slos``; ``on_step`` and ``progress`` observe the estimate's run (:func:`scheduler.run`); each decode
    speculating as ``speculation`` says; ``server_s`` the server's time to first token (the estimate's alone)."""
    with gc_paused():  # the run makes a million small objects and no cycle: collections would find nothing
        run = scheduler.run(workload, engine, cost, on_step=on_step, progress=progress, speculation=speculation)
        other = None if bound is None else scheduler.run(workload, engine, bound, speculation=speculation)
    bounded = None if other is None else metrics(other, workload, devices, engine.num_blocks)
    if bounded is not None and isinstance(bound, WithDraft):
        bounded["draft_time_share"] = bound.draft_share
    found = metrics(run, workload, devices, engine.num_blocks, server_s)
    if isinstance(cost, WithDraft):  # the draft's share of the seconds the engine ran steps
        found["draft_time_share"] = cost.draft_share
    good = outputs.goodput(run, found["duration"], slos) if slos else None
    if good is not None:
        found["request_goodput"] = good.requests_per_s  # vLLM's name (BenchmarkMetrics), with --goodput given
    return Simulation(
        workload, engine, devices, found, bounded, None, None, per_request(run, server_s), good, speculation=speculation
    )


def simulate(
    llm: CausalLM,
    workload: Workload,
    hardware: Hardware | str,
    parallel: Parallel | None = None,
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    enable_prefix_caching: bool = True,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    kernels: str = "fused",
    flops_per_mac: int = 1,
    dispatch: Dispatch | None = None,
    status: Any = None,
    slos: Sequence[Slo] = (),
    on_step: scheduler.OnStep | None = None,
    progress: scheduler.OnProgress | None = None,
    phases: dict[tuple[object, ...], PhaseCost] | None = None,
    speculation: Speculation | None = None,
    draft: CausalLM | None = None,
    with_bound: bool = True,
    engine_profile: EngineProfile | None = None,
) -> Simulation:
    """``workload`` served by ``llm`` on ``parallel`` (one device by default) of ``hardware``: the engine's
    knobs under vLLM's names, each default vLLM's for the device; the KV cache's blocks from the fit; goodput
    under ``slos`` (:mod:`.slo`); ``on_step`` and ``progress`` observe the run (:func:`scheduler.run`).

    ``phases``: the traced phases to reuse and to add to, one dict passed to every call that prices the
    same model (keyed by the phase, its sizes, the hardware's name, the kernels and the FLOP convention). A
    phase's cost is priced on one hardware (its roofline and kernels), so another layout on the same hardware
    retraces nothing and deploys the phases kept (:meth:`CausalLM.deploy`, a small part of a traced phase's time:
    what it works out per layout is kept with the phase), while another hardware prices its own (a plan prices
    one trace per device: :func:`opcount.llm.plan.search.traced_once`).

    ``speculation``: speculative decoding, drafted by ``draft`` (a second model on the same devices and layout)
    or, without it, by the model's own multi-token prediction head (:mod:`.speculative`); the draft's phases
    are traced apart from ``phases``.

    ``with_bound``: run the bound's step costs through the scheduler too, beside the estimate's (its figures are
    :attr:`Simulation.bound`); a caller reading the estimate's alone (a plan) saves that run, the fit unchanged.


    ``engine_profile``: an engine's terms added to every traced step's estimate and its server's time to first
    token to every request's (:mod:`opcount.llm.engines`); the bound is untouched."""
    hardware = lookup_hardware(hardware) if isinstance(hardware, str) else hardware
    parallel = parallel or Parallel()
    if parallel.dp > 1 or parallel.micro_batches > 1:
        raise OpcountValueError("simulate runs one engine: --dp and --micro-batches are not modelled yet")
    if hardware.memory_bytes is None:
        raise OpcountValueError(f"{hardware.name} does not say its memory: the KV cache cannot be sized")
    if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
        raise OpcountValueError(f"block_size must be a whole number of tokens from 1, got {block_size!r}")
    context = getattr(llm.config, "max_position_embeddings", None)
    prompts, answers = workload.lengths()
    if isinstance(context, int) and int((prompts + answers).max()) > context:
        # vLLM's max_model_len defaults to it, and a request longer than that is refused
        i = int(np.argmax(prompts + answers > context))
        which = f"request {i + 1} of the trace" if workload.trace is not None else "a request"
        raise OpcountValueError(
            f"{which} of {prompts[i]} + {answers[i]} tokens is longer than the model's context of {context} "
            "positions (max_position_embeddings)"
        )
    in_len, out_len = int(prompts.max()), int(answers.max())  # the step costs are fitted up to the longest
    budget = max_num_batched_tokens or default_max_batched_tokens(hardware)
    seqs = max_num_seqs or default_max_num_seqs(hardware)
    if draft is not None and speculation is None:
        raise OpcountValueError("a draft model drafts speculative tokens: give their number (--speculative-tokens)")
    if speculation is not None and draft is None and speculation.draft != "mtp":
        raise OpcountValueError(f"the speculation names the draft {speculation.draft!r}, but no draft model is given")
    if speculation is not None and draft is not None and speculation.draft == "mtp":
        speculation = replace(speculation, draft=type(draft.model).__name__)  # the label says which model drafts
    big = max(2, min(seqs, DECODE_FIT_BATCH))
    llm.check_generation(in_len, out_len, batch=big)
    drafter = None if speculation is None else drafting(llm, speculation, draft, budget)
    if drafter is not None:
        drafter.check_generation(in_len, out_len, batch=big)
    deployments: dict[tuple[str, int, int, int], Any] = {}
    drafts: dict[tuple[str, int, int, int], Any] = {}

    def tracer(
        model: CausalLM, deployed: dict[tuple[str, int, int, int], Any], costs: dict[tuple[object, ...], PhaseCost]
    ) -> Any:
        def trace(phase: str, batch: int, new: int, cached: int) -> tuple[float, float | None]:
            if status is not None:
                status(f"tracing {phase} of {batch} x {new} tokens over {cached} cached")
            key = (phase, batch, new, cached, hardware.name, kernels, flops_per_mac)
            cost = costs.get(key)
            if cost is None:
                request = PhaseRequest(
                    phase=phase, seq_len=new, kv_len=cached, batch=batch, hardware=hardware, kernels=kernels,
                    flops_per_mac=flops_per_mac,
                )  # fmt: skip
                cost = costs[key] = model.cost(request)
            d = model.deploy(
                cost, parallel, hardware=hardware, gpu_memory_utilization=gpu_memory_utilization,
                max_batched_tokens=budget, dispatch=dispatch, engine=engine_profile,
            )  # fmt: skip
            deployed[phase, batch, new, cached] = d
            assert d.step_time is not None  # priced on hardware
            return d.step_time, d.step_time_bound

        return trace

    k = speculation.tokens if speculation is not None else 0
    with gc_paused():  # a dozen phases traced one after another, the earlier ones kept: collections free nothing
        fit = fitted(
            tracer(llm, deployments, {} if phases is None else phases), in_len, out_len,
            budget, big, k, seqs,
        )  # fmt: skip
    # the cache: the device's capacity less its weights and the activations of a step of `budget` tokens
    # (vLLM's profiling run), in blocks of the bytes a token holds on the busiest device
    longest = min(in_len, budget)
    prompt = deployments["prefill", 1, longest, 0]
    last = max((k for k in deployments if k[0] == "decode" and k[1] == 1), key=lambda k: k[3])
    per_token, per_sequence = kv_layout(llm, last[3], deployments[last].per_device.kv_cache)
    activations = prompt.per_device.activations * budget / longest
    capacity = prompt.capacity  # the device's memory times gpu_memory_utilization, as the deployment judged it
    assert capacity is not None  # the device says its memory (checked above)
    free = capacity - prompt.per_device.weights - activations
    estimate: StepCost = fit.estimate
    bound: StepCost | None = fit.bound
    draft_fit = None
    if speculation is not None and drafter is not None:
        draft_fit = fitted(tracer(drafter, drafts, {}), in_len, out_len, budget, big)
        extra, weights = (0.0, 0.0), drafts["prefill", 1, longest, 0].per_device.weights
        if draft is None:  # an MTP head: the model's embedding and LM head are its own, its projection is not
            extra, projected = projection(llm, hardware, big)
            weights = weights * (1 - shared_share(drafter)) + projected
        free -= weights
        per_token += drafts[last].per_device.kv_cache / (last[3] + 1)  # the draft's own KV cache, each token
        estimate = WithDraft(fit.estimate, Drafter(draft_fit.estimate, k, extra))
        bound = (
            None
            if fit.bound is None or draft_fit.bound is None
            else WithDraft(fit.bound, Drafter(draft_fit.bound, k, extra))
        )
    if per_token <= 0:
        raise OpcountValueError(f"{type(llm.model).__name__} caches nothing per token: no blocks to simulate")
    blocks = math.floor(free / (per_token * block_size))
    if blocks < 1:
        raise OpcountValueError(
            f"no room for the KV cache on {hardware.name}: weights {prompt.per_device.weights / 2**30:.1f} GiB and "
            f"activations {activations / 2**30:.1f} GiB of {capacity / 2**30:.1f} GiB"
        )
    engine = scheduler.Engine(
        max_num_seqs=seqs, max_num_batched_tokens=budget, block_size=block_size, num_blocks=blocks,
        blocks_per_sequence=math.ceil(per_sequence / (per_token * block_size)),
        enable_prefix_caching=enable_prefix_caching,
    )  # fmt: skip
    if status is not None:
        status(f"simulating {workload.requests} requests")
    found = replay(
        workload, engine, estimate, bound if with_bound else None, parallel.devices, slos=slos, on_step=on_step,
        progress=progress, speculation=speculation,
        server_s=0.0 if engine_profile is None else engine_profile.ttft_overhead_s,
    )  # fmt: skip
    return replace(
        found, kv_bytes_per_token=per_token, fit=fit, kv_bytes_per_sequence=per_sequence, draft_fit=draft_fit,
        costs=(estimate, bound), engine_profile=engine_profile,
    )  # fmt: skip


def kv_layout(llm: CausalLM, kv_len: int, held: float) -> tuple[float, float]:
    """A request's cache on one device as vLLM's hybrid KV cache manager allocates it (``KVCacheCoordinator``
    in vllm/v1/core/kv_cache_coordinator.py, one manager per layer type in single_type_kv_cache_manager.py):
    ``(bytes a token adds, bytes held per running sequence)``. ``held``: one device's bytes of one sequence at
    ``kv_len + 1`` positions (the deployment's), shared between the layer types as the model's cache is.

    The layers that keep every position (full attention, MLA's latent, DSA's indexer keys: the
    ``FullAttentionManager``'s blocks) make the bytes per token. The others are held per sequence at their
    size at ``kv_len + 1`` positions, the longest a request reaches: a sliding layer its window
    (``SlidingWindowManager`` frees the blocks before it), a chunked layer its chunk, a recurrent layer its
    state (``MambaManager``, one state a request). Reserving the window from a request's first chunk is an
    upper bound while its context is shorter; vLLM's page sizes, equal across layer types, are pooled here as
    bytes. A model with no layer keeping every position spreads its whole cache over the tokens, as the
    window were none."""
    by_type = llm.kv_bytes_by_type(kv_len, 1, 1)
    total = sum(by_type.values())
    growing = sum(v for k, v in by_type.items() if k in PER_TOKEN)
    if not growing:
        return held / (kv_len + 1), 0.0
    share = held / total  # the device's share of the cache (tensor parallelism splits each layer's heads)
    return share * growing / (kv_len + 1), share * (total - growing)


def drafting(llm: CausalLM, speculation: Speculation, draft: CausalLM | None, budget: int) -> CausalLM:
    """The model that drafts: ``draft``, or ``llm``'s MTP head; refused where the budget cannot hold a verify,
    or where the draft's vocabulary is not the model's (its tokens are the model's to verify)."""
    if budget < 1 + speculation.tokens:
        raise OpcountValueError(
            f"max_num_batched_tokens {budget} cannot hold one verify of 1 + {speculation.tokens} speculative tokens"
        )
    if draft is None:
        return mtp_head(llm)
    ours, theirs = getattr(llm.config, "vocab_size", None), getattr(draft.config, "vocab_size", None)
    if ours != theirs:
        raise OpcountValueError(
            f"the draft model's vocabulary ({theirs} tokens) is not the model's ({ours}): it must share its tokenizer"
        )
    return draft
