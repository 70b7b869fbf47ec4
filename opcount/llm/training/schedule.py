"""A parallel training step's two times from its stages: each stage's kernels and collectives for one
micro-batch, the 1F1B pipeline around them (its bubble), the data-parallel gradients' collectives after them.

The **estimate**, per stage and micro-batch: its kernels and recomputed kernels (:mod:`.stages`), the tensor-
and expert-parallel collectives (on the critical path, as Megatron-LM runs them by default), the context-parallel
ring exchange where it outlasts the stage's kernels it overlaps, and the pipeline's sends (forward activations
and backward gradients, once per model chunk). The slowest stage sets the pace: the step is ``m + (p - 1) / v``
of its micro-batch times (:meth:`opcount.training.layout.TrainLayout.step_slots`), the bubble the ``(p - 1) / v``.
The data-parallel collectives (reduce-scatter of the gradients, gather of the weights) overlap the last
micro-batch's forward and backward (Megatron-LM's ``--overlap-grad-reduce`` and ``--overlap-param-gather``,
PyTorch FSDP): only what outlasts them is exposed.

The **bound** (no engine runs this layout's schedule faster): per stage, its FLOPs at the tensor peak through
the same ``m + (p - 1) / v`` slots (the bubble is the schedule's), or its compulsory bytes at the bandwidth, or
all of its communication at the links' speed, whichever is longest; the slowest stage's.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...hardware.interconnect import Collective, Interconnect
from ...training.comm import Shape, context_parallel, data_parallel, expert_parallel, pipeline_send, tensor_parallel
from ...training.layout import TrainLayout
from .stages import StageShare

TERMS = ("compute", "recompute", "tensor_parallel", "context_parallel", "expert_parallel", "pipeline", "bubble")


@dataclass(frozen=True)
class StageTime:
    """One stage's seconds for one micro-batch (estimate), its data-parallel collectives for the step, and its
    bound for the step."""

    stage: int
    compute: float
    recompute: float
    tensor_parallel: float
    context_parallel: float  # the ring exchange's whole time
    context_exposed: float
    expert_parallel: float
    pipeline: float
    data_parallel: float
    data_exposed: float
    bound: float
    bound_compute: float
    bound_memory: float
    bound_communication: float
    sent: float  # bytes a device of the stage sends in a step
    # one micro-batch's collectives and sends (each layer's), then the step's data-parallel ones
    collectives: tuple[Collective, ...] = ()

    @property
    def micro_batch(self) -> float:
        return (
            self.compute + self.recompute + self.tensor_parallel + self.context_exposed + self.expert_parallel
            + self.pipeline
        )  # fmt: skip


@dataclass(frozen=True)
class ParallelStep:
    """The step on its layout: ``stages`` and the slowest's terms (seconds per step) summing to ``time``."""

    layout: TrainLayout
    stages: list[StageTime]
    slowest: int
    terms: dict[str, float] = field(default_factory=dict)

    @property
    def time(self) -> float:
        return sum(self.terms.values())

    @property
    def time_bound(self) -> float:
        return max(s.bound for s in self.stages)

    @property
    def limited_by(self) -> str:
        """What limits the bound's slowest stage: ``compute`` (its bubble included), ``memory`` or ``communication``."""
        s = max(self.stages, key=lambda t: t.bound)
        parts = {"compute": s.bound_compute, "memory": s.bound_memory, "communication": s.bound_communication}
        return max(parts, key=parts.__getitem__)

    @property
    def communication(self) -> float:
        """The slowest stage's collectives and sends of a step, hidden or not."""
        s = self.stages[self.slowest]
        m = self.layout.micro_batches
        return m * (s.tensor_parallel + s.context_parallel + s.expert_parallel + s.pipeline) + s.data_parallel


def _seconds(collectives: list[Collective]) -> float:
    return sum((c.time for c in collectives), 0.0)


