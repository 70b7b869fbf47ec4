"""Many points of an LLM phase or generation at the cost of a few traces.

The records of a phase are fitted once per region as polynomials in batch, tokens and cache
length (:mod:`.symbolic`), checked against one more trace, and rebuilt at every other point.
A point's FLOPs, bytes, roofline time and activation peak are then those of its rebuilt records,
computed by the same analyses as a traced phase (:class:`~opcount.analysis.FlopCountAnalysis`,
:class:`~opcount.memory.MemoryTrafficAnalysis`, :func:`~opcount.roofline.roofline`), run once on
the records that differ (the layers of a decoder repeat one another's) for all points together.
The other traces of a fit keep their records only (nothing rolled up per module); the first point
of each region is analyzed in full and its figures must equal the rebuilt ones. Where a fit is
refused, the region's points are traced one by one and the reason is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analysis import FlopCountAnalysis
from ..hardware.lookup import Hardware
from ..hardware.lookup import hardware as lookup_hardware
from ..ir import OpCall, Spec, TensorSpec
from ..memory import MemoryTrafficAnalysis
from ..roofline import roofline
from ..tracing import Trace
from .cache import CHUNKED, SLIDING
from .model import text_config
from .moe import find_experts
from .phases import CausalLM, GenerationCost, Memory, PhaseCost, affine_sum
from .precision import Precision
from .symbolic import (
    FitError,
    Point,
    Poly,
    Structure,
    Template,
    affine_design,
    check_point,
    corner_design,
    fit,
    flatten,
    monomials,
    rebuild,
    region,
    verify,
)

logger = logging.getLogger(__name__)
Layers = tuple[np.ndarray, np.ndarray, np.ndarray]  # each layer's peak FLOP/s, flops, bytes


@dataclass(frozen=True)
class PhasePoint:
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
    time: float | None
    bound: str | None
    traced: bool
    layers: Layers | None = field(default=None, repr=False, compare=False)
    cost: PhaseCost | None = field(default=None, repr=False, compare=False)  # the traced phase, if traced

    @property
    def tokens(self) -> int:
        return self.batch * self.seq_len

    @property
    def tokens_per_s(self) -> float | None:
        time = self.time
        return None if not time else self.tokens / time

    @classmethod
    def of(cls, cost: PhaseCost) -> PhasePoint:
        """The figures of a traced phase."""
        r = cost.roofline
        layers = None
        if r is not None:
            layers = (
                np.array([t.peak for t in r.layers], dtype=np.float64),
                np.array([t.layer.flops for t in r.layers], dtype=np.float64),
                np.array([t.layer.bytes for t in r.layers], dtype=np.float64),
            )
        hw = None if r is None else r.hardware
        return cls(
            cost.phase, cost.batch, cost.seq_len, cost.kv_len, cost.precision, cost.flops.total(),
            cost.flops.flops_per_mac, cost.memory, hw, cost.time, cost.bound, True, layers, cost,
        )  # fmt: skip


@dataclass(frozen=True)
class GenerationPoint:
    """A generation's figures (see :class:`~opcount.llm.phases.GenerationCost`) from its phases' points."""

    prefill: PhasePoint
    first_step: PhasePoint | None
    last_step: PhasePoint | None
    gen_len: int
    decode_flops: float
    decode_time: float | None
    fullest_step: PhasePoint | None = None  # the step holding the most cache

    @classmethod
    def of(cls, gen: GenerationCost) -> GenerationPoint:
        """The figures of a traced generation."""
        first, last, fullest = (
            None if s is None else PhasePoint.of(s) for s in (gen.first_step, gen.last_step, gen.fullest_step)
        )
        return cls(PhasePoint.of(gen.prefill), first, last, gen.gen_len, gen.decode_flops, gen.decode_time, fullest)

    @property
    def flops(self) -> float:
        return self.prefill.flops + self.decode_flops

    @property
    def memory(self) -> Memory:
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
        if self.prefill.time is None or self.decode_time is None:
            return None
        return self.prefill.time + self.decode_time

    @property
    def time_to_first_token(self) -> float | None:
        return self.prefill.time

    @property
    def time_per_output_token(self) -> float | None:
        if self.decode_time is None or not self.gen_len:
            return None
        return self.decode_time / self.gen_len

    @property
    def tokens_per_s(self) -> float | None:
        tpot = self.time_per_output_token
        return None if not tpot else self.prefill.batch / tpot


@dataclass(frozen=True)
class _Run:
    llm: CausalLM
    phase: str
    hardware: Hardware | None
    flops_per_mac: int
    preset: str

    def trace(self, point: Point) -> PhaseCost:
        """The phase at ``point``, traced and analyzed."""
        batch, tokens, cache = point
        return self.llm.phase(
            self.phase, seq_len=tokens, kv_len=cache, batch=batch, hardware=self.hardware,
            flops_per_mac=self.flops_per_mac, preset=self.preset,
        )  # fmt: skip

    def records(self, point: Point) -> Trace:
        """The phase's records at ``point``, nothing rolled up (what a fit needs)."""
        batch, tokens, cache = point
        return self.llm.records(
            self.phase, seq_len=tokens, kv_len=cache, batch=batch, flops_per_mac=self.flops_per_mac,
            preset=self.preset,
        ).trace()  # fmt: skip


