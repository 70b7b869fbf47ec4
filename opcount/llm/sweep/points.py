"""Many points of an LLM phase or generation at the cost of a few traces.

The records of a phase are fitted once per region as polynomials in batch, tokens and cache
length (:mod:`.symbolic`) and checked against one more trace. A point's FLOPs and activation
peak are then those of its records as the fit gives them, computed by the same analyses as a
traced phase (:class:`~opcount.analysis.FlopCountAnalysis`, run once on the distinct records of
all points together: the layers of a decoder repeat one another's, most records depend on the
batch alone). Its two
times, the kernels' estimate and the speed of light, come from the same distinct records priced as
a traced phase prices its calls, summed into kernels grouped once per region
(:mod:`.prices`).
The other traces of a fit keep their records only (nothing rolled up per module); the first point
of each region is analyzed in full and its figures must equal the fitted ones. Where a fit is
refused, the region's points are traced one by one and the reason is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..._runtime import gc_paused
from ...analysis import FlopCountAnalysis
from ...handles.memory import Traffic
from ...hardware.lookup import Hardware
from ...ir import OpCall, Spec, TensorSpec
from ...memory import MemoryTrafficAnalysis
from ...tracing import Trace
from ..cache.names import CACHE_NAMES
from ..cache.specs import CHUNKED, SLIDING
from ..causal_lm import CausalLM
from ..generation import sum_decode_runs
from ..moe.experts import config_top_k, expert_count
from ..phases import Memory, PhaseCost, PhaseRequest, resolved
from .figures import GenerationValues, PhaseValues
from .prices import region_schedules
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
    monomials,
    rebuild,
    region,
    verify,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Run:
    """A sweep of ``request`` (its phase, hardware, FLOP convention and kernels) over ``llm``'s points."""

    llm: CausalLM
    request: PhaseRequest

    def trace(self, point: Point) -> PhaseCost:
        """The phase at ``point``, traced and analyzed."""
        return self.llm.cost(self.request.at(*point))

    def records(self, point: Point) -> Trace:
        """The phase's records at ``point``, nothing rolled up (what a fit needs)."""
        return self.llm.records(self.request.at(*point)).trace()


def structure_of(llm: CausalLM) -> Structure:
    """The windows, chunks and expert blocks that cut ``llm``'s points into regions (:func:`.symbolic.region`)."""
    config = llm.config
    windows_by_layer = llm.caches.windows().values()
    windows = {w for layer_type, w in windows_by_layer if layer_type == SLIDING}
    chunks = {w for layer_type, w in windows_by_layer if layer_type == CHUNKED}
    # DSA's top-k caps attention as a window does: dense up to topk - 1 cached tokens, capped from topk
    windows |= {w for layer in llm.caches.layers if layer.topk for w in (layer.topk - 1, layer.topk)}
    for key in ("sliding_window", "attention_chunk_size"):  # as the config says them too, used or not
        w = getattr(config, key, None)
        if isinstance(w, int) and not isinstance(w, bool) and w > 0:
            (chunks if key == "attention_chunk_size" else windows).add(w)
    experts = {e.regions for e in llm.experts}
    # and as the config names them, whatever module runs the experts: the loads are integer-divided all the same
    top_k, count = config_top_k(config), expert_count(config)
    if top_k is not None and top_k > 0 and count > 0:
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
    kernels: str = "fused",
) -> list[PhaseValues]:
    """The figures of ``phase`` at each ``(batch, seq_len, kv_len)`` point: equal to
    ``PhaseValues.of(llm.phase(...))`` at each, from a few traces per region."""
    request = PhaseRequest(
        phase=phase, hardware=resolved(hardware), flops_per_mac=flops_per_mac, preset=preset, kernels=kernels
    )
    return points_of(llm, request, points)


