"""Disaggregated serving (:func:`pools`): a prefill pool and a decode pool, each ``dp`` copies of an engine,
possibly on different devices, every prompt's KV cache sent from the one to the other.

- The prefill pool serves every request as a prompt with an answer of one token (its first): its TTFT is the
  queue and the prompt. The decode pool serves the same arrivals with their prompts already computed (:class:`
  Admitted`, the hook: a step prices its decode sequences only, an admitted prompt's chunks cost nothing, and
  the token the admission step gives is the prefill's first); its TTFT is the wait for room (blocks, seats).
  The pools are simulated apart, each at the rate over its copies, so both see the workload's arrival process:
  the prefill queue's reshaping of the decode pool's arrivals is left out. A closed loop couples the pools'
  latencies to each other, which two separate runs cannot, so disaggregation takes a rate.
- The KV transfer (:func:`transfer`): the prefill engine's busiest device holds ``kv_bytes_per_token x
  input_len`` bytes of the prompt's cache and sends them over its link, each device its share at once:
  ``bytes / bandwidth + latency``. The link is the node's scale-up link (NVLink) where both pools are the same
  device and all their devices sit in one node; else the scale-out network (the slower device's), and a
  device with no network figures cannot send between nodes.
- Combined: TTFT at a percentile is the prefill pool's plus the transfer plus the decode pool's wait at that
  percentile (a sum of percentiles: no less than the percentile of the sums, so conservative); TPOT is the
  decode pool's. Cost: both pools' devices for the longer of the two runs.
- A pool that cannot hold its share of the traffic is rejected with the reason (:func:`holds`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ...errors import OpcountError
from ...hardware.lookup import Hardware
from ..causal_lm import CausalLM
from ..serve.simulate import Simulation, replay, simulate
from ..serve.step_cost import FittedStepCost, Step
from .energy import joules_per_token
from .points import Point
from .search import Config, Result, Search, binding, costs, engine_layouts, latency, share

HELD = 0.9  # a pool's run may last at most 1 / HELD of its last arrival plus a typical request's latency


@dataclass(frozen=True)
class Admitted:
    """A step of the decode pool: its decode sequences priced by the fitted decode step; a prompt admitted with
    its cache already sent costs nothing (its chunks are the cache arriving, not computed)."""

    cost: FittedStepCost

    def __call__(self, step: Step) -> float:
        return self.cost.decode(step.decode, step.kv_tokens) if step.decode else 0.0


@dataclass(frozen=True)
class Pool:
    """One pool that holds its share: its configuration and device, one copy's run, and what limits it."""

    config: Config
    hardware: Hardware
    sim: Simulation
    binds: str


def holds(sim: Simulation) -> str:
    """Empty where the run kept up with its arrivals; else why not: a run lasting longer than :data:`HELD` allows
    past its last arrival plus its median request's latency means its queue grew."""
    rows = sim.per_request
    last = max(r["arrival"] for r in rows)
    typical = float(np.median([r["e2el"] for r in rows]))
    if sim.metrics["duration"] * HELD <= last + typical:
        return ""
    offered = (len(rows) - 1) / last if last > 0 else float("inf")
    return f"serves {sim.metrics['request_throughput']:.3g} requests/s of its share of {offered:.3g}/s: its queue grows"


def link(prefill: Pool, decode: Pool) -> tuple[float, float, str]:
    """The link a prompt's cache crosses: (bytes/s, seconds of latency, its name)."""
    hp, hd = prefill.hardware, decode.hardware
    if hp.interconnect is None or hd.interconnect is None:
        none = hp.name if hp.interconnect is None else hd.name
        raise OpcountError(f"{none} has no interconnect figures: no KV cache can be sent to or from it")
    a, b = hp.interconnect, hd.interconnect
    if hp.name == hd.name and prefill.config.devices + decode.config.devices <= a.devices_per_node:
        return a.bandwidth, a.latency, "scale-up"
    if a.network_bandwidth is None or b.network_bandwidth is None:
        raise OpcountError(
            f"{prefill.config.devices} + {decode.config.devices} devices of {hp.name} and {hd.name} span nodes, "
            "and no network between nodes is given"
        )
    return min(a.network_bandwidth, b.network_bandwidth), max(a.network_latency or 0, b.network_latency or 0), "network"


def transfer(prefill: Pool, decode: Pool, input_len: int) -> tuple[float, str]:
    """Seconds to send a prompt's cache from the prefill pool to the decode pool (the busiest prefill device's
    share over its link), and the link's name."""
    assert prefill.sim.kv_bytes_per_token is not None  # simulate sizes the cache from it
    bandwidth, latency_s, name = link(prefill, decode)
    return prefill.sim.kv_bytes_per_token * input_len / bandwidth + latency_s, name