def structure_of(llm: CausalLM) -> Structure:
    """The windows, chunks and expert blocks that cut ``llm``'s points into regions (:func:`.symbolic.region`)."""
    config = text_config(llm.config)
    kinds = llm.caches.windows().values()
    windows = {w for kind, w in kinds if kind == SLIDING}
    chunks = {w for kind, w in kinds if kind == CHUNKED}
    for key in ("sliding_window", "attention_chunk_size"):  # as the config says them too, used or not
        w = getattr(config, key, None)
        if isinstance(w, int) and not isinstance(w, bool) and w > 0:
            (chunks if key == "attention_chunk_size" else windows).add(w)
    experts = {(e.top_k, e.count) for e in find_experts(llm.model, llm.config)}
    # and from the config, whatever module runs the experts: the loads are integer-divided all the same
    top_k = getattr(config, "num_experts_per_tok", None)
    for key in ("num_local_experts", "num_experts", "n_routed_experts"):
        count = getattr(config, key, None)
        if isinstance(top_k, int) and isinstance(count, int) and count > 0 and top_k > 0:
            experts.add((top_k, count))
    return Structure(tuple(sorted(windows)), tuple(sorted(experts)), tuple(sorted(chunks)))


def phase_points(
    llm: CausalLM,
    phase: str,
    points: Sequence[Point],
    *,
    hardware: Hardware | str | None = None,
    flops_per_mac: int = 1,
    preset: str = "default",
) -> list[PhasePoint]:
    """The figures of ``phase`` at each ``(batch, seq_len, kv_len)`` point: equal to
    ``PhasePoint.of(llm.phase(...))`` at each, from a few traces per region."""
    for batch, tokens, cache in points:
        llm.validate(phase, seq_len=tokens, kv_len=cache, batch=batch)
    run = _Run(llm, phase, lookup_hardware(hardware) if hardware is not None else None, flops_per_mac, preset)
    structure = structure_of(llm)
    groups: dict[Any, list[Point]] = {}
    for p in dict.fromkeys(points):
        groups.setdefault(region(structure, p), []).append(p)
    found: dict[Point, PhasePoint] = {}
    for group in groups.values():
        found.update(_region(run, group))
    return [found[p] for p in points]


def _region(run: _Run, points: list[Point]) -> dict[Point, PhasePoint]:
    first = run.trace(points[0])  # analyzed in full: its figures check the fit's, its analysis names the inputs
    traced: dict[Point, Trace] = {points[0]: first.flops.trace()}

    def trace(p: Point) -> Trace:
        if p not in traced:
            traced[p] = run.records(p)
        return traced[p]

    try:
        template = _fit(points, trace)
        if template is not None:
            return _evaluate(run, template, points, first)
    except FitError as e:
        logger.info("%s: tracing each of %d points instead of fitting them: %s", run.phase, len(points), e)
    return {p: PhasePoint.of(first if p == points[0] else run.trace(p)) for p in points}


