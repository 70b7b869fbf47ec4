"""Speculative decoding in a served engine: what is asked (:class:`Speculation`: ``k`` draft tokens a step and
their acceptance), how many tokens a verify step emits (:func:`expected_length`, :meth:`Speculation.emit`),
the draft's seconds in a step (:class:`Drafter`), and the model's own multi-token prediction head as a draft
(:func:`mtp_head`).

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

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...errors import OpcountValueError
from ...hardware.lookup import Hardware
from ...ir import DTYPE_BYTES
from ...roofline import roofline
from ..causal_lm import CausalLM
from .step_cost import FittedStepCost, Step, StepCost

MAX_TOKENS = 64  # draft tokens a step: past a few dozen acceptance makes more pointless; a bound on typos
# the config field that says how many multi-token prediction layers a model ships (DeepSeek-V3/R1's, GLM-4.5's
# config.json; vLLM reads it in its DeepSeek MTP and GLM-4 MoE MTP models, vllm/model_executor/models/)
MTP_FIELD = "num_nextn_predict_layers"


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


@dataclass(frozen=True)
class Drafter:
    """The draft's seconds in a step, from its own fitted step cost: ``tokens`` passes of its decode step over
    the step's speculating sequences (their context one token longer each pass: ``sum_j D(b, K + j b)``), and
    its pass over the step's prompt chunks (``P(0)`` and the chunks' differences); ``extra(b)``: seconds a pass
    over ``b`` tokens adds that the draft's trace has not (an MTP head's projection)."""

    cost: FittedStepCost
    tokens: int
    extra: tuple[float, float] = (0.0, 0.0)  # e0 + e1 b: a pass's added seconds over b tokens

    def __call__(self, step: Step) -> float:
        seconds = 0.0
        e0, e1 = self.extra
        if step.decode and step.speculative:
            d, b, k = self.cost.decode, step.decode, self.tokens
            seconds += k * (d(b, step.kv_tokens) + e0 + e1 * b) + d.d2 * b * k * (k - 1) / 2
        if step.chunks:
            seconds += self.cost(Step(0, 0, step.chunks)) + e0 + e1 * sum(n for _, n in step.chunks)
        return seconds


@dataclass(frozen=True)
class WithDraft:
    """A step cost under speculative decoding: the target's (its verify forward) plus the draft's; the seconds
    each spent, summed over the steps priced (``spent``: target, draft), for the draft's share of the time."""

    target: StepCost
    draft: Drafter
    spent: list[float] = field(default_factory=lambda: [0.0, 0.0])

    def __call__(self, step: Step) -> float:
        target, draft = self.target(step), self.draft(step)
        self.spent[0] += target
        self.spent[1] += draft
        return target + draft

    @property
    def draft_share(self) -> float:
        total = self.spent[0] + self.spent[1]
        return self.spent[1] / total if total else 0.0


def mtp_layers(config: Any) -> int:
    """The multi-token prediction layers ``config`` says its model ships (0: none)."""
    value = getattr(config, MTP_FIELD, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def mtp_head(llm: CausalLM) -> CausalLM:
    """The model's multi-token prediction head as a model of its own, to trace: one decoder layer of the model
    (a mixture-of-experts one where the model has them, as DeepSeek-V3's and GLM-4.5's MTP layers are), the
    embedding, the final norm and the LM head (DeepSeek-V3 technical report, section 2.2). The ``2h -> h``
    projection that joins the embedding to the previous hidden state is not in it: :func:`projection` prices
    it. Refused for a model whose config ships no MTP layer."""
    config = llm.config
    if not mtp_layers(config):
        raise OpcountValueError(
            f"{type(llm.model).__name__} has no multi-token prediction layers ({MTP_FIELD} is 0 or absent in its "
            "config): give a draft model (--draft MODEL)"
        )
    head = copy.deepcopy(config)
    head.num_hidden_layers = 1  # vLLM runs the one MTP layer k times for k speculative tokens
    if hasattr(head, "first_k_dense_replace"):
        head.first_k_dense_replace = 0  # the MTP layer is a routed-expert layer, as the model's last layers are
    return CausalLM(head, llm.precision)


def shared_share(head: CausalLM) -> float:
    """The share of an MTP head's parameters that its model shares with it (the embedding and the LM head):
    they take no memory of their own."""
    model: Any = head.model  # a transformers PreTrainedModel: its embeddings by their own accessors
    shared = {id(p): p.numel() for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None
              for p in m.parameters()}  # fmt: skip
    return sum(shared.values()) / head.parameters if head.parameters else 0.0


def projection(llm: CausalLM, hardware: Hardware, big: int) -> tuple[tuple[float, float], float]:
    """An MTP pass's ``2h -> h`` projection: its seconds over ``b`` tokens as ``e0 + e1 b`` (its roofline,
    traced at 1 and ``big`` tokens) and its weight's bytes. vLLM builds it as a plain ``nn.Linear`` in the
    activations' dtype, on every device whole (``eh_proj`` in vllm/model_executor/models/deepseek_mtp.py)."""
    h = llm.config.hidden_size
    with torch.device("meta"):
        linear = nn.Linear(2 * h, h, bias=False)
    times = [
        roofline(linear, (torch.empty(b, 2 * h, device="meta"),), hardware=hardware, dtype=llm.precision.act).total_time
        for b in (1, big)
    ]
    e1 = (times[1] - times[0]) / (big - 1)
    return (times[0] - e1, e1), 2 * h * h * DTYPE_BYTES[llm.precision.act]
