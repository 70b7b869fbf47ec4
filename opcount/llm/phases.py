"""The cost of one inference phase of a causal LM: what is asked (:class:`PhaseRequest`) and what it
costs (:class:`PhaseCost`, its :class:`Memory`).

- **prefill**: ``seq_len`` prompt tokens per sequence (time to first token), into an empty cache or
  after ``kv_len`` cached ones (a prompt's chunk in chunked prefill, or the rest of a prompt whose
  prefix the cache holds): each new token attends to the cached tokens and causally to the chunk,
  a recurrent layer scans the chunk from the state held, and the last token's logits are computed;
- **decode**: ``seq_len`` new tokens (usually 1) attending to ``kv_len`` cached tokens and to
  themselves (time per output token).

A generation's figures, from its prefill and decode steps (:class:`GenerationFigures`), are read the
same whether the steps were traced (:mod:`.generation`) or fitted (:mod:`.sweep`), and by a deployment.

Each phase is one trace of the model on the meta device (nothing of the weights' size is
allocated) with the dispatch tracer (:meth:`.causal_lm.CausalLM.cost`); FLOPs, bytes, the memory
footprint and the roofline all come from its records. A whole generation is :mod:`.generation`'s.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..analysis import FlopCountAnalysis
from ..handles.memory import Traffic
from ..hardware.lookup import Hardware
from ..hardware.lookup import hardware as lookup_hardware
from ..ir import OpCall, TensorSpec
from ..roofline import RooflineReport
from .kernels.estimate import KernelSchedule, PhaseFigures
from .precision.dtypes import Precision


@dataclass(frozen=True, kw_only=True)
class PhaseRequest:
    """One phase as asked, passed whole from the caller to the trace: the ``phase`` and its point
    (``seq_len`` new tokens, None for decode's 1; ``kv_len`` cached before them, a prefill's cached
    prefix or decode's context; ``batch`` sequences), the FLOP
    convention (``flops_per_mac``, ``preset``), and with ``hardware`` the ``kernels`` priced
    (``fused`` as serving engines run them, or ``eager``). A sweep or a generation asks the same at
    other points (:meth:`at`); :meth:`.causal_lm.CausalLM.check_phase` says what is refused."""

    phase: str = "prefill"
    seq_len: int | None = None
    kv_len: int = 0
    batch: int = 1
    hardware: Hardware | None = None
    flops_per_mac: int = 1
    preset: str = "default"
    kernels: str = "fused"

    @property
    def new_tokens(self) -> int:
        """``seq_len``, or decode's 1 where it is left out (a prefill without one is refused:
        :meth:`.causal_lm.CausalLM.check_phase`)."""
        return 1 if self.seq_len is None else self.seq_len

    def at(self, batch: int, seq_len: int | None, kv_len: int) -> PhaseRequest:
        """The same request at another point."""
        return dataclasses.replace(self, batch=batch, seq_len=seq_len, kv_len=kv_len)


def resolved(hardware: Hardware | str | None) -> Hardware | None:
    """``hardware`` as a :class:`~opcount.hardware.lookup.Hardware`: a preset's or a file's name
    looked up once, for a request."""
    return lookup_hardware(hardware) if hardware is not None else None


@dataclass(frozen=True)
class Memory:
    """Bytes resident during a phase: the weights, the cache (what each layer holds for ``kv_len +
    seq_len`` positions: :mod:`.cache`) and the peak working set of activations (tensors alive at
    once, cache excluded); ``kv_cache_by_type`` splits the cache by layer type."""

    weights: int
    kv_cache: int
    activations: int
    kv_cache_by_type: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.activations

    def as_dict(self) -> dict[str, Any]:
        return {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "kv_cache_by_type": dict(self.kv_cache_by_type),
            "activations": self.activations,
        }


class Schedules(Mapping[str, KernelSchedule]):
    """A phase's kernels per mode, each scheduled when first read: most readers read the chosen mode's
    alone (a simulation's dozen traced phases, a deployment), and scheduling a mode costs about as much
    as tracing the phase."""

    def __init__(self, modes: Sequence[str], schedule: Callable[[str], KernelSchedule]) -> None:
        self._modes, self._schedule = tuple(modes), schedule
        self._done: dict[str, KernelSchedule] = {}

    def __getitem__(self, mode: str) -> KernelSchedule:
        if mode not in self._done:
            if mode not in self._modes:
                raise KeyError(mode)
            self._done[mode] = self._schedule(mode)
        return self._done[mode]

    def __iter__(self) -> Iterator[str]:
        return iter(self._modes)

    def __len__(self) -> int:
        return len(self._modes)

    def __repr__(self) -> str:
        return f"Schedules({', '.join(self._modes)})"


@dataclass(frozen=True, kw_only=True)
class PhaseCost(PhaseFigures):
    """What one phase costs: what was asked (``request``), ``flops`` (the analysis: totals, per
    operator and module), ``memory``, and with hardware its ``roofline`` (each operator's roofline as
    its own kernel), its kernels per mode (``schedules``, :mod:`.kernels`) and its two times: ``time``,
    the estimate of the chosen mode's kernels, and ``time_bound``, the speed of light."""

    request: PhaseRequest
    precision: Precision
    flops: FlopCountAnalysis
    memory: Memory
    roofline: RooflineReport | None = None
    moe_blocks: tuple[str, ...] = ()
    schedules: Mapping[str, KernelSchedule] | None = None  # with hardware: the kernels of each mode (kernels/)
    # the trace's calls with the tensors each reads and writes, as the phase's analysis found them: a
    # deployment sizes its devices from them without analyzing the trace again (None: analyze it)
    traffic: Sequence[tuple[OpCall, Traffic | None]] | None = field(default=None, repr=False, compare=False)
    # what deploying the phase works out once and every deployment of it reads (per layout, each call's stage
    # and share, each stage's working set; per device, its kernels' figures: :mod:`.deploy.call_shares`);
    # shared with the phase priced on other devices, whose trace it is too
    layouts: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def phase(self) -> str:
        return self.request.phase

    @property
    def batch(self) -> int:
        return self.request.batch

    @property
    def seq_len(self) -> int:
        """New tokens per sequence."""
        return self.request.new_tokens

    @property
    def kv_len(self) -> int:
        return self.request.kv_len

    @property
    def kernels(self) -> str:
        return self.request.kernels

    @property
    def tokens(self) -> int:
        """Tokens processed: ``batch x seq_len``."""
        return self.batch * self.seq_len

    @property
    def schedule(self) -> KernelSchedule | None:
        """The kernels of the chosen mode (None without hardware)."""
        return None if self.schedules is None else self.schedules[self.kernels]

    # Former names (before docs/glossary.md's vocabulary), kept for scripts written against them.

    @property
    def plans(self) -> Mapping[str, KernelSchedule] | None:
        """Former name of :attr:`schedules`."""
        return self.schedules


def peak_activations(per_call: Sequence[tuple[OpCall, Traffic | None]], itemsize: Any) -> int:
    """The most bytes of activations alive at once: a tensor lives from the call that writes it
    to the last call that touches it; parameters and the cache (named tensors) are not counted,
    views add nothing (they write nothing)."""
    last: dict[int, int] = {}
    specs: dict[int, TensorSpec] = {}
    for i, (_, t) in enumerate(per_call):
        for a in (*t.read, *t.write) if t is not None else ():
            s = a.tensor
            if s is not None and s.param is None and s.id is not None:
                last[s.id] = i
                specs.setdefault(s.id, s)
    ends: dict[int, list[int]] = defaultdict(list)
    for uid, i in last.items():
        ends[i].append(uid)
    born: set[int] = set()
    live = peak = 0
    for i, (_, t) in enumerate(per_call):
        for a in t.write if t is not None else ():
            s = a.tensor
            if s is not None and s.param is None and s.id is not None and s.id not in born:
                born.add(s.id)
                live += _bytes(s, itemsize)
        peak = max(peak, live)
        for uid in ends.get(i, ()):
            if uid in born:
                live -= _bytes(specs[uid], itemsize)
    return peak


def _bytes(spec: TensorSpec, itemsize: Any) -> int:
    size = itemsize(spec)
    return math.ceil(spec.numel * (size if size is not None else spec.itemsize))  # whole bytes


class GenerationFigures:
    """A generation's figures from its prefill and decode steps, whether traced
    (:class:`.generation.GenerationCost`) or rebuilt from a fit
    (:class:`~opcount.llm.sweep.figures.GenerationValues`): what a deployment reads of either."""

    prefill: Any
    first_step: Any
    last_step: Any
    fullest_step: Any
    gen_len: int
    decode_time: float | None
    decode_time_bound: float | None

    @property
    def memory(self) -> Memory:
        """The most the generation holds: the cache at its last step (prompt + generated tokens),
        the larger activation working set of prefill and decode."""
        last = self.last_step or self.prefill
        fullest = self.fullest_step or last
        return Memory(
            self.prefill.memory.weights,
            fullest.memory.kv_cache,
            max(self.prefill.memory.activations, last.memory.activations),
            fullest.memory.kv_cache_by_type,
        )

    @property
    def time(self) -> float | None:
        prefill: float | None = self.prefill.time
        return None if prefill is None or self.decode_time is None else prefill + self.decode_time

    @property
    def time_bound(self) -> float | None:
        prefill: float | None = self.prefill.time_bound
        return None if prefill is None or self.decode_time_bound is None else prefill + self.decode_time_bound

    @property
    def time_to_first_token(self) -> float | None:
        value: float | None = self.prefill.time
        return value

    @property
    def time_to_first_token_bound(self) -> float | None:
        value: float | None = self.prefill.time_bound
        return value

    @property
    def time_per_output_token(self) -> float | None:
        return None if self.decode_time is None or not self.gen_len else self.decode_time / self.gen_len

    @property
    def time_per_output_token_bound(self) -> float | None:
        d = self.decode_time_bound
        return None if d is None or not self.gen_len else d / self.gen_len

    @property
    def tokens_per_s(self) -> float | None:
        """Generated tokens per second in the decode phase, over the whole batch."""
        tpot = self.time_per_output_token
        return None if not tpot else self.prefill.batch / tpot

    @property
    def tokens_per_s_bound(self) -> float | None:
        tpot = self.time_per_output_token_bound
        return None if not tpot else self.prefill.batch / tpot
