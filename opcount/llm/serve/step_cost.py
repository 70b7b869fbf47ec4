"""What one engine step costs: the interface the scheduler prices a step by (:class:`StepCost`), and its
implementation from traced phases (:class:`FittedStepCost`).

A step runs ``decode`` sequences (one new token each, over ``kv_tokens`` cached positions in all) and prompt
``chunks`` (``n`` new tokens after ``k`` of the same prompt already in the cache). The fitted price:

- decode, ``D(b, K) = A(b) + d2 (K - b k1)``: decode steps of ``b`` sequences at the first decode step's
  context ``k1`` traced at batches from 1 to the engine's ``max_num_seqs`` and linear between them, and
  ``d2`` a cached position more, from batch 1 at two contexts; checked at a larger batch and the last decode
  step's context;
- a prompt of ``n`` tokens from an empty cache, ``P(n)``, traced at a few lengths up to the longest chunk
  and interpolated linearly between them;
- a chunk of ``n`` tokens over ``k`` cached ones (chunked prefill's later chunks, a recomputed request's, a
  prompt after a cached prefix), ``C(n, k) = P(n) + k (c + e n)``: its prompt's own cost, plus what each
  cached position adds, a read of its keys and values (``c``) and its attention to every new token (``e n``,
  the ``n k`` scores and weighted values). ``c`` and ``e`` are solved from two prefill phases traced over the
  same cached prefix (the phase ``opcount MODEL --phase prefill --kv-len K`` prices), at two chunk lengths,
  and the fit is checked against a third traced at a chunk length and a cache length neither used;
- a mixed step is one forward over all its tokens, as the engine runs it (vLLM's ``GPUModelRunner.execute_model``
  in vllm/v1/worker/gpu_model_runner.py flattens every scheduled request's tokens into one batch). Its
  decode part (``b`` tokens) is ``D(b, K)``; its ``T`` chunk tokens add what ``T`` more tokens add to a
  forward of ``b``, ``P(b + T) - P(b)`` (``P(T)`` with no decode part), so that the weights, and a mixture of
  experts' experts, are read once for the step's tokens together, as the kernels read them; less the
  attention one sequence of ``T`` tokens would have between its chunks, ``e (T^2 - sum n_i^2) / 2``; plus
  each chunk's cached prefix, ``k (c + e n)``. A lone prompt of ``L <= budget`` tokens is exactly ``P(L)``,
  a lone chunk ``C(n, k)``, a decode-only step exactly ``D``. ``P`` is traced up to the token budget. (Summing
  each chunk's own ``C(n, k)`` instead would read a mixture of experts' weights once a chunk: a step of 64
  prompts of 128 tokens of GPT-OSS-20B priced 10 times its traced 65 ms.)
- under speculative decoding (:mod:`.speculative`), each decode sequence verifies ``1 + k`` tokens in the
  target's one forward: ``V(b, K)``, affine as ``D`` is and fitted alike, from traced prefills of ``1 + k``
  tokens over a cached prefix (``--phase prefill --kv-len K --seq-len 1+k``), takes ``D``'s place; a step that
  mixes prompt chunks with speculating sequences adds each chunk's ``C(n, k) - P(0)`` to ``V`` as it does to ``D``
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
class Batched:
    """``D(b, K) = A(b) + d2 (K - b k1)``: a decode step of ``b`` sequences at ``k1`` cached positions each,
    traced at several batches and linear between them (extended past the last by its last segment), plus
    ``d2`` for each cached position beyond. One line through batch 1 and a small batch would price a large
    batch as the small one's weight reads plus its per-sequence slope, where a large batch turns to computing
    its tokens (and a mixture of experts reads more of its experts): the batches traced reach the engine's
    ``max_num_seqs``."""

    base: Prompt  # A(b): the traced batches (ascending, at least two) and their times, linear between them
    k1: int
    d2: float

    def __call__(self, b: int, k: int) -> float:
        return self.base(b) + self.d2 * (k - b * self.k1)


def decode_batches(big: int, most: int) -> list[int]:
    """The decode batches to trace: 1, every fourfold from 16 below ``most`` (the engine's ``max_num_seqs``),
    ``big`` (the batch the fit is checked at) and ``most``."""
    return sorted({1, big, max(most, 2), *fourfold(most)})


def fourfold(below: int) -> set[int]:
    """16, 64, 256, ... below ``below``: the sizes traced between 1 and the largest."""
    sizes, n = set(), 16
    while n < below:
        sizes.add(n)
        n *= 4
    return sizes


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
class Prefix:
    """What ``k`` cached positions add to a chunk of ``n`` new tokens: ``k (c + e n)`` seconds."""

    c: float = 0.0
    e: float = 0.0

    def __call__(self, n: int, k: int) -> float:
        return k * (self.c + self.e * n)

    @classmethod
    def solve(cls, k: int, n1: int, n2: int, extra1: float, extra2: float) -> Prefix:
        """From the seconds ``extra1`` and ``extra2`` that ``k`` cached positions add to chunks of ``n1`` and
        ``n2`` tokens (``C(n, k) - P(n)``); one chunk length (``n1 == n2``) gives ``c`` alone."""
        if n1 == n2:
            return cls(extra1 / k, 0.0)
        e = (extra2 - extra1) / (k * (n2 - n1))
        return cls(extra1 / k - e * n1, e)


@dataclass(frozen=True)
class FittedStepCost:
    """A step priced from a fitted decode step, a prompt's interpolated cost and a cached prefix's; under
    speculative decoding, the decode sequences' forward is ``verify``'s (each a chunk of ``1 + k`` tokens over
    its cache)."""

    decode: Affine | Batched
    prompt: Prompt
    prefix: Prefix = Prefix()
    verify: Affine | None = None

    def chunk(self, n: int, k: int) -> float:
        """``C(n, k)``: a chunk of ``n`` new tokens over ``k`` cached ones, as a step of its own."""
        return self.prompt(n) + (self.prefix(n, k) if k else 0.0)

    def __call__(self, step: Step) -> float:
        present = 0  # the tokens of the step's decode part: one a sequence, or 1 + k verified
        if step.decode and step.speculative:
            if self.verify is None:
                raise OpcountValueError("a speculative step priced by a step cost fitted without its verify forward")
            base, present = self.verify(step.decode, step.kv_tokens), step.decode * (1 + step.speculative)
        elif step.decode:
            base, present = self.decode(step.decode, step.kv_tokens), step.decode
        else:
            base = self.prompt(0)
        if not step.chunks:
            return base
        if len(step.chunks) == 1 and not present:  # a prompt's chunk alone: C(n, k), as traced
            k, n = step.chunks[0]
            return self.chunk(n, k)
        # the chunks' tokens as one forward beside the decode part's (the weights read once, the experts
        # the step's tokens route to read once), less the attention between chunks that one sequence of
        # them would have had, plus what each chunk's cached prefix adds
        total = sum(n for _, n in step.chunks)
        start = self.prompt(present) if present else self.prompt(0)
        tokens = self.prompt(present + total) - start
        between = max(self.prefix.e, 0.0) * (total * total - sum(n * n for _, n in step.chunks)) / 2
        return base + max(tokens - between, 0.0) + sum(self.prefix(n, k) for k, n in step.chunks if k)


def prompt_lengths(input_len: int, budget: int) -> list[int]:
    """The prompt lengths to trace: 1, every fourfold from 16 below the longest chunk (the prompt, or the
    token budget where the prompt is longer), the longest chunk, and the budget: a step's tokens together,
    which a mixed step is priced at (no step holds more)."""
    longest = max(min(input_len, budget), 2)  # two lengths at least: a line through them
    return sorted({1, longest, max(budget, 2), *fourfold(longest)})


def prefix_points(input_len: int, lengths: list[int]) -> tuple[int, int, int, tuple[int, int]]:
    """Where a cached prefix is traced: ``(k, n1, n2, (n, k'))``, the chunks of ``n1 < n2`` tokens over
    ``k`` cached ones (half the prompt; ``n2`` the longest traced prompt length that fits beside it in the
    prompt, ``n1`` 16 or 1), and the check point at a chunk length and cache length neither uses (as far as
    the prompt leaves room). The chunk lengths are traced prompt lengths, where ``P`` is exact."""
    k = max(input_len // 2, 1)
    fits = [n for n in lengths if n <= max(input_len - k, 1)]
    n2 = fits[-1]
    n1 = 16 if 16 in fits and n2 > 16 else 1
    between = [n for n in fits if n1 < n < n2]
    n3 = between[0] if between else (n1 + n2) // 2 if n2 - n1 > 1 else n2
    return k, n1, n2, (n3, k // 2 if k > 1 else k)


Trace = Callable[[str, int, int, int], tuple[float, float | None]]


@dataclass(frozen=True)
class Fitted:
    """The step costs fitted: the estimate's, the bound's (None where a traced phase has none), the traced
    phases they came from, and each fit's relative error at the point traced to check it (the decode
    fit's, the cached-prefix chunk's)."""

    estimate: FittedStepCost
    bound: FittedStepCost | None
    traces: int
    check_error: float
    chunk_error: float = 0.0


def fitted(
    trace: Trace, input_len: int, output_len: int, budget: int, big: int, speculative: int = 0, most: int = 0
) -> Fitted:
    """The step costs from ``trace(phase, batch, new tokens, cached tokens per sequence) -> (estimate, bound)``:
    decode steps of 1 and ``big`` sequences at the first and last decode step's cache, the fit checked at the
    fourth of those points (``big`` at the last), prompts at :func:`prompt_lengths`, chunks over a cached
    prefix at :func:`prefix_points`. With ``speculative`` draft tokens, the verify forward too: prefills of
    ``1 + speculative`` tokens over the same caches, fitted alike."""
    # the first decode step reads the prompt, the last the prompt and all but its last two answer tokens
    k1, k2 = input_len, input_len + max(output_len - 2, 1)
    points = ((1, k1), (1, k2), (big, k1), (big, k2))
    batches = decode_batches(big, max(most, big))
    decodes = {p: trace("decode", p[0], 1, p[1]) for p in (*points, *((b, k1) for b in batches))}
    verifies = {p: trace("prefill", p[0], 1 + speculative, p[1]) for p in points} if speculative else {}
    lengths = prompt_lengths(input_len, budget)
    prompts = [trace("prefill", 1, n, 0) for n in lengths]
    k, n1, n2, (n3, k3) = prefix_points(input_len, lengths)
    chunks = {(n, k): trace("prefill", 1, n, k) for n in (n1, n2)}
    if (n3, k3) not in chunks:
        chunks[n3, k3] = trace("prefill", 1, n3, k3)
    costs: list[FittedStepCost | None] = []
    for which in (0, 1):
        d = {p: t[which] for p, t in decodes.items()}
        v = {p: t[which] for p, t in verifies.items()}
        p = [t[which] for t in prompts]
        c = {point: t[which] for point, t in chunks.items()}
        if any(x is None for x in (*d.values(), *v.values(), *p, *c.values())):
            costs.append(None)
            continue
        d2 = ((d[1, k2] or 0.0) - (d[1, k1] or 0.0)) / (k2 - k1)
        decode = Batched(Prompt(tuple(batches), tuple(d[b, k1] or 0.0 for b in batches)), k1, d2)
        verify = Affine.solve(k1, k2, big, v[1, k1] or 0.0, v[1, k2] or 0.0, v[big, k1] or 0.0) if v else None
        prompt = Prompt(tuple(lengths), tuple(x or 0.0 for x in p))
        prefix = Prefix.solve(k, n1, n2, (c[n1, k] or 0.0) - prompt(n1), (c[n2, k] or 0.0) - prompt(n2))
        costs.append(FittedStepCost(decode, prompt, prefix, verify))
    estimate = costs[0]
    assert estimate is not None  # a deployment on hardware always prices its estimate
    traced = decodes[big, k2][0]
    error = abs(estimate.decode(big, big * k2) - traced) / traced if traced else 0.0
    if estimate.verify is not None and verifies[big, k2][0]:  # the larger of the two fits' errors
        traced = verifies[big, k2][0]
        error = max(error, abs(estimate.verify(big, big * k2) - traced) / traced)
    traced = chunks[n3, k3][0]
    chunk_error = abs(estimate.chunk(n3, k3) - traced) / traced if traced else 0.0
    traces = len(decodes) + len(verifies) + len(prompts) + len(chunks)
    return Fitted(estimate, costs[1], traces, error, chunk_error)
