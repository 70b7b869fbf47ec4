"""Speculative decoding in a served engine: what is asked (:class:`Speculation`: ``k`` draft tokens a step and
their acceptance) and how many tokens a verify step emits (:func:`expected_length`, :meth:`Speculation.emit`);
what the draft costs is :mod:`.drafting`'s. Nothing here imports what traces, so the command line's parser
checks the flags with it.

As vLLM v1 runs it (``SpecDecodeBaseProposer`` / ``EagleProposer`` in vllm/v1/spec_decode/, the scheduler's
``num_lookahead_tokens`` in vllm/v1/core/sched/scheduler.py): a speculating sequence enters a step with its
last sampled token and ``k`` draft tokens; the target verifies the ``1 + k`` tokens in one forward (they count
against the step's token budget, and their KV slots are allocated beforehand), keeps the accepted prefix of the
drafts and samples one more token after it, so a step emits ``1 + accepted`` tokens. The drafter then proposes
the next ``k`` tokens in the same step: ``k`` passes of the draft over the speculating sequences, and one pass
over the step's prompt chunks (a draft model or an MTP head keeps a KV cache of the whole context).

The acceptance: ``a_i``, the chance that draft token ``i`` is accepted given that those before it were (one
rate ``a`` for all: ``a_i = a``); a step's expected emitted length is ``1 + a_1 + a_1 a_2 + ... + a_1...a_k``
(Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding", eq. 1, for a constant
rate). The emission is deterministic: each request carries a credit, adds the expected length to it each
verify step, and emits its whole part (at least 1, at most ``k + 1``), keeping the fraction. The mean is
then exact (after ``n`` steps, ``floor(n E)`` tokens) and the same run always gives the same numbers, with no
second random stream beside the arrivals'; what it leaves out is the spread of accepted lengths (every
request emits alike), which would widen the ITL's tails, not move its mean.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import OpcountValueError

MAX_TOKENS = 64  # draft tokens a step: past a few dozen acceptance makes more pointless; a bound on typos


@dataclass(frozen=True)
class Speculation:
    """``tokens`` draft tokens a step, accepted at the per-position conditional rates ``acceptance`` (one for
    each draft position), drafted by ``draft`` (``mtp``: the model's own heads, or the draft model's name)."""

    tokens: int
    acceptance: tuple[float, ...]
    draft: str = "mtp"

    def __post_init__(self) -> None:
        k = self.tokens
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_TOKENS:
            raise OpcountValueError(f"speculative tokens must be a whole number from 1 to {MAX_TOKENS}, got {k!r}")
        if len(self.acceptance) != k:
            raise OpcountValueError(
                f"acceptance: {len(self.acceptance)} rates for {k} speculative tokens; give one rate, or one for each "
                "draft position"
            )
        for a in self.acceptance:
            if isinstance(a, bool) or not isinstance(a, (int, float)) or not (math.isfinite(a) and 0 <= a <= 1):
                raise OpcountValueError(f"an acceptance rate is a share from 0 to 1, got {a!r}")

    @classmethod
    def of(cls, tokens: int, acceptance: float | Sequence[float], draft: str = "mtp") -> Speculation:
        """``acceptance`` one rate (every position) or one a position."""
        rates = (acceptance,) * tokens if isinstance(acceptance, (int, float)) else tuple(acceptance)
        return cls(tokens, rates, draft)

    @property
    def expected_length(self) -> float:
        """Tokens a verify step emits on average: ``1 + a_1 + a_1 a_2 + ... + a_1...a_k``."""
        return expected_length(self.acceptance)

    def emit(self, credit: float) -> tuple[int, float]:
        """A verify step of a request holding ``credit``: the tokens it emits and the credit it keeps."""
        credit += self.expected_length
        emitted = min(max(math.floor(credit), 1), self.tokens + 1)
        return emitted, credit - emitted

    def as_dict(self) -> dict[str, object]:
        return {
            "num_speculative_tokens": self.tokens, "acceptance": list(self.acceptance), "draft": self.draft,
            "mean_acceptance_length": self.expected_length,
        }  # fmt: skip


def expected_length(acceptance: Sequence[float]) -> float:
    """``1 + a_1 + a_1 a_2 + ... + a_1...a_k`` for the per-position conditional rates ``acceptance``."""
    total, reached = 1.0, 1.0
    for a in acceptance:
        reached *= a
        total += reached
    return total


def parse_acceptance(text: str) -> tuple[float, ...]:
    """``0.7`` or ``0.8,0.6,0.4`` as rates (each checked by :class:`Speculation`)."""
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise OpcountValueError(f"an acceptance is a rate or a comma list of rates from 0 to 1, got {text!r}") from None
