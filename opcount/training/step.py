"""A training step's time at the bound, its throughput, model FLOPs utilisation, and what a run
of a given number of tokens takes and costs.

The step's operators (forward, loss, backward: one dispatch trace in ``mode="train"``) are
priced by the roofline (:mod:`opcount.roofline`): that is the step's compute time on one
device. Recomputation adds the forward operators it runs again: ``full`` every forward
operator of the checkpointed layers, ``selective`` those of the attention core (the operators
that read or write a ``[batch, heads, query, key]`` score matrix: ``QK^T``, its softmax and
dropout, the product with the values; or ``scaled_dot_product_attention``, all of them in one),
when the measured saved activations hold score matrices to drop (a fused kernel saves none, and
there is nothing to recompute). Data parallelism adds its collectives
(:func:`gradient_sync`), which engines overlap with the backward pass (DeepSpeed, PyTorch
FSDP): the step's time at the bound is the larger of its compute and its communication.

MFU (model FLOPs utilisation, Chowdhery et al. 2022, "PaLM", appendix B) is the step's model
FLOPs (forward and backward, 2 per multiply-add, recomputation not counted) over the step's time
times the device's peak FLOP/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import OpcountError
from ..hardware.interconnect import Collective, Interconnect, all_gather, all_reduce, reduce_scatter
from ..ir import OpCall, TensorSpec
from ..roofline import RooflineReport
from ..tracing import Trace

SECONDS_PER_HOUR = 3600.0


def forward_calls(trace: Trace) -> int:
    """How many of a training trace's calls are the forward pass and the loss: the calls up to
    the last one that writes one of the model's outputs (the loss, or the logits)."""
    outputs = {spec.id for spec in trace.outputs if spec.id is not None}
    last = -1
    for i, call in enumerate(trace.calls):
        if any(isinstance(o, TensorSpec) and o.id in outputs for o in call.outputs):
            last = i
    if last < 0:
        raise OpcountError("internal error: no call of the training trace writes the model's outputs")
    return last + 1


def recompute_time(
    report: RooflineReport,
    calls: Sequence[OpCall],
    forward: int,
    layers: Sequence[str],
    recompute: str,
    seq_len: int | None,
) -> float:
    """Seconds of the forward operators run again under ``recompute``: of the first ``forward``
    ``calls``, those in the modules ``layers`` (``full``), or among them those of the attention
    core (``selective``: an input or output ``[..., seq_len, seq_len]`` of four dimensions or more)."""
    if recompute == "none":
        return 0.0
    inside = {id(c) for c in calls[:forward]}
    prefixes = tuple(f"{name}." for name in layers)
    total = 0.0
    for t in report.layers:
        call = t.layer.call
        if call is None or id(call) not in inside:
            continue
        if not any(o in layers or o.startswith(prefixes) for o in t.layer.owners):
            continue
        if recompute == "selective" and not _scores(call, seq_len):
            continue
        total += t.effective_time
    return total


def _scores(call: OpCall, seq_len: int | None) -> bool:
    if "scaled_dot_product" in call.kind:  # the whole attention core in one operator
        return True
    return seq_len is not None and any(
        isinstance(s, TensorSpec) and len(s.shape) >= 4 and tuple(s.shape[-2:]) == (seq_len, seq_len)
        for s in (*call.inputs, *call.outputs)
    )


def gradient_sync(
    gradient_bytes: float, weight_bytes: float, zero: int, dp: int, link: Interconnect | None
) -> list[Collective]:
    """The data-parallel collectives of one step over ``dp`` devices, each payload the whole
    (unpartitioned) gradients or weights of one replica, as the ZeRO paper counts them: stage 0
    an all-reduce of the gradients; stages 1 and 2 a reduce-scatter of the gradients and an
    all-gather of the updated weights (the same bytes as the all-reduce); stage 3 also gathers
    the weights for the forward and again for the backward pass, 1.5 times the all-reduce's bytes."""
    if dp == 1:
        return []
    if link is None:
        raise OpcountError(f"--dp {dp}: the hardware has no interconnect figures to price the gradients' collectives")
    if zero == 0:
        return [all_reduce(gradient_bytes, dp, link)]
    gathers = 2 if zero == 3 else 1
    return [reduce_scatter(gradient_bytes, dp, link), *(all_gather(weight_bytes, dp, link) for _ in range(gathers))]


@dataclass(frozen=True)
class StepTime:
    """Seconds of one step: ``compute`` (the traced step), ``recompute`` (forward operators run
    again), ``communication`` (the data-parallel collectives, overlapped with the compute)."""

    compute: float
    recompute: float
    communication: float

    @property
    def time(self) -> float:
        return max(self.compute + self.recompute, self.communication)

    @property
    def bound(self) -> str:
        return "communication" if self.communication > self.compute + self.recompute else "compute and memory"


@dataclass(frozen=True)
class Throughput:
    """What a step of ``tokens`` (over every device) taking ``time`` seconds on ``devices`` devices
    of ``peak`` FLOP/s achieves, ``model_flops`` (2 per multiply-add) per device."""

    tokens: int
    time: float
    devices: int
    model_flops: float
    peak: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.time

    @property
    def mfu(self) -> float:
        return self.model_flops / (self.time * self.peak)

    def time_to_train(self, tokens: float) -> float:
        """Seconds to train on ``tokens`` tokens at this rate (the last step may be partial)."""
        return tokens / self.tokens_per_s

    def cost(self, tokens: float, price_per_device_hour: float) -> float:
        """The run's cost: every device for :meth:`time_to_train`, at ``price_per_device_hour``."""
        return self.time_to_train(tokens) / SECONDS_PER_HOUR * self.devices * price_per_device_hour
