"""A deployment's figures: what one device holds, and what the whole layout does, under the names a
phase and a generation use (:class:`~opcount.llm.kernels.estimate.PhaseFigures`,
:class:`~opcount.llm.phases.GenerationFigures`).

``time``, ``time_bound``, ``bound``, ``tokens_per_s`` (over every replica) and their ``_bound`` are
the layout's: a phase's step, or a generation's prompt then its decode steps, with
``time_to_first_token`` and ``time_per_output_token``. All the devices of a layout run a step
together, so its time is each device's share of the kernels (``compute_time``), then the
collectives (``communication_time``, not overlapped unless two-batch overlap hides them:
``overlapped_time``): :attr:`Deployment.step_time`. :mod:`.deployment` computes them. :class:`Fit` is
whether what a device holds fits its memory as an engine sizes it (:mod:`.fit`), with a layout that
does where it does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engines.terms import StepShape
from .layout import Parallel


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device holds. ``gradients`` and ``optimizer`` are 0 at inference."""

    weights: float
    kv_cache: float
    activations: float
    gradients: float = 0.0
    optimizer: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.gradients + self.optimizer

    def as_dict(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "activations": self.activations,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "total": self.total,
        }


@dataclass(frozen=True, kw_only=True)
class Fit:
    """What the busiest device holds (``per_device``, its activations those of a step of at most
    ``max_batched_tokens`` tokens) against ``capacity``, the device's reported memory times
    ``gpu_memory_utilization`` (:mod:`.fit`). Where it does not fit, ``layout_that_fits`` is the smallest
    layout found to (None: none of up to ``searched`` devices; ``reason`` says why none was searched)."""

    per_device: DeviceMemory
    capacity: float
    gpu_memory_utilization: float
    max_batched_tokens: int
    chunked: bool = False  # a step of more tokens than max_batched_tokens: its activations scaled down
    layout_that_fits: Parallel | None = None
    layout_per_device: float | None = None  # the busiest device's bytes on layout_that_fits
    searched: int = 0
    reason: str = ""

    @property
    def fits(self) -> bool:
        return self.per_device.total <= self.capacity

    def as_dict(self) -> dict[str, object]:
        """The JSON ``memory`` fields: ``capacity``, ``fits``, the engine's settings, and where it does not
        fit, ``layout_that_fits`` (its degrees and busiest device's bytes, or null) and ``searched_devices``."""
        out: dict[str, object] = {
            "capacity": self.capacity,
            "fits": self.fits,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "max_batched_tokens": self.max_batched_tokens,
        }
        if not self.fits:
            found = self.layout_that_fits
            out["layout_that_fits"] = (
                None if found is None else {**found.as_dict(), "per_device": self.layout_per_device}
            )
            out["searched_devices"] = self.searched
        return out


@dataclass(kw_only=True)
class Deployment:
    """A phase (or generation) on ``parallel``: per-device memory against the device's capacity
    (``fit``, None without a device's memory), communication, the layout's times and tokens/s, cost."""

    parallel: Parallel
    hardware: str | None
    per_device: DeviceMemory
    model_bytes: float  # everything the layout holds, replicas excepted
    fit: Fit | None = None
    communication_bytes: float  # sent per device per step
    communication_time: float | None  # a step's collectives
    compute_time: float | None  # a step's kernels on the busiest path, communication excepted
    tokens: int  # per step per replica
    compute_time_bound: float | None = None  # the speed of light of a step's kernels, communication excepted
    # what limits a step's speed of light: compute, memory (its slowest stage's) or communication
    limited_by: str | None = None
    price: float | None = None
    cost: dict[str, float] | None = None  # dollars per million tokens, from the estimate
    cost_bound: dict[str, float] | None = None  # from the bound: the least any engine could charge
    max_batch: int | None = None
    generation: bool = False  # a prompt then ``generated`` decode steps, whose step is the mean decode step
    generated: int = 0
    time_to_first_token: float | None = None  # a generation: its prompt on the layout
    time_to_first_token_bound: float | None = None
    matmul_flops: float | None = None  # a step's matrix-product FLOPs on the busiest device (2 per multiply-add)
    # two-batch overlap: the collectives' seconds hidden under the kernels, and the bound's collectives (the
    # whole batch's, which no split beats)
    overlapped_time: float | None = None
    communication_time_bound: float | None = None
    # an engine profile's terms, each in seconds a step (opcount.llm.engines.terms; empty: no profile), their
    # sum in the estimate, and the step's shape they were priced from, kept to price it again under another profile
    engine_terms: dict[str, float] = field(default_factory=dict)
    shape: StepShape | None = None

    @property
    def engine_time(self) -> float:
        return sum(self.engine_terms.values())

    @property
    def step_time(self) -> float | None:
        """The estimate of one step (a generation's: a decode step): its kernels, then its collectives
        (less those two-batch overlap hides under the kernels), then the engine profile's terms."""
        if self.compute_time is None:
            return None
        return self.compute_time + (self.communication_time or 0.0) - (self.overlapped_time or 0.0) + self.engine_time

    @property
    def step_time_bound(self) -> float | None:
        """The speed of light of one step: no engine runs it faster."""
        if self.compute_time_bound is None:
            return None
        communication = (
            self.communication_time if self.communication_time_bound is None else self.communication_time_bound
        )
        return max(self.compute_time_bound, communication or 0.0)

    @property
    def time(self) -> float | None:
        """The estimate: a phase's step, or a whole generation (its prompt, then its decode steps)."""
        return self._whole(self.time_to_first_token, self.step_time)

    @property
    def time_bound(self) -> float | None:
        return self._whole(self.time_to_first_token_bound, self.step_time_bound)

    @property
    def time_per_output_token(self) -> float | None:
        """A generation's decode step (None for a phase, and without a decode step)."""
        return self.step_time if self.generation and self.generated else None

    @property
    def time_per_output_token_bound(self) -> float | None:
        return self.step_time_bound if self.generation and self.generated else None

    @property
    def tokens_per_s(self) -> float | None:
        """Tokens a second over every replica: a phase's, or a generation's generated tokens."""
        return self._rate(self.step_time)

    @property
    def tokens_per_s_bound(self) -> float | None:
        return self._rate(self.step_time_bound)

    @property
    def capacity(self) -> float | None:
        """The bytes a device gives the engine: its reported memory times ``gpu_memory_utilization``."""
        return None if self.fit is None else self.fit.capacity

    @property
    def fits(self) -> bool | None:
        return None if self.fit is None else self.fit.fits

    def _whole(self, prompt: float | None, step: float | None) -> float | None:
        if not self.generation:
            return step
        if prompt is None or (step is None and self.generated):
            return None
        return prompt + self.generated * (step or 0.0)

    def _rate(self, step: float | None) -> float | None:
        if not step or (self.generation and not self.generated):
            return None
        return self.tokens * self.parallel.dp / step
