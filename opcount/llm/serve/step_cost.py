"""What one engine step costs: the interface the scheduler prices a step by (:class:`StepCost`), and its
implementation from traced phases (:class:`FittedStepCost`).

A step runs ``decode`` sequences (one new token each, over ``kv_tokens`` cached positions in all) and prompt
``chunks`` (``n`` new tokens after ``k`` of the same prompt already in the cache). The fitted price:

- decode, affine in the sequences and their cached positions, ``D(b, K) = d0 + d1 b + d2 K``, solved from
  three traced decode steps (batch 1 at two cache lengths, a larger batch at one) and checked at a fourth;
- a prompt of ``L`` tokens from an empty cache, ``P(L)``, traced at a few lengths and interpolated linearly
  between them; a chunk of ``n`` after ``k`` costs ``P(k + n) - P(k)``. That difference approximates
  attention over a cached prefix (the chunk's queries against ``k`` cached keys) by the prompt's own
  quadratic growth; it is no traced phase of its own;
- a step: ``D`` of its decode sequences plus each chunk's difference; a step with no decode sequence starts
  from ``P(0)`` (the fixed part, the weights read once) instead of ``D``'s. A lone prompt of ``L <= budget``
  tokens is exactly ``P(L)``, a decode-only step exactly ``D``;
- under speculative decoding (:mod:`.speculative`), each decode sequence verifies ``1 + k`` tokens in the
  target's one forward: ``V(b, K)``, affine as ``D`` is and fitted alike, from traced prefills of ``1 + k``
  tokens over a cached prefix (``--phase prefill --kv-len K --seq-len 1+k``), takes ``D``'s place; a step that
  mixes prompt chunks with speculating sequences adds the chunks' differences to ``V`` as it does to ``D``
  (one forward: the weights are read once).

The estimate and the bound are fitted alike, each from its own traced figure; the bound is carried beside
the estimate, never mixed with it.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ...errors import OpcountValueError


@dataclass(frozen=True)
class Step:
    """One engine step's work: ``decode`` sequences over ``kv_tokens`` cached positions in all, and the
    prompt ``chunks`` as (tokens already cached, new tokens); under speculative decoding each decode sequence
    verifies its last token and ``speculative`` draft tokens (:mod:`.speculative`)."""

    decode: int
    kv_tokens: int
    chunks: tuple[tuple[int, int], ...]
    # draft tokens each decode sequence carries (0: none): the step verifies 1 + speculative tokens of each
    speculative: int = 0


class StepCost(Protocol):
    """A step's seconds (the estimate, or the bound: each is one step cost)."""

    def __call__(self, step: Step) -> float: ...


@dataclass(frozen=True)
class Affine:
    """``D(b, K) = d0 + d1 b + d2 K``: a decode step of ``b`` sequences over ``K`` cached positions in all."""

    d0: float
    d1: float
    d2: float

    def __call__(self, b: int, k: int) -> float:
        return self.d0 + self.d1 * b + self.d2 * k

    @classmethod
    def solve(cls, k1: int, k2: int, big: int, t11: float, t12: float, tb1: float) -> Affine:
        """From ``D(1, k1) = t11``, ``D(1, k2) = t12`` and ``D(big, big k1) = tb1`` (``k2 > k1``, ``big > 1``)."""
        d2 = (t12 - t11) / (k2 - k1)
        d1 = (tb1 - t11 - d2 * (big - 1) * k1) / (big - 1)
        return cls(t11 - d1 - d2 * k1, d1, d2)


@dataclass(frozen=True)
class Prompt:
    """``P(L)``: a prompt of ``L`` tokens from an empty cache, linear between the lengths traced, extended
    past the last by its last segment and down to ``P(0)`` by its first."""

    lengths: tuple[int, ...]  # ascending, at least two
    times: tuple[float, ...]

    def __call__(self, length: int) -> float:
        i = min(max(bisect.bisect_left(self.lengths, length), 1), len(self.lengths) - 1)
        (x0, x1), (y0, y1) = self.lengths[i - 1 : i + 1], self.times[i - 1 : i + 1]
        return max(y0 + (y1 - y0) * (length - x0) / (x1 - x0), 0.0)


