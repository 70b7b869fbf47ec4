"""A phase's and a generation's figures as plain values (:mod:`.sweep` computes them at many points
from a few traces; :meth:`PhaseValues.of` and :meth:`GenerationValues.of` take them from a traced
phase or generation): FLOPs, memory, and with hardware the chosen kernels' schedule (:mod:`.kernels`) whose
estimate and speed of light are the point's two times, as :mod:`.phases` computes them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...hardware.lookup import Hardware
from ..generation import GenerationCost
from ..kernels.estimate import KernelSchedule, PhaseFigures
from ..phases import GenerationFigures, Memory, PhaseCost
from ..precision.dtypes import Precision


@dataclass(frozen=True, kw_only=True)
class PhaseValues(PhaseFigures):
    """The figures of one phase at one point: ``traced`` when they come from the point's own analyzed
    trace (``cost``), else from the records rebuilt by a fit."""

    phase: str
    batch: int
    seq_len: int
    kv_len: int
    precision: Precision
    flops: int | float
    flops_per_mac: int
    memory: Memory
    hardware: Hardware | None
    traced: bool
    # the chosen kernels, with hardware
    schedule: KernelSchedule | None = field(default=None, repr=False, compare=False)
    cost: PhaseCost | None = field(default=None, repr=False, compare=False)  # the traced phase, if traced

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    @property
    def kernels(self) -> str | None:
        return None if self.schedule is None else self.schedule.mode

    @classmethod
    def of(cls, cost: PhaseCost) -> PhaseValues:
        """The figures of a traced phase."""
        hw = None if cost.roofline is None else cost.roofline.hardware
        return cls(
            phase=cost.phase, batch=cost.batch, seq_len=cost.seq_len, kv_len=cost.kv_len, precision=cost.precision,
            flops=cost.flops.total(), flops_per_mac=cost.flops.flops_per_mac, memory=cost.memory, hardware=hw,
            traced=True, schedule=cost.schedule, cost=cost,
        )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class GenerationValues(GenerationFigures):
    """A generation's figures (see :class:`~opcount.llm.generation.GenerationCost`) from its phases' points."""

    prefill: PhaseValues
    first_step: PhaseValues | None
    last_step: PhaseValues | None
    gen_len: int
    decode_flops: float
    decode_time: float | None
    fullest_step: PhaseValues | None = None  # the step holding the most cache
    decode_time_bound: float | None = None

    @classmethod
    def of(cls, gen: GenerationCost) -> GenerationValues:
        """The figures of a traced generation."""
        first, last, fullest = (
            None if s is None else PhaseValues.of(s) for s in (gen.first_step, gen.last_step, gen.fullest_step)
        )
        return cls(
            prefill=PhaseValues.of(gen.prefill), first_step=first, last_step=last, gen_len=gen.gen_len,
            decode_flops=gen.decode_flops, decode_time=gen.decode_time, fullest_step=fullest,
            decode_time_bound=gen.decode_time_bound,
        )  # fmt: skip

    @property
    def flops(self) -> float:
        return self.prefill.flops + self.decode_flops
