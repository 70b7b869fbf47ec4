"""A measured row's estimate and bound in a steady-state closed form (:func:`predict`), from two deployed steps
of the row's model on its layout and hardware (:class:`Priced`): a decode step of the batch the workload keeps
running, at the mean context, and a prompt's prefill.

Notation: ``I`` and ``O`` the mean prompt and answer tokens; ``b`` the sequences a replica runs, ``r`` the
replicas (``dp_attention``); ``D`` the decode step's estimate and ``P`` the prompt's, each with an engine
profile's step terms (:mod:`opcount.llm.engines.terms`), ``s`` the profile's server time to first token. A
prompt that rides in a step the engine runs anyway (beside decodes, or beside other prompts in one chunk) adds
``P'``, its tokens' part of ``P``: the terms a step pays once (its overhead, the collectives' latency, the MoE
router's kernels: :data:`.terms.PER_STEP`) are paid by that step, not again by each prompt in it.

- **a wave** (:func:`wave`): ``b`` prompts that arrive together run in order in steps of ``C`` tokens (the
  engine's budget a step, :data:`CHUNK_TOKENS` by default; whole prompts up to the model's context where the
  engine does not chunk them: :func:`.evaluate.prompt_budget`), each step their
  tokens' share of ``P'`` and once the step's own terms; a prompt's first token comes at the end of the step its
  last token is in, the decodes after the wave's last prompt: ``TTFT`` the mean of those ends plus ``s``,
  ``TPOT = D + (W - TTFT') / (O - 1)`` with ``W`` the wave's prompts' time and ``TTFT'`` the mean first token.
  A closed loop of fixed lengths (:attr:`.rows.Row.lockstep`: ``vllm bench serve --max-concurrency`` with
  ``--random-range-ratio 0``) is a wave every round (its clients start together and their requests end in the
  same step), ``r b O`` tokens every ``s + W + (O - 1) D``; all requests at once in one wave likewise;
- **closed loop** of varied lengths (``c`` clients, ``b = c / r``): each request's prompt
  runs while the other ``b - 1`` decode, and each of theirs once in ``O`` of its steps:
  ``TPOT = D + (b - 1) P' / O`` (``P`` whole where prompts run in steps of their own); ``TTFT = P + s``
  alone, and with others half a decode step more and the wait behind their prompts, which hold the engine a
  share ``rho = (b - 1) P' / (P + (O - 1) TPOT)`` of the time (at most 0.9): M/D/1's ``rho / (1 - rho) x P' / 2``;
- **a closed loop beyond the KV cache**: ``b`` is at most the sequences of ``I + O`` tokens the cache holds
  (an engine admits a request only when its blocks fit; as the engine logged it, :attr:`.rows.Row.kv_tokens`,
  else by opcount's count: :func:`.evaluate.held`); the other clients wait for a slot, ``c / (r b) - 1``
  rounds of the time a request holds one (``TTFT + (O - 1) TPOT``; a wave's ``s + W + (O - 1) D``), added to
  ``TTFT``; the tokens a second are the ``r b`` slots', whatever the clients;
- **all at once** in ``w = N / (r b)`` waves (``rate`` inf, ``N`` requests; ``b`` the slots a replica runs:
  ``N / r``, at most ``max_num_seqs`` and what the KV cache holds): a request waits for ``(w - 1) / 2`` others on
  its slot, each ``P + (O - 1) TPOT``; the first wave's share ``1 / w`` of the requests decodes as a wave, the
  rest beside the later prompts as a closed loop: ``TPOT`` the mean of the two;
- ``E2EL = TTFT + (O - 1) TPOT``; output tokens a second ``r b O / E2EL`` in a closed loop, ``N O`` over the
  waves' time all at once; per GPU over the row's devices; total tokens ``(I + O) / O`` times output tokens.

The bound is the same workload at the speed of light (``D`` and ``P`` the steps' bounds, no profile, no
waiting, no prompt stalling a decode): ``TTFT >= P``, ``TPOT >= D``, tokens a second at most ``r b / D``.
Percentiles beyond the median, and the TTFT and end-to-end latency of requests sent all at once (their queue
over many waves), are not modelled: a row asking for one is reported so, not priced (:func:`.evaluate.refusal`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..deploy.fit import LARGE_DEFAULT
from ..engines.profile import EngineProfile
from ..engines.terms import PER_STEP, StepShape, step_seconds, terms
from .rows import Row

# the tokens an engine step takes of waiting prompts: TensorRT-LLM's max_num_tokens by default, vLLM V1's
# max_num_batched_tokens for its server on a device of 70 GiB or more, SGLang's --chunked-prefill-size there
# (8192, or 16384 on the largest devices); vLLM's on a smaller device is its own (.evaluate.prompt_budget)
CHUNK_TOKENS = LARGE_DEFAULT


@dataclass(frozen=True)
class Step:
    """A deployed step: its estimate without a profile, its bound, and its shape for the profile's terms."""

    estimate: float
    bound: float
    shape: StepShape

    def priced(self, profile: EngineProfile | None) -> float:
        return self.estimate + step_seconds(profile, self.shape)

    def tokens(self, profile: EngineProfile | None) -> float:
        """What the step's tokens cost under ``profile`` when they ride in a step that is paid for anyway."""
        if profile is None:
            return self.estimate
        return self.estimate + sum(v for k, v in terms(profile, self.shape).items() if k not in PER_STEP)