@dataclass(frozen=True)
class FittedStepCost:
    """A step priced from a fitted decode step and a prompt's interpolated cost; under speculative decoding,
    the decode sequences' forward is ``verify``'s (each a chunk of ``1 + k`` tokens over its cache)."""

    decode: Affine
    prompt: Prompt
    verify: Affine | None = None

    def __call__(self, step: Step) -> float:
        if step.decode and step.speculative:
            if self.verify is None:
                raise OpcountValueError("a speculative step priced by a step cost fitted without its verify forward")
            base = self.verify(step.decode, step.kv_tokens)
        else:
            base = self.decode(step.decode, step.kv_tokens) if step.decode else self.prompt(0)
        return base + sum(self.prompt(k + n) - self.prompt(k) for k, n in step.chunks)


def prompt_lengths(input_len: int, budget: int) -> list[int]:
    """The prompt lengths to trace: 1, every fourfold from 16 below the prompt, the prompt and its longest
    chunk. A prompt's chunks telescope (their differences sum to ``P(L) - P(0)``), so a prompt alone is
    priced at the traced ``P(L)`` plus the fixed part of each step after its first."""
    lengths = {1, max(input_len, 2), min(input_len, budget)}  # two at least: a line through them
    n = 16
    while n < input_len:
        lengths.add(n)
        n *= 4
    return sorted(lengths)


@dataclass(frozen=True)
class Fitted:
    """The step costs fitted: the estimate's, the bound's (None where a traced phase has none), the traced
    phases they came from, and the decode fit's relative error at the point traced to check it."""

    estimate: FittedStepCost
    bound: FittedStepCost | None
    traces: int
    check_error: float


def fitted(
    trace: Callable[[str, int, int, int], tuple[float, float | None]],
    input_len: int,
    output_len: int,
    budget: int,
    big: int,
    speculative: int = 0,
) -> Fitted:
    """The step costs from ``trace(phase, batch, new tokens, cached tokens per sequence) -> (estimate, bound)``:
    decode steps of 1 and ``big`` sequences at the first and last decode step's cache, the fit checked at the
    fourth of those points (``big`` at the last), prompts at :func:`prompt_lengths`. With ``speculative`` draft
    tokens, the verify forward too: prefills of ``1 + speculative`` tokens over the same caches, fitted alike."""
    # the first decode step reads the prompt, the last the prompt and all but its last two answer tokens
    k1, k2 = input_len, input_len + max(output_len - 2, 1)
    points = ((1, k1), (1, k2), (big, k1), (big, k2))
    decodes = {p: trace("decode", p[0], 1, p[1]) for p in points}
    verifies = {p: trace("prefill", p[0], 1 + speculative, p[1]) for p in points} if speculative else {}
    lengths = prompt_lengths(input_len, budget)
    prompts = [trace("prefill", 1, n, 0) for n in lengths]
    costs: list[FittedStepCost | None] = []
    for which in (0, 1):
        d = {p: t[which] for p, t in decodes.items()}
        v = {p: t[which] for p, t in verifies.items()}
        p = [t[which] for t in prompts]
        if any(x is None for x in (*d.values(), *v.values(), *p)):
            costs.append(None)
            continue
        decode = Affine.solve(k1, k2, big, d[1, k1] or 0.0, d[1, k2] or 0.0, d[big, k1] or 0.0)
        verify = Affine.solve(k1, k2, big, v[1, k1] or 0.0, v[1, k2] or 0.0, v[big, k1] or 0.0) if v else None
        costs.append(FittedStepCost(decode, Prompt(tuple(lengths), tuple(x or 0.0 for x in p)), verify))
    estimate = costs[0]
    assert estimate is not None  # a deployment on hardware always prices its estimate
    traced = decodes[big, k2][0]
    error = abs(estimate.decode(big, big * k2) - traced) / traced if traced else 0.0
    if estimate.verify is not None and verifies[big, k2][0]:  # the larger of the two fits' errors
        traced = verifies[big, k2][0]
        error = max(error, abs(estimate.verify(big, big * k2) - traced) / traced)
    return Fitted(estimate, costs[1], len(decodes) + len(verifies) + len(prompts), error)
