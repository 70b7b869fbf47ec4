"""The search for the cheapest deployment that meets latency targets (:func:`search`): for each precision and
each device type, every engine layout the model can run (``tp`` x ``pp``, experts over ``ep = tp`` for a
mixture of experts) that fits, served by ``dp`` whole copies of that engine, each copy taking ``1 / dp`` of the
traffic; each configuration simulated (:func:`opcount.llm.serve.simulate.simulate`), priced and checked against
the targets.

- Layouts: ``tp`` a power of two up to the node's devices (tensor parallelism stays on the node's links, as
  vLLM deployments keep it), ``pp`` a power of two, ``tp x pp x dp`` at most ``max_devices``; the model's own
  checks (heads, layers, experts: :class:`~opcount.llm.deploy.placement.Placement`) decide which it can run,
  the simulation's cache sizing which fit.
- Replicas: one engine simulated, its fitted step cost and cache replayed for each ``dp`` under a rate of
  ``rate / dp`` (``concurrency / dp`` clients, only where ``dp`` divides them); the copies are alike, so one
  copy's latencies are the fleet's. More copies of an engine only add devices, so the search stops adding them
  at the first ``dp`` that meets the targets (the cheapest of that engine).
- Batch caps and speculation: where vLLM's ``max_num_seqs`` misses a TPOT target (and the user set none), the
  same engine is replayed at the tighter caps of :data:`BATCH_CAPS` (a smaller batch steps faster, queueing
  longer); where the search is given a speculation, every engine is simulated without and with it.
- Cost (:func:`costs`): the run's device-hours times the price a device-hour, over its tokens: per million
  output tokens (the ranking), per million input tokens and per million tokens of both (blended), each the whole
  bill over those tokens. Energy: each device at its board power (``power_w``, TDP-based: an upper figure, not a
  measurement) for the run, per output token.
- Step costs: each (model, precision) phase traced once (:func:`traced_once`) and priced once per device: every
  layout and copy reads the same phase costs, since a phase's cost does not depend on the layout (the deployment
  splits it), nor its trace on the device (only its roofline and kernels do).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ...errors import OpcountError, OpcountValueError
from ...hardware.lookup import Hardware
from ..causal_lm import CausalLM, TracedPhase
from ..deploy.layout import Parallel
from ..deploy.placement import Placement
from ..phases import PhaseCost, PhaseRequest
from ..serve.simulate import DECODE_FIT_BATCH, Simulation, replay, simulate
from ..serve.slo import Slo
from ..serve.speculative import Speculation
from ..serve.workload import Workload
from . import bounds
from .bounds import MAX_DEVICES
from .energy import joules_per_token
from .points import Point

FULL_CACHE = 0.98  # a peak KV use from which the cache, not the step, limits the engine
# max_num_seqs tried, largest first, where vLLM's default misses a TPOT target: a smaller batch steps faster
BATCH_CAPS = (128, 32, 8)


@dataclass(frozen=True)
class Config:
    """One configuration: ``dp`` copies of an engine of ``parallel`` on ``hardware`` at ``precision``, drafting
    ``speculative`` tokens a step (0: none), its batch capped at ``max_num_seqs`` (None: the search's)."""

    hardware: str
    precision: str
    parallel: Parallel
    dp: int
    speculative: int = 0
    max_num_seqs: int | None = None

    @property
    def devices(self) -> int:
        return self.parallel.devices * self.dp

    def label(self) -> str:
        """The layout as the command line writes it: ``tp4``, ``tp2 pp2 x2`` (two copies)."""
        p = self.parallel
        parts = [f"{k}{v}" for k, v in (("tp", p.tp), ("pp", p.pp), ("ep", p.ep)) if v > 1] or ["tp1"]
        parts += [f"spec{self.speculative}"] if self.speculative else []
        parts += [f"seqs{self.max_num_seqs}"] if self.max_num_seqs is not None else []
        return " ".join(parts) + (f" x{self.dp}" if self.dp > 1 else "")


@dataclass(frozen=True)
class Result:
    """A configuration searched: its figures (``point``), its costs (dollars per million output, input and
    all tokens, None without a price), the device-hours of its run per million output tokens, the targets'
    observed values in seconds, and ``rejected``: why it cannot serve (empty where it ran)."""

    config: Config
    point: Point | None
    cost: dict[str, float] | None = None
    device_hours_per_m: float = math.inf
    observed: dict[str, float] = field(default_factory=dict)
    rejected: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def meets(self) -> bool:
        return self.point is not None and self.point.meets_slo

    def miss(self, slos: Sequence[Slo]) -> float:
        """How far it misses the targets: the largest ratio of an observed value to its target (<= 1 meets)."""
        if self.point is None:
            return math.inf
        return max((self.observed[str(s)] / s.seconds for s in slos), default=0.0)

    def rank(self) -> float:
        return self.cost["output"] if self.cost is not None else self.device_hours_per_m


@dataclass(frozen=True)
class Plan:
    """Every configuration searched: those meeting the targets cheapest first (``met``), the others."""

    met: list[Result]
    missed: list[Result]
    slos: tuple[Slo, ...]
    simulations: int

    def closest(self) -> Result | None:
        """The configuration that missed by least (no configuration met the targets)."""
        ran = [r for r in self.missed if r.point is not None]
        return min(ran, key=lambda r: (r.miss(self.slos), r.rank())) if ran else None


def traced_once(llm: CausalLM) -> CausalLM:
    """``llm`` whose phases are traced once each, whatever the device: a shallow copy (the user's object
    untouched) whose ``cost`` keeps every phase it traced, keyed by the request less its device and kernels
    (which the trace does not read: :meth:`.CausalLM.traced`), and every phase it priced, keyed by the whole
    request (the device by identity: one object a search)."""
    traces: dict[tuple[Any, ...], TracedPhase] = {}
    kept: dict[tuple[Any, ...], PhaseCost] = {}

    def cost(request: PhaseRequest) -> PhaseCost:
        r = request
        key = (r.phase, r.seq_len, r.kv_len, r.batch, r.flops_per_mac, r.preset, id(r.hardware), r.kernels)
        if key not in kept:
            checked = llm.check_phase(request)
            if key[:6] not in traces:
                traces[key[:6]] = llm.traced(checked)
            kept[key] = llm.priced(traces[key[:6]], checked)
        return kept[key]

    traced = copy.copy(llm)
    # an instance attribute over the method: simulate calls llm.cost for every phase it fits
    setattr(traced, "cost", cost)  # noqa: B010
    return traced


def engine_layouts(llm: CausalLM, hardware: Hardware, max_devices: int) -> list[Parallel]:
    """The engines ``llm`` can run on at most ``max_devices`` of ``hardware`` (:func:`.bounds.engines`; experts
    over ``ep = tp`` too for a mixture of experts), as the model's own checks allow."""
    found = []
    for tp, pp in bounds.engines(hardware, max_devices):
        for ep in (1, tp) if llm.experts and tp > 1 else (1,):
            p = Parallel(tp=tp, pp=pp, ep=ep)
            try:
                Placement.of(llm, p)
            except OpcountError:
                continue  # the model cannot run it (heads, layers, experts)
            found.append(p)
    return found


def share(workload: Workload, dp: int) -> Workload | None:
    """One copy's share of ``workload`` over ``dp`` copies (None: ``dp`` does not divide the clients); a trace's
    requests dealt round-robin, as a load balancer deals them, the first copy's every ``dp``-th."""
    if dp == 1:
        return workload
    if workload.trace is not None:
        if workload.concurrency is not None and workload.concurrency % dp:
            return None
        rows = workload.trace[::dp]
        return replace(
            workload, trace=rows, requests=len(rows), rate=None if workload.rate is None else workload.rate / dp,
            concurrency=None if workload.concurrency is None else workload.concurrency // dp,
        )  # fmt: skip
    if workload.concurrency is not None:
        if workload.concurrency % dp:
            return None
        return replace(workload, concurrency=workload.concurrency // dp, requests=max(1, workload.requests // dp))
    assert workload.rate is not None
    return replace(workload, rate=workload.rate / dp, requests=max(1, -(-workload.requests // dp)))


def latency(sim: Simulation, metric: str, percentile: float) -> float:
    """``metric`` (``ttft``, ``tpot``, ``e2el``) at ``percentile``, in seconds, over the run's requests (TPOT
    over the answers of more than one token, as ``vllm bench serve`` counts it)."""
    rows = [r[metric] for r in sim.per_request if metric != "tpot" or r["e2el"] > r["ttft"]]
    return float(np.percentile(np.asarray(rows or [0.0]), percentile))


def costs(
    price: float | None, devices: int, seconds: float, input_tokens: float, output_tokens: float
) -> tuple[dict[str, float] | None, float]:
    """The run's bill in dollars per million output, input and all tokens (None without a price), and its
    device-hours per million output tokens."""
    hours = devices * seconds / 3600
    per_m = hours / output_tokens * 1e6
    if price is None:
        return None, per_m
    bill = hours * price
    return {
        "output": bill / output_tokens * 1e6,
        "input": bill / input_tokens * 1e6,
        "blended": bill / (input_tokens + output_tokens) * 1e6,
    }, per_m


def binding(llm: CausalLM, sim: Simulation, hardware: Hardware, parallel: Parallel, kernels: str) -> str:
    """What limits the engine: ``capacity`` where its KV cache filled (a preemption, or its peak use at
    :data:`FULL_CACHE`), else what limits a decode step at the fit's batch over the prompt's cache (the
    deployment's binding term: ``compute``, ``memory``, or ``network`` for its collectives)."""
    m = sim.metrics
    if m["preemptions"] > 0 or m["peak_kv_utilization"] >= FULL_CACHE:
        return "capacity"
    batch = max(2, min(sim.engine.max_num_seqs, DECODE_FIT_BATCH))
    request = PhaseRequest(
        phase="decode", seq_len=1, kv_len=sim.workload.input_len, batch=batch, hardware=hardware, kernels=kernels
    )
    d = llm.deploy(llm.cost(request), parallel, hardware=hardware, max_batched_tokens=sim.engine.max_num_batched_tokens)
    return {"communication": "network"}.get(d.limited_by or "", d.limited_by or "compute")


def judge(
    config: Config,
    sim: Simulation,
    slos: Sequence[Slo],
    price: float | None,
    power_w: float | None,
    binds: str,
    workload: Workload,
) -> Result:
    """``sim`` (one copy of ``config``'s engine) as the fleet's figures, its cost and whether it meets ``slos``."""
    m, dp = sim.metrics, config.dp
    observed = {str(s): latency(sim, s.metric, s.percentile) for s in slos}
    seconds = m["duration"]
    outputs, inputs = m["total_output_tokens"] * dp, m["total_input_tokens"] * dp
    cost, per_m = costs(price, config.devices, seconds, inputs, outputs)
    point = Point(
        hardware=config.hardware, layout=config.label(), devices=config.devices, concurrency=workload.concurrency,
        rate=workload.rate, tokens_per_s_per_device=m["output_throughput"] / config.parallel.devices,
        tokens_per_s_per_user=1e3 / m["mean_tpot_ms"] if m["mean_tpot_ms"] > 0 else 0.0,
        ttft_p50_s=latency(sim, "ttft", 50), ttft_p90_s=latency(sim, "ttft", 90),
        tpot_p50_s=latency(sim, "tpot", 50), tpot_p90_s=latency(sim, "tpot", 90),
        cost_per_m_tokens=None if cost is None else cost["output"],
        joules_per_token=joules_per_token(None if power_w is None else power_w * config.devices, seconds, outputs),
        meets_slo=all(s.met(observed[str(s)]) for s in slos), binds=binds, precision=config.precision,
    )  # fmt: skip
    details = {"output_throughput": m["output_throughput"] * dp, "preemptions": m["preemptions"] * dp}
    return Result(config, point, cost, per_m, observed, details=details)


@dataclass(frozen=True)
class Search:
    """What a search is asked: the targets, the devices and their prices (dollars a device-hour), the bound on
    devices, the engine's knobs passed to :func:`~opcount.llm.serve.simulate.simulate` as they are."""

    workload: Workload
    slos: tuple[Slo, ...]
    hardware: tuple[Hardware, ...]
    prices: Mapping[str, float]
    max_devices: int = 8
    options: Mapping[str, Any] = field(default_factory=dict)  # simulate's keyword arguments
    status: Callable[[str], None] | None = None
    speculation: Speculation | None = None  # tried beside no speculation, drafted by ``draft`` (None: MTP)
    draft: CausalLM | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_devices, int) or not 1 <= self.max_devices <= MAX_DEVICES:
            raise OpcountValueError(f"max_devices: from 1 to {MAX_DEVICES}, got {self.max_devices!r}")
        names = {h.name for h in self.hardware}
        unknown = sorted(set(self.prices) - names)
        if unknown:
            raise OpcountValueError(f"a price for {', '.join(unknown)}, which is not searched ({', '.join(names)})")
        if self.prices and set(self.prices) != names:
            missing = sorted(names - set(self.prices))
            raise OpcountValueError(f"no price for {', '.join(missing)}: price every device searched, or none")


def engines(search: Search, llm: CausalLM, precision: str, hardware: Hardware) -> tuple[list[Result], int]:
    """Every engine of ``llm`` on ``hardware``, without and with speculative decoding where the search drafts,
    and its copies, as :func:`search` searches them; the results and the simulations run."""
    results: list[Result] = []
    runs = 0
    for parallel in engine_layouts(llm, hardware, search.max_devices):
        for speculation in (None, search.speculation) if search.speculation is not None else (None,):
            found, n = _copies(search, llm, precision, hardware, parallel, speculation)
            results += found
            runs += n
    return results, runs


def _copies(
    search: Search, llm: CausalLM, precision: str, hardware: Hardware, parallel: Parallel, spec: Speculation | None
) -> tuple[list[Result], int]:
    """One engine and its copies, each copy count at vLLM's batch cap and, where that misses a TPOT target, at
    the tighter caps of :data:`BATCH_CAPS`; up to the first copy count meeting the targets."""
    results: list[Result] = []
    runs = 0
    price, kernels = search.prices.get(hardware.name), search.options.get("kernels", "fused")
    base: Simulation | None = None
    binds = ""
    tokens = spec.tokens if spec is not None else 0
    for dp in range(1, search.max_devices // parallel.devices + 1):
        config = Config(hardware.name, precision, parallel, dp, tokens)
        part = share(search.workload, dp)
        if part is None:
            continue
        if search.status is not None:
            search.status(f"simulating {precision} on {config.devices} x {hardware.name}: {config.label()}")
        try:
            if base is None:
                draft = search.draft if spec is not None else None
                # the estimate's run alone: a configuration is judged on it, never on the bound's
                base = simulate(
                    llm, part, hardware, parallel, **search.options, speculation=spec, draft=draft, with_bound=False
                )
                binds = binding(llm, base, hardware, parallel, kernels)
                sim = base
            else:
                sim = _replay(base, part, parallel, base.engine)
        except OpcountError as e:  # it does not fit, or a request outgrows its cache
            results.append(Result(config, None, rejected=str(e)))
            break
        runs += 1
        results.append(judge(config, sim, search.slos, price, hardware.power_w, binds, part))
        for cap in _caps(search, sim, part) if not results[-1].meets else ():
            capped = _replay(base, part, parallel, replace(base.engine, max_num_seqs=cap))
            runs += 1
            results.append(judge(replace(config, max_num_seqs=cap), capped, search.slos, price, hardware.power_w,
                                 binds, part))  # fmt: skip
            if results[-1].meets:
                break
        if results[-1].meets:
            break  # more copies of this engine only cost more
    return results, runs


def _replay(base: Simulation, workload: Workload, parallel: Parallel, engine: Any) -> Simulation:
    """``base``'s engine (or ``engine``, its settings changed) under other traffic, over its own step costs."""
    assert base.costs is not None  # simulate keeps the step costs it priced with
    estimate = base.costs[0]  # the estimate's run alone, as the base's
    profile = base.engine_profile  # its server's time to first token, as simulate adds it
    server = 0.0 if profile is None else profile.ttft_overhead_s
    return replay(workload, engine, estimate, None, parallel.devices, speculation=base.speculation, server_s=server)


def _caps(search: Search, sim: Simulation, workload: Workload) -> list[int]:
    """The tighter batch caps worth a replay: where a TPOT target is missed and the user set no cap, each of
    :data:`BATCH_CAPS` below the engine's, the clients of a closed loop and the most requests the run held at once
    (a cap at or above them caps nothing)."""
    if search.options.get("max_num_seqs") is not None or not any(s.metric == "tpot" for s in search.slos):
        return []
    most = min(sim.engine.max_num_seqs, workload.concurrency or sim.engine.max_num_seqs, in_system(sim))
    return [c for c in BATCH_CAPS if c < most]


def in_system(sim: Simulation) -> int:
    """The most requests the run held at once (arrived and not finished): no batch can be larger, so a cap at or
    above it caps nothing."""
    events = sorted(
        [(r["arrival"], 1) for r in sim.per_request] + [(r["arrival"] + r["e2el"], -1) for r in sim.per_request]
    )  # an end before an arrival at the same instant: -1 sorts first
    held = most = 0
    for _, change in events:
        held += change
        most = max(most, held)
    return most


def ranked(results: Sequence[Result], slos: tuple[Slo, ...], runs: int) -> Plan:
    """``results`` as a plan: those meeting the targets cheapest first (then on fewer devices)."""
    met = sorted((r for r in results if r.meets), key=lambda r: (r.rank(), r.point.devices if r.point else 0))
    return Plan(met, [r for r in results if not r.meets], slos, runs)