@dataclass(frozen=True)
class Priced:
    """A row with its steps: ``batch`` sequences a replica, ``replicas``, ``burst`` (all requests at once), and
    the engine's prompt tokens a step (``chunk``) and whether prompts run in steps of their own
    (``prompts_alone``: no chunked prefill)."""

    row: Row
    batch: int
    replicas: int
    burst: bool
    decode: Step
    prefill: Step
    chunk: int = CHUNK_TOKENS
    prompts_alone: bool = False


def predict(p: Priced, profile: EngineProfile | None) -> float:
    """The estimate of ``p``'s metric, as seconds (:attr:`.rows.Row.seconds`), under ``profile``."""
    row, b, r = p.row, p.batch, p.replicas
    d, pre = p.decode.priced(profile), p.prefill.priced(profile)
    # a prompt beside the decodes adds its tokens, not another step: the step's own costs are in d already;
    # prompts in steps of their own (no chunked prefill) pay a step each, a wave's a step per chunk
    ride = p.prefill.tokens(profile)
    beside = pre if p.prompts_alone else ride
    server = profile.ttft_overhead_s if profile is not None else 0.0
    o = row.output
    waves = row.requests / (r * b) if p.burst else 0.0
    # a closed loop's clients beyond the slots the KV cache holds wait for one: each round of the slots
    # serves r b of them, so a request waits c / (r b) - 1 rounds of a slot's time (none all at once)
    rounds = max((row.concurrency or 0) / (r * b), 1.0) - 1
    # a wave of b prompts that arrive together: run in steps of the engine's token budget, its decodes after them
    first, prompts = wave(b, row.input, ride, pre - ride, p.chunk)
    wave_tpot = d + (prompts - first) / max(o - 1, 1)
    if (p.burst and waves <= 1) or row.lockstep:
        # all at once, a request waits for the waves before its own
        tpot = wave_tpot
        slot = prompts + (o - 1) * d
        ttft = first + server
        if p.burst:
            full, rest = divmod(row.requests, r * b)
            last = wave(math.ceil(rest / r), row.input, ride, pre - ride, p.chunk)[1] + (o - 1) * d if rest else 0.0
            span = full * slot + last
            ttft += (max(waves, 1) - 1) / 2 * slot
        else:
            held = server + slot  # a round: the server's time, the wave's engine time
            span = held * row.requests / (r * b)
            ttft += rounds * held
    else:
        tpot = d + (b - 1) * beside / o
        slot = pre + (o - 1) * tpot
        ttft = pre + server + (max(waves, 1) - 1) / 2 * slot
        if p.burst:
            # the first of the waves starts together: its share 1 / waves of the requests decode after the wave's
            # prompts, not beside the later ones'
            tpot += (wave_tpot - tpot) / waves
            span = max(waves, 1) * slot
        else:
            # a prompt arrives during a step (half of one to wait) and queues behind the others' prompts, which
            # take a share rho of the engine's time: M/D/1's mean wait, rho / (1 - rho) x P / 2
            if b > 1:
                rho = min((b - 1) * beside / slot, 0.9)
                ttft += d / 2 + rho / (1 - rho) * beside / 2
            held = ttft + (o - 1) * tpot  # the time a request holds its slot
            span = held * row.requests / (r * b)
            ttft += rounds * held
    e2el = ttft + (o - 1) * tpot
    rate = row.requests * o / span
    return _metric(row, ttft, tpot, e2el, rate)