def points_of(llm: CausalLM, request: PhaseRequest, points: Sequence[Point]) -> list[PhaseValues]:
    """:func:`phase_points` asked as one request: its phase, hardware, FLOP convention and kernels at
    each point (its own batch and lengths are not read)."""
    for point in points:
        llm.check_phase(request.at(*point))
    run = _Run(llm, request)
    structure = structure_of(llm)
    groups: dict[Any, list[Point]] = {}
    for p in dict.fromkeys(points):
        groups.setdefault(region(structure, p), []).append(p)
    found: dict[Point, PhaseValues] = {}
    with gc_paused():  # fitting and pricing make many small objects, none cyclic garbage: as a trace does
        for group in groups.values():
            found.update(_region(run, group))
    return [found[p] for p in points]


def _region(run: _Run, points: list[Point]) -> dict[Point, PhaseValues]:
    first = run.trace(points[0])  # analyzed in full: its figures check the fit's, its analysis names the inputs
    traced: dict[Point, Trace] = {points[0]: first.flops.trace()}

    def trace(p: Point) -> Trace:
        if p not in traced:
            traced[p] = run.records(p)
        return traced[p]

    try:
        fitted = _fit(points, trace)
        if fitted is not None:
            return _evaluate(run, fitted[0], points, first, fitted[1])
    except FitError as e:
        logger.info("%s: tracing each of %d points instead of fitting them: %s", run.request.phase, len(points), e)
    return {p: PhaseValues.of(first if p == points[0] else run.trace(p)) for p in points}


def _fit(points: list[Point], trace: Callable[[Point], Trace]) -> tuple[Template, Trace] | None:
    """The region's template and the trace it was checked against; None when tracing every point
    costs no more."""
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
            return template, trace(check)
        except FitError:
            if multilinear or len(swept) < 2:
                raise
            multilinear = True  # a product of two variables (batch x tokens): fit the corners


# ------------------------------------------------------------------------------------------------
# The figures of rebuilt points
# ------------------------------------------------------------------------------------------------
def _key(call: OpCall, structure: Any, polys: list[Poly], pricing: Callable[[TensorSpec], float | None]) -> Any:
    """What decides a record's costs: its structure (:func:`.symbolic.flatten`'s) and sizes, without
    the names a layer differs by."""
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


def _evaluate(
    run: _Run, template: Template, points: list[Point], first: PhaseCost, check: Trace
) -> dict[Point, PhaseValues]:
    """The figures at every point of a region; the first, traced in full, checks them."""
    llm, request = run.llm, run.request
    pricing = llm.pricing
    index: dict[Any, int] = {}
    chains = set(llm.indexers)  # a DSA indexer's products are priced by their kept pairs: apart from others
    which = [
        index.setdefault((_key(c, st, ps, pricing), c.scope[-1] in chains), len(index))
        for c, st, ps in zip(template.calls, template.structures, template.polys, strict=True)
    ]
    unique = [0] * len(index)
    for r, u in reversed(list(enumerate(which))):
        unique[u] = r  # the first record of each kind, so the first parameter read stays first
    counts = np.bincount(np.array(which), minlength=len(unique))
    calls, at = _distinct_calls(template, unique, points)
    trace = Trace(template.trace.tree, tuple(calls), template.trace.called, (), "dispatch", template.trace.mode)
    flops = FlopCountAnalysis(trace, flops_per_mac=request.flops_per_mac, preset=request.preset)
    flops.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    per_call = [0 if v is None else sum(v.values()) for _, v in flops.per_call()]
    if any(type(x) is not int for x in per_call):
        raise FitError("an operator's FLOPs are not a whole number")
    values = np.array(per_call, dtype=object)
    # Python integers (exact whatever their size), each distinct record's count times its FLOPs
    totals = [int(x) for x in sum((int(c) * values[at[u]] for u, c in enumerate(counts)), np.zeros(len(points), int))]
    traffic = MemoryTrafficAnalysis(template.trace, named_views=CACHE_NAMES)
    traffic.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    moved = [t for _, t in traffic.traffic_per_call()]
    schedules = None
    if request.hardware is not None:
        schedules = region_schedules(
            template.trace, moved, check, trace, which, at, hardware=request.hardware, mode=request.kernels,
            dtype=llm.precision.act, itemsize=pricing, moe_blocks=first.moe_blocks, chains=llm.indexers,
            named=CACHE_NAMES,
        )  # fmt: skip
    activations = _activations(llm, template, points, moved)
    out: dict[Point, PhaseValues] = {}
    for k, p in enumerate(points):
        batch, tokens, cache = p
        by_type = llm.kv_bytes_by_type(cache, tokens, batch)
        memory = Memory(llm.weights.total, sum(by_type.values()), activations[k], by_type)
        out[p] = PhaseValues(
            phase=request.phase, batch=batch, seq_len=tokens, kv_len=cache, precision=llm.precision,
            flops=totals[k], flops_per_mac=request.flops_per_mac, memory=memory, hardware=request.hardware,
            traced=False, schedule=None if schedules is None else schedules[k],
        )  # fmt: skip
    got, want = out[points[0]], PhaseValues.of(first)
    figures = [(x.flops, x.memory, x.time, x.time_bound, x.limited_by) for x in (got, want)]
    if figures[0] != figures[1]:
        raise FitError(f"the rebuilt records' costs at {points[0]} differ from its trace's: {figures}")
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