def _fit(points: list[Point], trace: Callable[[Point], Trace]) -> Template | None:
    """The region's template, checked; None when tracing every point costs no more."""
    swept, design = affine_design(points)
    multilinear = len(swept) >= 3  # a three-way product could cancel at one check point: fit every corner
    while True:
        if multilinear:
            design = corner_design(points, swept)
        if len(points) <= len(design) + 1:
            return None
        template = fit([trace(p) for p in design], design, monomials(swept, multilinear))
        check = check_point(points, design, swept)
        if check is None:
            return None
        try:
            verify(template, trace(check), check)
            return template
        except FitError:
            if multilinear or len(swept) < 2:
                raise
            multilinear = True  # a product of two variables (batch x tokens): fit the corners


# ------------------------------------------------------------------------------------------------
# The figures of rebuilt points
# ------------------------------------------------------------------------------------------------
def _key(call: OpCall, polys: list[Poly], pricing: Callable[[TensorSpec], float | None]) -> Any:
    """What decides a record's costs: its structure and sizes, without the names a layer differs by."""
    structure, _ = flatten(call)
    kind, _, within, inputs, outputs = structure
    tensors = _tensors((*call.inputs, *call.outputs))
    roles = tuple((s.param is None, pricing(s)) for s in tensors)
    # which arguments are the same tensor (an in-place write, x * x) matters; the ids themselves do not
    same: dict[int | None, int] = {}
    for s in tensors:
        same.setdefault(s.id, len(same))

    def strip(parts: Any) -> Any:
        if isinstance(parts, tuple) and parts and parts[0] == "T":
            return ("T", parts[1], parts[2], same[parts[4]])
        if isinstance(parts, tuple):
            return tuple(strip(p) for p in parts)
        return parts

    return kind, within, strip(inputs), strip(outputs), roles, tuple(polys)


def _tensors(specs: Sequence[Spec]) -> list[TensorSpec]:
    out: list[TensorSpec] = []
    for s in specs:
        if isinstance(s, TensorSpec):
            out.append(s)
        elif hasattr(s, "items"):
            out.extend(_tensors(s.items))
    return out


def _evaluate(run: _Run, template: Template, points: list[Point], first: PhaseCost) -> dict[Point, PhasePoint]:
    """The figures at every point of a region; the first, traced in full, checks them."""
    llm = run.llm
    pricing = llm._pricing
    index: dict[Any, int] = {}
    which = [
        index.setdefault(_key(c, ps, pricing), len(index)) for c, ps in zip(template.calls, template.polys, strict=True)
    ]
    unique = [0] * len(index)
    for r, u in reversed(list(enumerate(which))):
        unique[u] = r  # the first record of each kind, so the first parameter read stays first
    counts = np.bincount(np.array(which), minlength=len(unique))
    calls, at = _distinct_calls(template, unique, points)
    trace = Trace(template.trace.tree, tuple(calls), template.trace.called, (), "dispatch", template.trace.mode)
    flops = FlopCountAnalysis(trace, flops_per_mac=run.flops_per_mac, preset=run.preset)
    flops.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    per_call = [0 if v is None else sum(v.values()) for _, v in flops.per_call()]
    if any(type(x) is not int for x in per_call):
        raise FitError("an operator's FLOPs are not a whole number")
    values = np.array(per_call, dtype=object)
    # Python integers (exact whatever their size), each distinct record's count times its FLOPs
    totals = [int(x) for x in sum((int(c) * values[at[u]] for u, c in enumerate(counts)), np.zeros(len(points), int))]
    times = _times(run, trace, which, at, len(points)) if run.hardware is not None else None
    activations = _activations(llm, template, points)
    out: dict[Point, PhasePoint] = {}
    for k, p in enumerate(points):
        batch, tokens, cache = p
        by_type = llm.kv_bytes_by_type(cache, tokens, batch)
        memory = Memory(llm._weights, sum(by_type.values()), activations[k], by_type)
        time = bound = layers = None
        if times is not None:
            time, bound, layers = times[k]
        out[p] = PhasePoint(
            run.phase, batch, tokens, cache, llm.precision, totals[k], run.flops_per_mac, memory, run.hardware,
            time, bound, False, layers,
        )  # fmt: skip
    got, want = out[points[0]], PhasePoint.of(first)
    if (got.flops, got.memory, got.time, got.bound) != (want.flops, want.memory, want.time, want.bound):
        raise FitError(f"the rebuilt records' costs at {points[0]} differ from its trace's")
    out[points[0]] = want  # the same figures, with the analysis an export's metadata describes
    return out


