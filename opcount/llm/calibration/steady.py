"""A measured row's estimate and bound in a steady-state closed form (:func:`predict`), from two deployed steps
of the row's model on its layout and hardware (:class:`Priced`): a decode step of the batch the workload keeps
running, at the mean context, and a prompt's prefill.

Notation: ``I`` and ``O`` the mean prompt and answer tokens; ``b`` the sequences a replica runs, ``r`` the
replicas (``dp_attention``); ``D`` the decode step's estimate and ``P`` the prompt's, each with an engine
profile's step terms (:mod:`opcount.llm.engines.terms`), ``s`` the profile's server time to first token.

- **closed loop** (``concurrency`` clients, ``b = concurrency / r``): each request's prompt runs while the other
  ``b - 1`` decode, and each of theirs once in ``O`` of its steps: ``TPOT = D + (b - 1) P / O``; ``TTFT = P + s``
  alone, and with others half a decode step more and the wait behind their prompts, which hold the engine a
  share ``rho = (b - 1) P / (P + (O - 1) TPOT)`` of the time (at most 0.9): M/D/1's ``rho / (1 - rho) x P / 2``;
- **all at once** (``rate`` inf, ``N`` requests; ``b`` the slots a replica runs: ``N / r``, at most
  ``max_num_seqs`` and what the KV cache holds): with one wave (``N <= r b``) the prompts run one after another
  beside the decodes (the engine runs the decodes first, the prompts in the step's remaining budget), so that
  ``TTFT = (b + 1) P / 2 + s`` and a request decodes beside half the others' prompts, ``TPOT = D + (b - 1) P / 2O``; with ``w = N / (r b)`` waves a request waits for
  ``(w - 1) / 2`` others on its slot, each ``P + (O - 1) TPOT``, with ``TPOT`` as in a closed loop;
- ``E2EL = TTFT + (O - 1) TPOT``; output tokens a second ``r b O / E2EL`` in a closed loop, ``N O`` over the
  waves' time all at once; per GPU over the row's devices; total tokens ``(I + O) / O`` times output tokens.

The bound is the same workload at the speed of light (``D`` and ``P`` the steps' bounds, no profile, no
waiting, no prompt stalling a decode): ``TTFT >= P``, ``TPOT >= D``, tokens a second at most ``r b / D``.
Percentiles beyond the median, and the TTFT and end-to-end latency of requests sent all at once (their queue),
are not modelled: a row asking for one is reported so, not priced (:func:`.evaluate.refusal`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..engines.profile import EngineProfile
from ..engines.terms import StepShape, step_seconds
from .rows import Row


@dataclass(frozen=True)
class Step:
    """A deployed step: its estimate without a profile, its bound, and its shape for the profile's terms."""

    estimate: float
    bound: float
    shape: StepShape

    def priced(self, profile: EngineProfile | None) -> float:
        return self.estimate + step_seconds(profile, self.shape)


@dataclass(frozen=True)
class Priced:
    """A row with its steps: ``batch`` sequences a replica, ``replicas``, ``burst`` (all requests at once)."""

    row: Row
    batch: int
    replicas: int
    burst: bool
    decode: Step
    prefill: Step


def predict(p: Priced, profile: EngineProfile | None) -> float:
    """The estimate of ``p``'s metric, as seconds (:attr:`.rows.Row.seconds`), under ``profile``."""
    row, b, r = p.row, p.batch, p.replicas
    d, pre = p.decode.priced(profile), p.prefill.priced(profile)
    server = profile.ttft_overhead_s if profile is not None else 0.0
    o = row.output
    waves = row.requests / (r * b) if p.burst else 0.0
    if p.burst and waves <= 1:
        # the engine runs the decodes first and the waiting prompts in the step's remaining budget (vLLM's
        # scheduler): a request decodes while the prompts admitted after it, half of the others on average, run
        tpot = d + (b - 1) / 2 * pre / o
        ttft = (b + 1) * pre / 2 + server
        slot = b * pre + (o - 1) * tpot
    else:
        tpot = d + (b - 1) * pre / o
        slot = pre + (o - 1) * tpot
        ttft = pre + server + (max(waves, 1) - 1) / 2 * slot
        if not p.burst and b > 1:
            # a prompt arrives during a step (half of one to wait) and queues behind the others' prompts, which
            # take a share rho of the engine's time: M/D/1's mean wait, rho / (1 - rho) x P / 2
            rho = min((b - 1) * pre / slot, 0.9)
            ttft += d / 2 + rho / (1 - rho) * pre / 2
    e2el = ttft + (o - 1) * tpot
    if p.burst:
        rate = row.requests * o / (max(waves, 1) * slot)
    else:
        rate = r * b * o / e2el
    return _metric(row, ttft, tpot, e2el, rate)


def bound(p: Priced) -> float:
    """The bound of ``p``'s metric, as seconds: no engine runs the workload faster."""
    d, pre = p.decode.bound, p.prefill.bound
    return _metric(p.row, pre, d, pre + (p.row.output - 1) * d, p.replicas * p.batch / d)


def _metric(row: Row, ttft: float, tpot: float, e2el: float, rate: float) -> float:
    """The row's metric from the four figures (``rate``: output tokens a second over every replica)."""
    per_token = {
        "out_tok_s": 1 / rate,
        "out_tok_s_per_gpu": row.devices / rate,
        "total_tok_s_per_gpu": row.devices / rate * row.output / (row.input + row.output),
        "req_s": row.output / rate,
    }
    latency = {"tpot_ms": tpot, "itl_ms": tpot, "ttft_ms": ttft, "e2el_ms": e2el}
    return latency.get(row.metric, per_token.get(row.metric, 0.0))


def as_dict(p: Priced) -> dict[str, object]:
    """``p``'s steps and workload as plain values (its row is the measurement's: joined again by its case)."""

    def step(s: Step) -> dict[str, object]:
        return {"estimate": s.estimate, "bound": s.bound, "shape": vars(s.shape)}

    return {
        "batch": p.batch,
        "replicas": p.replicas,
        "burst": p.burst,
        "decode": step(p.decode),
        "prefill": step(p.prefill),
    }


def from_dict(row: Row, data: Mapping[str, Any]) -> Priced:
    """The inverse of :func:`as_dict`, for ``row``."""

    def step(s: Mapping[str, Any]) -> Step:
        return Step(float(s["estimate"]), float(s["bound"]), StepShape(**s["shape"]))

    return Priced(
        row, int(data["batch"]), int(data["replicas"]), bool(data["burst"]), step(data["decode"]), step(data["prefill"])
    )