def _sent(collectives: list[Collective]) -> float:
    return sum((c.sent for c in collectives), 0.0)


def price(
    layout: TrainLayout,
    stages: list[StageShare],
    *,
    kernels: float,
    recompute: float,
    flops_time: float,
    recompute_flops_time: float,
    memory_time: float,
    shape: Shape,
    recompute_mode: str,
    zero: int,
    link: Interconnect | None,
) -> ParallelStep:
    """The step's times. ``kernels``, ``recompute``: the traced micro-batch's kernels' and recomputed kernels'
    seconds on one device (the whole model); ``flops_time``, ``recompute_flops_time``: its FLOPs at the peak;
    ``memory_time``: its compulsory bytes at the bandwidth."""
    tp, cp, sp, m = layout.tp, layout.cp, layout.sequence_parallel, layout.micro_batches
    node = link.devices_per_node if link is not None else 1
    times = []
    for s in stages:
        n = len(s.layers)
        t_fwd, t_bwd = tensor_parallel(shape, tp, cp, sp, link) if tp > 1 else ([], [])
        again = t_fwd if recompute_mode == "full" else []  # a checkpointed layer's forward runs its collectives again
        c_fwd, c_bwd = context_parallel(shape, tp, cp, link) if cp > 1 else ([], [])
        e_fwd, e_bwd = expert_parallel(shape, tp, cp, layout.ep, sp, link) if layout.ep > 1 else ([], [])
        tensor = [*t_fwd, *t_bwd, *again] * n
        ring = [*c_fwd, *c_bwd] * n
        experts = [*e_fwd, *e_bwd] * s.moe_layers
        across = tp * cp * layout.dp >= node  # the next stage is tp x cp x dp devices away
        # a stage receives and sends its activations forward and their gradients backward, once per model chunk
        sends = [pipeline_send(shape, tp, cp, sp, across, link)] * (2 * layout.virtual_stages) if layout.pp > 1 else []
        grads = s.states.gradients * (s.states.dp if zero >= 2 else 1)  # a device's whole gradients, before ZeRO
        weights = s.states.weights * (s.states.dp if zero >= 3 else 1)
        sync = data_parallel(grads, weights, zero, layout.dp * cp, tp, link)
        compute = kernels * s.time
        again_s = recompute * s.recompute_share
        ring_s = _seconds(ring)
        sync_s = _seconds(sync)
        per_mb = [compute, again_s, _seconds(tensor), ring_s, _seconds(experts), _seconds(sends)]
        comm_step = m * (per_mb[2] + ring_s + per_mb[4] + per_mb[5]) + sync_s
        b_compute = (flops_time * s.flops + recompute_flops_time * s.recompute_share) * layout.step_slots()
        b_memory = memory_time * s.flops  # the stage's weights and gradients: its share of the model
        times.append(
            StageTime(
                s.stage, compute, again_s, per_mb[2], ring_s, max(ring_s - compute, 0.0), per_mb[4], per_mb[5],
                sync_s, max(sync_s - compute - again_s, 0.0), max(b_compute, b_memory, comm_step),
                b_compute, b_memory, comm_step,
                m * (_sent(tensor) + _sent(ring) + _sent(experts) + _sent(sends)) + _sent(sync),
                (*tensor, *ring, *experts, *sends, *sync),
            )
        )  # fmt: skip
    slowest = max(range(len(times)), key=lambda k: times[k].micro_batch)  # it paces the pipeline
    t = times[slowest]
    terms = {
        "compute": m * t.compute,
        "recompute": m * t.recompute,
        "tensor_parallel": m * t.tensor_parallel,
        "context_parallel": m * t.context_exposed,
        "expert_parallel": m * t.expert_parallel,
        "pipeline": m * t.pipeline,
        "bubble": (layout.step_slots() - m) * t.micro_batch,
        "data_parallel": max(x.data_exposed for x in times),
    }
    return ParallelStep(layout, times, slowest, terms)
