"""A whole generation of a causal LM: a prompt of ``prompt_len`` tokens, then ``gen_len`` decode
steps of one token each (:func:`generation`).

A step's cost per operator is affine in the cache length (linear layers do not depend on it,
attention and the cache reads grow by one token's worth per step) over each run of steps in which no
sliding window fills and no chunk starts (:meth:`.cache.specs.CacheSpecs.affine_steps`), so two traces a
run, at its first and last step, give every step exactly; the times over a run are summed in closed
form (:func:`decode_times`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import numpy as np

from ..errors import OpcountError, OpcountValueError
from ..hardware.lookup import Hardware
from ..roofline.bound import sum_of_max
from .causal_lm import CausalLM
from .kernels.estimate import KernelSchedule
from .phases import GenerationFigures, Memory, PhaseCost, PhaseRequest, resolved


@dataclass(kw_only=True)
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
    (two more for each run a sliding window fills or a chunk starts: :meth:`.CacheSpecs.affine_steps`)."""
    prefill = PhaseRequest(
        phase="prefill", seq_len=prompt_len, batch=batch, hardware=resolved(hardware), flops_per_mac=flops_per_mac,
        preset=preset, kernels=kernels,
    )  # fmt: skip
    return generate(llm, prefill, gen_len)


def generate(llm: CausalLM, prefill: PhaseRequest, gen_len: int) -> GenerationCost:
    """:func:`generation` asked as its prefill's request (its prompt, batch, hardware, FLOP convention
    and kernels: every step's but the phase and lengths) and ``gen_len``."""
    if prefill.phase != "prefill":
        raise OpcountValueError(f"a generation starts with a prefill: its request's phase is {prefill.phase!r}")
    if prefill.kv_len:
        raise OpcountValueError(f"a generation starts from an empty cache: its prefill's kv_len is {prefill.kv_len}")
    llm.check_generation(prefill.seq_len, gen_len, batch=prefill.batch)
    first_cost = llm.cost(prefill)
    prompt_len, batch = first_cost.seq_len, first_cost.batch
    timed = prefill.hardware is not None
    if gen_len == 0:
        zero = 0.0 if timed else None
        return GenerationCost(
            prefill=first_cost, first_step=None, last_step=None, gen_len=0, decode_flops=0.0, decode_time=zero,
            fullest_step=None, decode_time_bound=zero,
        )  # fmt: skip
    # each run of steps over which every operator's cost is affine in the cache length (a sliding
    # window filling, a chunk): two traces a run, the sum over its steps an arithmetic series
    step = dataclasses.replace(prefill, phase="decode")
    runs = sum_decode_runs(
        llm.caches.affine_steps(prompt_len, gen_len),
        lambda cached: llm.cost(step.at(batch, None, prompt_len + cached)),
        lambda cost: cost.flops.total(),
        timed,
    )
    return GenerationCost(
        prefill=first_cost, first_step=runs.first_step, last_step=runs.last_step, gen_len=gen_len,
        decode_flops=runs.flops, decode_time=runs.time, fullest_step=runs.fullest_step, decode_time_bound=runs.time_bound,
    )  # fmt: skip


class _Step(Protocol):
    """A decode step's figures, traced (:class:`.phases.PhaseCost`) or fitted (``PhaseValues``)."""

    @property
    def schedule(self) -> KernelSchedule | None: ...
    @property
    def memory(self) -> Memory: ...


S = TypeVar("S", bound=_Step)


@dataclass(frozen=True, kw_only=True)
class DecodeRuns(Generic[S]):
    """A generation's decode steps summed run by run: FLOPs, the estimate and the bound (None without
    hardware), its first and last steps and the one holding the most cache."""

    flops: float
    time: float | None
    time_bound: float | None
    first_step: S | None
    last_step: S
    fullest_step: S


def sum_decode_runs(
    runs: Sequence[tuple[int, int]], step_at: Callable[[int], S], flops_of: Callable[[S], float], timed: bool
) -> DecodeRuns[S]:
    """Sum decode steps ``a..b`` of each run (cache offsets past the prompt) over which every operator's
    cost is affine in the cache length (a sliding window filling, a chunk): two steps a run
    (``step_at``: the step at an offset), the sum over its steps an arithmetic series. One sum for a
    traced generation and a fitted one, so they agree to the last bit."""
    flops, traced, opening = 0.0, [], None
    time = bound = 0.0 if timed else None
    for a, b in runs:
        first = step_at(a)
        last = first if a == b else step_at(b)
        traced.append(last)
        flops += (flops_of(first) + flops_of(last)) * (b - a + 1) / 2
        if time is not None and bound is not None and first.schedule is not None and last.schedule is not None:
            run_time, run_bound = decode_times(first.schedule, last.schedule, b - a + 1)
            time, bound = time + run_time, bound + run_bound
        if a == 0:
            opening = first
    fullest = max(traced, key=lambda p: p.memory.kv_cache)
    return DecodeRuns(
        flops=flops, time=time, time_bound=bound, first_step=opening, last_step=traced[-1], fullest_step=fullest
    )


def decode_times(first: KernelSchedule, last: KernelSchedule, steps: int) -> tuple[float, float]:
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