def _pool(search: Search, llm: CausalLM, precision: str, hardware: Hardware, role: str) -> list[Pool | Result]:
    """Each engine of one pool with the fewest copies that hold their share and meet the pool's own target
    (TTFT for prefill, TPOT for decode), or the reason it has none."""
    found: list[Pool | Result] = []
    kernels = search.options.get("kernels", "fused")
    wanted = [s for s in search.slos if s.metric == ("ttft" if role == "prefill" else "tpot")]
    for parallel in engine_layouts(llm, hardware, search.max_devices - 1):  # the other pool takes one at least
        base: Simulation | None = None
        reason = ""
        for dp in range(1, (search.max_devices - 1) // parallel.devices + 1):
            config = Config(hardware.name, precision, parallel, dp)
            part = share(search.workload, dp)
            assert part is not None  # a rate divides
            if role == "prefill":
                part = replace(part, output_len=1)
            if search.status is not None:
                search.status(f"simulating a {role} pool of {config.devices} x {hardware.name}: {config.label()}")
            try:
                if base is None:  # judged on the estimate's run alone
                    base = simulate(llm, part, hardware, parallel, **search.options, with_bound=False)
                assert base.fit is not None  # simulate fits its step costs
                cost = base.fit.estimate if role == "prefill" else Admitted(base.fit.estimate)
                sim = base if dp == 1 and role == "prefill" else replay(part, base.engine, cost, None, parallel.devices)
            except OpcountError as e:
                reason = str(e)
                break
            reason = holds(sim) or next(
                (f"{s} missed: {latency(sim, s.metric, s.percentile):.3g} s" for s in wanted
                 if not s.met(latency(sim, s.metric, s.percentile))), "",
            )  # fmt: skip
            if not reason:
                found.append(Pool(config, hardware, sim, binding(llm, base, hardware, parallel, kernels)))
                break
        if reason:
            found.append(Result(Config(hardware.name, precision, parallel, 1), None, rejected=f"{role} pool: {reason}"))
    return found


def combine(search: Search, prefill: Pool, decode: Pool) -> Result:
    """The two pools as one configuration: its latencies, cost and whether it meets the targets."""
    w = search.workload
    hp, hd = prefill.hardware, decode.hardware
    config = decode.config  # the record's own fields (layout, devices) are the point's
    label = f"prefill {prefill.config.label()} + decode {decode.config.label()}"
    devices = prefill.config.devices + decode.config.devices
    try:
        sent, via = transfer(prefill, decode, w.input_len)
    except OpcountError as e:
        return Result(config, None, rejected=f"{label}: {e}")
    ttft = {p: latency(prefill.sim, "ttft", p) + sent + latency(decode.sim, "ttft", p) for p in (50, 90)}
    observed = {}
    for s in search.slos:
        if s.metric == "ttft":
            observed[str(s)] = (
                latency(prefill.sim, "ttft", s.percentile) + sent + latency(decode.sim, "ttft", s.percentile)
            )
        else:
            observed[str(s)] = latency(decode.sim, s.metric, s.percentile)
    seconds = max(prefill.sim.metrics["duration"], decode.sim.metrics["duration"])
    outputs, inputs = float(w.requests * w.output_len), float(w.requests * w.input_len)
    price_p, price_d = search.prices.get(hp.name), search.prices.get(hd.name)
    bill_rate = None if price_p is None or price_d is None else (
        price_p * prefill.config.devices + price_d * decode.config.devices
    ) / devices  # fmt: skip
    cost, per_m = costs(bill_rate, devices, seconds, inputs, outputs)
    power = None if hp.power_w is None or hd.power_w is None else (
        hp.power_w * prefill.config.devices + hd.power_w * decode.config.devices
    )  # fmt: skip
    m = decode.sim.metrics
    point = Point(
        hardware=hp.name if hp.name == hd.name else f"{hp.name}+{hd.name}", layout=label, devices=devices,
        concurrency=None, rate=w.rate, tokens_per_s_per_device=outputs / seconds / devices,
        tokens_per_s_per_user=1e3 / m["mean_tpot_ms"] if m["mean_tpot_ms"] > 0 else 0.0,
        ttft_p50_s=ttft[50], ttft_p90_s=ttft[90],
        tpot_p50_s=latency(decode.sim, "tpot", 50), tpot_p90_s=latency(decode.sim, "tpot", 90),
        cost_per_m_tokens=None if cost is None else cost["output"],
        joules_per_token=joules_per_token(power, seconds, outputs),
        meets_slo=all(s.met(observed[str(s)]) for s in search.slos), precision=config.precision,
        binds="network" if sent > latency(prefill.sim, "ttft", 50) else decode.binds,
    )  # fmt: skip
    details: dict[str, Any] = {
        "prefill": {"hardware": hp.name, "layout": prefill.config.label(), "devices": prefill.config.devices,
                    "binds": prefill.binds},
        "decode": {"hardware": hd.name, "layout": decode.config.label(), "devices": decode.config.devices,
                   "binds": decode.binds},
        "kv_transfer_s": sent, "kv_link": via, "output_throughput": outputs / seconds,
    }  # fmt: skip
    return Result(config, point, cost, per_m, observed, details=details)


def pools(search: Search, models: dict[str, CausalLM]) -> tuple[list[Result], int]:
    """Every pair of a prefill pool and a decode pool (each engine with its fewest copies that hold their share,
    on any device searched, at one precision) within the bound on devices; the results and the pools simulated.
    ``models``: each precision's model as :func:`.search.traced_once` wraps it, the one-pool search's own, so
    the pools price the phases it traced."""
    if search.workload.rate is None:
        raise OpcountError("disaggregated pools are simulated apart and need a rate: give --rate, not --concurrency")
    results: list[Result] = []
    runs = 0
    for precision, llm in models.items():
        prefill: list[Pool] = []
        decode: list[Pool] = []
        for hardware in search.hardware:
            for role, kept in (("prefill", prefill), ("decode", decode)):
                for found in _pool(search, llm, precision, hardware, role):
                    runs += 1
                    if isinstance(found, Pool):
                        kept.append(found)
                    else:
                        results.append(found)
        results += [
            combine(search, p, d) for p in prefill for d in decode
            if p.config.devices + d.config.devices <= search.max_devices
        ]  # fmt: skip
    return results, runs