def _distinct_calls(template: Template, unique: list[int], points: list[Point]) -> tuple[list[OpCall], np.ndarray]:
    """The distinct records of every unique record at every point (most depend on the batch only), and
    for each unique record and point the index of its record among them."""
    grid = np.array(points, dtype=np.int64)
    calls: list[OpCall] = []
    at = np.zeros((len(unique), len(points)), dtype=np.int64)
    for u, r in enumerate(unique):
        polys = template.polys[r]
        if not polys:
            at[u] = len(calls)
            calls.append(template.calls[r])
            continue
        ints = np.stack([p.over(grid) for p in polys], axis=1)  # points x integers
        distinct, inverse = np.unique(ints, axis=0, return_inverse=True)
        at[u] = len(calls) + inverse.reshape(-1)
        calls.extend(rebuild(template.calls[r], row) for row in distinct.tolist())
    return calls, at


def _times(run: _Run, trace: Trace, which: list[int], at: np.ndarray, n_points: int) -> list[tuple[float, str, Layers]]:
    """Each point's roofline time, bound and layers, summed in the order a traced phase sums them."""
    llm = run.llm
    memory = MemoryTrafficAnalysis(trace)
    memory.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    report = roofline(memory, hardware=run.hardware, dtype=llm.precision.act, itemsize=llm._pricing)
    index = {id(c): i for i, c in enumerate(trace.calls)}
    of_call: list[list[Any]] = [[] for _ in trace.calls]
    for t in report.layers:
        of_call[index[id(t.layer.call)]].append(t)
    figures = np.array(
        [
            [(t.effective_time, t.time, t.compute_time >= t.memory_time, t.peak, t.layer.flops, t.layer.bytes)
             for t in ts] + [(0.0,) * 6] * (2 - len(ts))
            for ts in of_call
        ],
        dtype=np.float64,
    )  # calls x 2 layers at most (a convolution's bias gradient) x 6 figures  # fmt: skip
    widths = np.array([len(ts) for ts in of_call])
    columns: list[np.ndarray] = []  # each unique record's layers: (unique record, layer) -> its figures at every point
    starts = [0]
    for u in range(len(at)):
        width = set(widths[at[u]].tolist())
        if len(width) != 1:
            raise FitError("an operator makes roofline layers at some points and not at others")
        n = width.pop()
        columns.extend(figures[at[u], m] for m in range(n))  # points x 6
        starts.append(starts[-1] + n)
    order = np.array([s for u in which for s in range(starts[u], starts[u + 1])], dtype=np.int64)
    grid = np.stack(columns, axis=1) if columns else np.zeros((n_points, 0, 6))  # points x layers x 6
    effective, time, compute, peak, flops, nbytes = (grid[:, :, i] for i in range(6))
    bound_c = np.zeros(n_points)
    bound_m = np.zeros(n_points)
    for s in order:  # in sequence, as a traced phase's summary adds them
        bound_c += np.where(compute[:, s] == 1, time[:, s], 0.0)
        bound_m += np.where(compute[:, s] == 1, 0.0, time[:, s])
    out = []
    for k in range(n_points):
        total = sum(effective[k, order].tolist())
        bound = "" if not len(order) else ("compute" if bound_c[k] >= bound_m[k] else "memory")
        out.append((total, bound, (peak[k, order], flops[k, order], nbytes[k, order])))
    return out