def _activations(
    llm: CausalLM, template: Template, points: list[Point], traffic: Sequence[Traffic | None]
) -> list[int]:
    """Each point's peak of activations alive at once, as :func:`~opcount.llm.phases.peak_activations`
    walks a traced phase (``traffic``: the template's): the same births and deaths, the sizes of each point."""
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
        size = llm.pricing(s)
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
    kernels: str = "fused",
) -> list[GenerationValues]:
    """:func:`~opcount.llm.generation.generation` at each ``(batch, prompt_len, gen_len)`` point: the
    prefills are one sweep of points, the first and last decode steps of each affine run another."""
    request = PhaseRequest(hardware=resolved(hardware), flops_per_mac=flops_per_mac, preset=preset, kernels=kernels)
    return generations_of(llm, request, points)


def generations_of(
    llm: CausalLM, request: PhaseRequest, points: Sequence[tuple[int, int, int]]
) -> list[GenerationValues]:
    """:func:`generation_points` asked as one request: its hardware, FLOP convention and kernels at
    each ``(batch, prompt_len, gen_len)`` point (its phase, batch and lengths are not read)."""
    for batch, prompt, gen in points:  # what generation() refuses, in its order, before any trace
        llm.check_generation(prompt, gen, batch=batch)
    prefills = points_of(llm, replace(request, phase="prefill"), [(b, prompt, 0) for b, prompt, _ in points])
    # the runs of steps over which every cost is affine in the cache length (generation()'s): two steps a run
    runs = [llm.caches.affine_steps(prompt, gen) if gen else [] for _, prompt, gen in points]
    steps = sorted({(b, 1, prompt + j) for (b, prompt, _), rs in zip(points, runs, strict=True) for r in rs for j in r})
    found = dict(zip(steps, points_of(llm, replace(request, phase="decode"), steps), strict=True))
    zero = 0.0 if request.hardware is not None else None
    out = []
    for (batch, prompt, gen), prefill, rs in zip(points, prefills, runs, strict=True):
        if gen == 0:
            empty = GenerationValues(
                prefill=prefill, first_step=None, last_step=None, gen_len=0, decode_flops=0.0, decode_time=zero,
                fullest_step=None, decode_time_bound=zero,
            )  # fmt: skip
            out.append(empty)
            continue
        at_offset = {j: found[(batch, 1, prompt + j)] for r in rs for j in r}  # the runs' traced steps
        summed = sum_decode_runs(rs, at_offset.__getitem__, lambda step: step.flops, zero is not None)
        whole = GenerationValues(
            prefill=prefill, first_step=summed.first_step, last_step=summed.last_step, gen_len=gen,
            decode_flops=summed.flops, decode_time=summed.time, fullest_step=summed.fullest_step,
            decode_time_bound=summed.time_bound,
        )  # fmt: skip
        out.append(whole)
    return out
