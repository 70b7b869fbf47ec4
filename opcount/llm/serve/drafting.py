"""What drafting costs under speculative decoding (:mod:`.speculative`): the draft's seconds in a step
(:class:`Drafter`, from its own fitted step cost), a step cost with the draft's added and its share counted
(:class:`WithDraft`), and the model's own multi-token prediction (MTP) head as a draft to trace
(:func:`mtp_head`, with its memory, :func:`shared_share`, and its projection, :func:`projection`)."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ...errors import OpcountError, OpcountValueError
from ...hardware.lookup import Hardware
from ...ir import DTYPE_BYTES
from ...roofline import roofline
from ..causal_lm import CausalLM
from .step_cost import FittedStepCost, Step, StepCost

# the config field that says how many multi-token prediction layers a model ships (DeepSeek-V3/R1's, GLM-4.5's
# config.json; vLLM reads it in its DeepSeek MTP and GLM-4 MoE MTP models, vllm/model_executor/models/)
MTP_FIELD = "num_nextn_predict_layers"


@dataclass(frozen=True)
class Drafter:
    """The draft's seconds in a step, from its own fitted step cost: ``tokens`` passes of its decode step over
    the step's speculating sequences (their context one token longer each pass: ``sum_j D(b, K + j b)``), and
    its pass over the step's prompt chunks (``P(0)`` and each chunk's ``C(n, k) - P(0)``); ``extra(b)``: seconds a pass
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
    try:
        return CausalLM(head, llm.precision)
    except OpcountError as e:  # a one-layer copy of the config the model's own code refuses
        raise OpcountValueError(
            f"the MTP head of {type(llm.model).__name__} (one layer of its config) cannot be built: {e}; give a "
            "draft model (--draft MODEL)"
        ) from None


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
