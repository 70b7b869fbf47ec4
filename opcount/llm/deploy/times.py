"""One device's share of a phase's kernels, per pipeline stage: its estimate and its bound's figures.

A phase's kernels (:mod:`.kernels`) run on every device of a layout, each device its share of
them: a call in a tensor-parallel region ``1 / tp`` of its FLOPs, activations and weights, an
expert the device's routes and the experts they reach (:mod:`.expert_routes`; the caller says, per
call, its :class:`Share`: of its FLOPs and activations, of its weights and cache, of its products'
padded compute). A kernel's compute seconds are scaled by its members' FLOP-weighted padded share,
its memory seconds by their byte-weighted share (each call's activation and weight bytes from the
eager roofline), and the kernel runs on
the stage of its member doing the most FLOPs (the matrix product it is fused around). Per stage:

- the **estimate**: the sum of its kernels' ``max(compute, memory)`` at the shares, plus a launch
  each (:attr:`.KernelSchedule.time`);
- the **bound's figures**: its matrix-product FLOPs (each call's at its share) and its compulsory
  bytes (each call's weights and caches at the weight share, its inputs and outputs at the
  activation share), which :func:`.bound.time_bound` turns into the stage's speed of light.

On one device (every share 1, one stage) these are the phase's own figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ...ir import OpCall
from ...roofline import RooflineReport
from ...roofline.bound import time_bound
from ..kernels.estimate import KernelSchedule


class Share(NamedTuple):
    """The share of one call a device runs: of its FLOPs and activations (``work``), of its weights and
    cache (``held``), and of its matrix products' estimated compute (``padded``: their rows padded to
    whole tiles, which an expert's grouped GEMM pads per expert; ``work`` elsewhere)."""

    work: float
    held: float
    padded: float


@dataclass
class StageTimes:
    """Per pipeline stage: ``estimate`` seconds, matrix-product ``flops`` and ``compulsory`` bytes."""

    estimate: list[float]
    flops: list[float]
    compulsory: list[float]

    def bounds(self, schedule: KernelSchedule) -> list[float]:
        """Each stage's speed of light (no communication: the caller adds it)."""
        bandwidth = schedule.hardware.bandwidth
        return [
            time_bound(f, schedule.matmul_peak, b, bandwidth) for f, b in zip(self.flops, self.compulsory, strict=True)
        ]

    def limited_by(self, schedule: KernelSchedule) -> list[str]:
        """What limits each stage's speed of light: ``compute`` or ``memory`` (as :attr:`.KernelSchedule.limited_by`)."""
        return [
            "compute" if f / schedule.matmul_peak >= b / schedule.hardware.bandwidth else "memory"
            for f, b in zip(self.flops, self.compulsory, strict=True)
        ]


class KernelCalls:
    """A priced phase's kernels with their calls' roofline figures (FLOPs, activation and weight bytes), read
    once for every layout it is deployed on: each kernel's members, its FLOPs and bytes in all, the member its
    time is charged to (the one doing the most FLOPs), and the schedule's per-kernel and per-call figures as
    plain floats."""

    def __init__(self, schedule: KernelSchedule, report: RooflineReport, calls: Sequence[OpCall]) -> None:
        self.schedule, self.report = schedule, report
        layer = {id(t.layer.call): t.layer for t in report.layers if t.layer.call is not None}
        self.kernels: list[tuple[list[tuple[int, float, float, float]], float, float, int]] = []
        for kernel in schedule.kernels:
            members = []
            flops = moved = 0.0
            anchor, most = kernel.calls[0], -1.0
            for i in kernel.calls:
                lt = layer.get(id(calls[i]))
                if lt is None:
                    continue
                io, w = lt.ifmap_bytes + lt.ofmap_bytes, lt.weight_bytes
                members.append((i, lt.flops, io, w))
                flops += lt.flops
                moved += io + w
                if lt.flops > most:
                    anchor, most = i, lt.flops
            self.kernels.append((members, flops, moved, anchor))
        compute, memory = schedule.compute_memory()
        self.compute, self.memory = compute.tolist(), memory.tolist()
        self.call_flops = schedule.call_flops.tolist()
        self.call_weight_bytes = schedule.call_weight_bytes.tolist()
        self.call_io_bytes = schedule.call_io_bytes.tolist()


def stage_times(kernels: KernelCalls, stage: Sequence[int], share: Sequence[Share], stages: int) -> StageTimes:
    """The figures of each of ``stages`` stages of the phase whose kernels are ``kernels``, its calls on the stages
    ``stage`` at the shares ``share`` (one each, in the trace's order)."""
    out = StageTimes([0.0] * stages, [0.0] * stages, [0.0] * stages)
    launch = kernels.schedule.hardware.efficiency.launch_s
    for k, (members, flops, moved, anchor) in enumerate(kernels.kernels):
        padded = moved_share = 0.0
        for i, f, io, w in members:
            part = share[i]
            padded += f * part.padded
            moved_share += io * part.work + w * part.held
        bytes_share = moved_share / moved if moved else share[anchor].held
        flops_share = padded / flops if flops else bytes_share
        out.estimate[stage[anchor]] += max(kernels.compute[k] * flops_share, kernels.memory[k] * bytes_share)
        out.estimate[stage[anchor]] += launch
    call_flops, weights, io_bytes = kernels.call_flops, kernels.call_weight_bytes, kernels.call_io_bytes
    for i, s in enumerate(stage):
        out.flops[s] += call_flops[i] * share[i].work
        out.compulsory[s] += weights[i] * share[i].held + io_bytes[i] * share[i].work
    return out