def workload(p: Priced) -> str:
    """How ``p``'s workload is priced, in a few words: a wave (its prompt tokens a step), a closed loop, or all at
    once over its waves."""
    waves = p.row.requests / (p.replicas * p.batch)
    steps = f"{p.chunk} tokens a step{', prompts alone' if p.prompts_alone else ''}"
    if p.burst:
        return f"all at once, {waves:.3g} waves of {p.batch}" + (f" ({steps})" if p.row.lockstep or waves <= 1 else "")
    clients = math.ceil((p.row.concurrency or 0) / p.replicas)
    queue = f" ({clients - p.batch} more waiting: the KV cache holds {p.batch})" if clients > p.batch else ""
    if p.row.lockstep:
        return f"waves of {p.batch} ({steps}){queue}"
    return f"closed loop of {p.batch}{queue}"


def wave(b: int, prompt: float, tokens: float, step: float, chunk: int = CHUNK_TOKENS) -> tuple[float, float]:
    """``b`` prompts of ``prompt`` tokens that arrive together, each ``tokens`` seconds of work, run in order in
    steps of ``chunk`` tokens that cost ``step`` each beside their tokens' share: the mean time to a prompt's
    first token (the end of the step its last token is in) and the time until the last one's.

    Prompt ``i`` ends in step ``s_i = ceil(i I / C)``, at ``min(s_i C, b I) / I x tokens + s_i x step``; the sum
    of the ``s_i`` is a floor sum (:func:`floor_sum`), so a wave of thousands costs no loop."""
    size = max(round(prompt), 1)
    total = b * size
    steps = -(-total // chunk)
    ends = floor_sum(b, chunk, size, size + chunk - 1)  # sum of ceil((i + 1) I / C) over i < b
    last = b - (steps - 1) * chunk // size  # the prompts that end in the last, partial step
    first = (tokens / size * (chunk * ends - last * (steps * chunk - total)) + step * ends) / b
    return first, total / size * tokens + steps * step


def floor_sum(n: int, m: int, a: int, b: int) -> int:
    """``sum(floor((a i + b) / m) for i in range(n))`` for whole numbers ``a, b >= 0``, ``m >= 1``, in
    ``O(log m)`` steps (the Euclid-like reduction of the AtCoder Library's ``floor_sum``)."""
    total = 0
    while True:
        if a >= m:
            total += n * (n - 1) // 2 * (a // m)
            a %= m
        if b >= m:
            total += n * (b // m)
            b %= m
        top = a * n + b
        if top < m:
            return total
        n, b = divmod(top, m)
        m, a = a, m


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
        "chunk": p.chunk,
        "prompts_alone": p.prompts_alone,
    }


def from_dict(row: Row, data: Mapping[str, Any]) -> Priced:
    """The inverse of :func:`as_dict`, for ``row``."""

    def step(s: Mapping[str, Any]) -> Step:
        return Step(float(s["estimate"]), float(s["bound"]), StepShape(**s["shape"]))

    return Priced(
        row, int(data["batch"]), int(data["replicas"]), bool(data["burst"]), step(data["decode"]), step(data["prefill"]),
        int(data.get("chunk", CHUNK_TOKENS)), bool(data.get("prompts_alone", False)),
    )  # fmt: skip
