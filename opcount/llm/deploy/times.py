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

import numpy as np

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


class Shares(NamedTuple):
    """Each call's stage and :class:`Share` as arrays (one entry a call, in the trace's order)."""

    stage: np.ndarray
    work: np.ndarray
    held: np.ndarray
    padded: np.ndarray

    @classmethod
    def of(cls, stage: Sequence[int], share: Sequence[Share]) -> Shares:
        columns = np.array(share, dtype=np.float64).reshape(-1, 3)
        return cls(np.array(stage, dtype=np.int64), columns[:, 0].copy(), columns[:, 1].copy(), columns[:, 2].copy())


class KernelCalls:
    """A priced phase's kernels with their calls' roofline figures (FLOPs, activation and weight bytes), read
    once for every layout it is deployed on: each kernel's members (flat, kernel by kernel), its FLOPs and bytes
    in all, the member its time is charged to (the one doing the most FLOPs), the schedule's per-kernel seconds."""

    def __init__(self, schedule: KernelSchedule, report: RooflineReport, calls: Sequence[OpCall]) -> None:
        self.schedule, self.report = schedule, report
        layer = {id(t.layer.call): t.layer for t in report.layers if t.layer.call is not None}
        members: list[tuple[int, int, float, float, float]] = []  # kernel, call, its FLOPs, io and weight bytes
        flops_in, moved_in, anchors = [], [], []
        for k, kernel in enumerate(schedule.kernels):
            flops = moved = 0.0
            anchor, most = kernel.calls[0], -1.0
            for i in kernel.calls:
                lt = layer.get(id(calls[i]))
                if lt is None:
                    continue
                io, w = lt.ifmap_bytes + lt.ofmap_bytes, lt.weight_bytes
                members.append((k, i, lt.flops, io, w))
                flops += lt.flops
                moved += io + w
                if lt.flops > most:
                    anchor, most = i, lt.flops
            flops_in.append(flops)
            moved_in.append(moved)
            anchors.append(anchor)
        table = np.array(members, dtype=np.float64).reshape(-1, 5)
        self.kernel, self.call = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
        self.flops, self.io, self.weights = table[:, 2].copy(), table[:, 3].copy(), table[:, 4].copy()
        self.kernel_flops, self.kernel_moved = (
            np.array(flops_in, dtype=np.float64),
            np.array(moved_in, dtype=np.float64),
        )
        self.anchor = np.array(anchors, dtype=np.int64)
        self.compute, self.memory = schedule.compute_memory()


def stage_times(kernels: KernelCalls, shares: Shares, stages: int) -> StageTimes:
    """The figures of each of ``stages`` stages of the phase whose kernels are ``kernels``, its calls on the stages
    and at the shares ``shares`` says.

    Every sum runs in the calls' order, one term at a time (``np.add.at`` is unbuffered and sequential), as a
    loop over the kernels and their calls adds them: the figures do not depend on how they are computed."""
    count = len(kernels.anchor)
    call = kernels.call
    padded, moved_share = np.zeros(count), np.zeros(count)
    np.add.at(padded, kernels.kernel, kernels.flops * shares.padded[call])
    np.add.at(moved_share, kernels.kernel, kernels.io * shares.work[call] + kernels.weights * shares.held[call])
    moved, flops = kernels.kernel_moved, kernels.kernel_flops
    with np.errstate(divide="ignore", invalid="ignore"):
        bytes_share = np.where(moved != 0, moved_share / np.where(moved != 0, moved, 1.0), shares.held[kernels.anchor])
        flops_share = np.where(flops != 0, padded / np.where(flops != 0, flops, 1.0), bytes_share)
    seconds = np.maximum(kernels.compute * flops_share, kernels.memory * bytes_share)
    # each kernel's seconds, then its launch, onto its anchor's stage: the order a loop over the kernels adds them
    terms = np.empty(2 * count)
    terms[0::2], terms[1::2] = seconds, kernels.schedule.hardware.efficiency.launch_s
    estimate, matmul, compulsory = np.zeros(stages), np.zeros(stages), np.zeros(stages)
    np.add.at(estimate, np.repeat(shares.stage[kernels.anchor], 2), terms)
    s = kernels.schedule
    np.add.at(matmul, shares.stage, s.call_flops * shares.work)
    np.add.at(compulsory, shares.stage, s.call_weight_bytes * shares.held + s.call_io_bytes * shares.work)
    return StageTimes(estimate.tolist(), matmul.tolist(), compulsory.tolist())