def _activations(llm: CausalLM, template: Template, points: list[Point]) -> list[int]:
    """Each point's peak of activations alive at once, as :func:`~opcount.llm.phases.peak_activations`
    walks a traced phase: the same births and deaths, the sizes of each point."""
    memory = MemoryTrafficAnalysis(template.trace)
    memory.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    traffic = [t for _, t in memory.traffic_per_call()]
    shapes = template.tensor_shapes()
    last: dict[int, int] = {}
    specs: dict[int, TensorSpec] = {}
    for i, t in enumerate(traffic):
        for a in (*t.read, *t.write) if t is not None else ():
            s = a.tensor
            if s is not None and s.param is None and s.id is not None:
                last[s.id] = i
                specs.setdefault(s.id, s)
    grid = np.array(points, dtype=np.int64)
    sizes: dict[int, np.ndarray] = {}
    for uid, s in specs.items():
        known = shapes.get(uid)
        if known is None or known[0].shape != s.shape:
            raise FitError(f"tensor {uid} is read or written at a size no record gives it")
        numel = np.ones(len(points), dtype=np.int64)
        for poly in known[1]:
            numel = numel * poly.over(grid)
        size = llm._pricing(s)
        sizes[uid] = np.ceil(numel * (size if size is not None else s.itemsize)).astype(np.int64)
    ends: dict[int, list[int]] = {}
    for uid, i in last.items():
        ends.setdefault(i, []).append(uid)
    born: set[int] = set()
    live = np.zeros(len(points), dtype=np.int64)
    peak = np.zeros(len(points), dtype=np.int64)
    for i, t in enumerate(traffic):
        grew = False
        for a in t.write if t is not None else ():
            s = a.tensor
            if s is not None and s.param is None and s.id is not None and s.id not in born:
                born.add(s.id)
                live = live + sizes[s.id]
                grew = True
        if grew:
            peak = np.maximum(peak, live)
        for uid in ends.get(i, ()):
            if uid in born:
                live = live - sizes[uid]
    return [int(x) for x in peak]


def generation_points(
    llm: CausalLM,
    points: Sequence[tuple[int, int, int]],
    *,
    hardware: Hardware | str | None = None,
    flops_per_mac: int = 1,
    preset: str = "default",
) -> list[GenerationPoint]:
    """:func:`~opcount.llm.phases.generation` at each ``(batch, prompt_len, gen_len)`` point: the
    prefills are one sweep of points, the first and last decode steps another."""
    for batch, prompt, gen in points:  # what generation() refuses, in its order, before any trace
        llm.validate_generation(prompt, gen, batch=batch)
    common: dict[str, Any] = {"hardware": hardware, "flops_per_mac": flops_per_mac, "preset": preset}
    prefills = phase_points(llm, "prefill", [(b, prompt, 0) for b, prompt, _ in points], **common)
    # the runs of steps over which every cost is affine in the cache length (generation()'s): two steps a run
    runs = [llm.caches.affine_steps(prompt, gen) if gen else [] for _, prompt, gen in points]
    steps = sorted({(b, 1, prompt + j) for (b, prompt, _), rs in zip(points, runs, strict=True) for r in rs for j in r})
    found = dict(zip(steps, phase_points(llm, "decode", steps, **common), strict=True))
    out = []
    for (batch, prompt, gen), prefill, rs in zip(points, prefills, runs, strict=True):
        if gen == 0:
            out.append(GenerationPoint(prefill, None, None, 0, 0.0, 0.0 if hardware is not None else None))
            continue
        flops, time = 0.0, 0.0 if hardware is not None else None
        traced: list[PhasePoint] = []
        opening = None
        for a, b in rs:
            first = found[(batch, 1, prompt + a)]
            last = first if a == b else found[(batch, 1, prompt + b)]
            traced.append(last)
            flops += (first.flops + last.flops) * (b - a + 1) / 2
            if time is not None and first.layers is not None and last.layers is not None and first.hardware:
                if len(first.layers[0]) != len(last.layers[0]):
                    raise FitError("internal error: decode steps at two cache lengths ran different operators")
                steps_in_run = b - a + 1
                if steps_in_run == 1:
                    time += first.time or 0.0
                else:
                    time += affine_sum(first.layers, last.layers, first.hardware.bandwidth, steps_in_run)
            if a == 0:
                opening = first
        fullest = max(traced, key=lambda p: p.memory.kv_cache)
        out.append(GenerationPoint(prefill, opening, traced[-1], gen, flops, time, fullest))
    return out
