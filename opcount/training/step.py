"""A training step's two times (the bound and the estimate), its throughput, model FLOPs
utilisation, and what a run of a given number of tokens takes and costs.

The step's operators (forward, loss, backward: one dispatch trace in ``mode="train"``) run as
one kernel each (:mod:`opcount.llm.kernels.estimate`, eager). Its **estimate** (``time``): each kernel's
``max(compute, memory)`` with the efficiency factors (:mod:`opcount.hardware.efficiency`) plus
its launch, the recomputed kernels again, and the data-parallel collectives where they outlast
the compute they overlap. Its **bound** (``time_bound``, the speed of light): ``max(the step's
FLOPs, recomputed ones included, at the tensor peak; compulsory bytes (each weight read once,
every gradient written once, the inputs and the loss) at the bandwidth; the collectives)``, the
FLOPs those MFU counts (every FLOP, not only the matrix products', so MFU at the bound is at most 1).
Recomputation adds the forward operators it runs again: ``full`` every forward
operator of the checkpointed layers, ``selective`` those of the attention core (the operators
that read or write a ``[batch, heads, query, key]`` score matrix: ``QK^T``, its softmax and
dropout, the product with the values; or ``scaled_dot_product_attention``, all of them in one),
when the measured saved activations hold score matrices to drop (a fused kernel saves none, and
there is nothing to recompute). Data parallelism adds its collectives
(:func:`gradient_sync`), which engines overlap with the backward pass (DeepSpeed, PyTorch
FSDP): only what outlasts the compute is exposed.

MFU (model FLOPs utilisation, Chowdhery et al. 2022, "PaLM", appendix B) is the step's model
FLOPs (forward and backward, 2 per multiply-add, recomputation not counted) over the step's time
times the device's peak FLOP/s: from the estimate, and from the bound (the most any engine reaches).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import OpcountError
from ..hardware.interconnect import Collective, Interconnect, all_gather, all_reduce, reduce_scatter
from ..ir import OpCall, TensorSpec
from ..roofline import RooflineReport
from ..roofline.bound import time_bound
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
    """Roofline seconds of the forward operators run again under ``recompute`` (:func:`recomputed`)."""
    again = {id(calls[i]) for i in recomputed(calls, forward, layers, recompute, seq_len)}
    return sum(t.effective_time for t in report.layers if t.layer.call is not None and id(t.layer.call) in again)


def recomputed(
    calls: Sequence[OpCall], forward: int, layers: Sequence[str], recompute: str, seq_len: int | None
) -> list[int]:
    """The indices of the forward calls run again under ``recompute``: of the first ``forward``
    ``calls``, those in the modules ``layers`` (``full``), or among them those of the attention
    core (``selective``: an input or output ``[..., seq_len, seq_len]`` of four dimensions or more)."""
    if recompute == "none":
        return []
    prefixes = tuple(f"{name}." for name in layers)
    out = []
    for i, call in enumerate(calls[:forward]):
        if not any(o in layers or o.startswith(prefixes) for o in call.scope):
            continue
        if recompute == "selective" and not _scores(call, seq_len):
            continue
        out.append(i)
    return out


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
    """Seconds of one step. The estimate's: ``compute`` (the traced step's kernels), ``recompute``
    (forward kernels run again), ``communication`` (the data-parallel collectives, overlapped with
    the compute). The bound's: ``flops_at_peak`` (matrix products, recomputed ones included) and
    ``bytes_at_bandwidth`` (the compulsory bytes)."""

    compute: float
    recompute: float
    communication: float
    flops_at_peak: float = 0.0
    bytes_at_bandwidth: float = 0.0

    @property
    def exposed(self) -> float:
        """The collectives' seconds the compute does not hide."""
        return max(self.communication - self.compute - self.recompute, 0.0)

    @property
    def time(self) -> float:
        """The estimate: compute + recompute + exposed collectives."""
        return self.compute + self.recompute + self.exposed

    @property
    def time_bound(self) -> float:
        """The speed of light: no engine runs the step faster."""
        return time_bound(self.flops_at_peak, 1.0, self.bytes_at_bandwidth, 1.0, self.communication)

    @property
    def limited_by(self) -> str:
        """What limits the speed of light: ``compute``, ``memory`` or ``communication``."""
        terms = {"compute": self.flops_at_peak, "memory": self.bytes_at_bandwidth, "communication": self.communication}
        return max(terms, key=terms.__getitem__)


@dataclass(frozen=True)
class Throughput:
    """What a step of ``tokens`` (over every device) taking ``time`` seconds on ``devices`` devices
    of ``peak`` FLOP/s achieves, ``model_flops`` (2 per multiply-add) per device; ``time_bound``
    (the step's speed of light) gives the figures no engine exceeds."""

    tokens: int
    time: float
    devices: int
    model_flops: float
    peak: float
    time_bound: float | None = None

    @property
    def tokens_per_s_bound(self) -> float | None:
        return None if not self.time_bound else self.tokens / self.time_bound

    @property
    def mfu_bound(self) -> float | None:
        return None if not self.time_bound else self.model_flops / (self.time_bound * self.peak)

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
