"""The roofline's results: layers, their times and the report that rolls them up.

A :class:`Layer` is one AMAIX task (an operator call's flops and the bytes it moves, on one
compute unit); a :class:`LayerTime` its roofline, ``time = max(flops / peak, bytes / bandwidth)``
(the AMAIX paper); a :class:`Summary` layers rolled up by operator or module; a
:class:`RooflineReport` all of them, with the tables and the summary line. Pure: no tracing, no
hardware model (:mod:`opcount.roofline.model` computes the times).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import OpcountValueError
from ..hardware.lookup import VECTOR, Hardware
from ..ir import OpCall
from ..report.rows import check_max_depth
from ..rollup import grouped
from ..units import seconds, si, size, unprefixed

BOUNDS = ("compute", "memory")


@dataclass(frozen=True)
class Layer:
    """One roofline task: ``flops`` (2 per multiply-add) and the bytes it moves, on one unit.

    ``precision`` is the key of the unit's peak table (a dtype name, or ``"tf32"``).
    ``owners`` are the modules it belongs to, root (``""``) first; pipeline groups and module
    rows select layers by them. ``call`` is the operator call it came from, if any.
    """

    name: str
    flops: float
    ifmap_bytes: float = 0.0
    weight_bytes: float = 0.0
    ofmap_bytes: float = 0.0
    unit: str = VECTOR
    precision: str = "float32"
    op: str = ""
    owners: tuple[str, ...] = ()
    call: OpCall | None = field(default=None, compare=False, repr=False)

    @property
    def bytes(self) -> float:
        return self.ifmap_bytes + self.weight_bytes + self.ofmap_bytes

    @property
    def module(self) -> str:
        return self.owners[-1] if self.owners else ""


@dataclass(frozen=True)
class LayerTime:
    """A layer's roofline: ``time = max(compute_time, memory_time)``; ``effective_time`` is what it
    adds to the model total (0 for a pipelined layer hidden behind its group's dominant member)."""

    layer: Layer
    peak: float
    compute_time: float
    memory_time: float
    effective_time: float
    group: int | None = None

    @property
    def time(self) -> float:
        return max(self.compute_time, self.memory_time)

    @property
    def limited_by(self) -> str:
        return "compute" if self.compute_time >= self.memory_time else "memory"

    @property
    def intensity(self) -> float:
        """FLOPs per byte (inf when no bytes move)."""
        return _ratio(self.layer.flops, self.layer.bytes)

    @property
    def throughput(self) -> float:
        """Attainable FLOP/s: flops / time (the layer's point on the roofline chart)."""
        return _ratio(self.layer.flops, self.time, zero=0.0)

    # The layer's own figures, readable on the LayerTime too (``lt.flops`` as ``lt.layer.flops``).
    @property
    def flops(self) -> float:
        return self.layer.flops

    @property
    def ifmap_bytes(self) -> float:
        return self.layer.ifmap_bytes

    @property
    def weight_bytes(self) -> float:
        return self.layer.weight_bytes

    @property
    def ofmap_bytes(self) -> float:
        return self.layer.ofmap_bytes

    @property
    def unit(self) -> str:
        return self.layer.unit

    @property
    def precision(self) -> str:
        return self.layer.precision


@dataclass(frozen=True)
class Summary:
    """Layers rolled up (an operator, a module, the model).

    ``time`` sums effective times (pipelining applied); ``compute_time`` and ``memory_time`` sum the
    layers' own terms. ``bound`` is the bound of the layers holding most of the own time;
    ``units`` the units used, most time first.
    """

    name: str
    calls: int
    flops: float
    bytes: float
    time: float
    compute_time: float
    memory_time: float
    compute_limited_time: float
    memory_limited_time: float
    units: tuple[str, ...]

    @property
    def intensity(self) -> float:
        return _ratio(self.flops, self.bytes)

    @property
    def throughput(self) -> float:
        return _ratio(self.flops, self.time, zero=0.0)

    @property
    def limited_by(self) -> str:
        if self.calls == 0:
            return ""
        return "compute" if self.compute_limited_time >= self.memory_limited_time else "memory"


def _ratio(a: float, b: float, zero: float = math.nan) -> float:
    if b > 0:
        return a / b
    return math.inf if a > 0 else zero


def _by_op(layers: Iterable[LayerTime]) -> dict[str, list[LayerTime]]:
    ops: dict[str, list[LayerTime]] = {}
    for t in layers:
        ops.setdefault(t.layer.op, []).append(t)
    return ops


def _summarize(name: str, times: Iterable[LayerTime]) -> Summary:
    calls = 0
    flops = nbytes = time = ct = mt = cb = mb = 0.0
    per_unit: dict[str, float] = {}
    for t in times:
        calls += 1
        flops += t.layer.flops
        nbytes += t.layer.bytes
        time += t.effective_time
        ct += t.compute_time
        mt += t.memory_time
        if t.limited_by == "compute":
            cb += t.time
        else:
            mb += t.time
        per_unit[t.layer.unit] = per_unit.get(t.layer.unit, 0.0) + t.time
    units = tuple(u for u, _ in sorted(per_unit.items(), key=lambda kv: -kv[1]))
    return Summary(name, calls, flops, nbytes, time, ct, mt, cb, mb, units)


class RooflineReport:
    """Speed-of-light times of every layer, rolled up by operator and module.

    ``layers``: one :class:`LayerTime` per operator call that does work or moves bytes, in
    execution order. ``total_time`` is the model's time (sum of effective times, seconds).
    ``unsupported``: operators lacking a flop or a memory formula (the missing part counted as 0).
    """

    def __init__(
        self,
        hardware: Hardware,
        dtype: str,
        layers: Sequence[LayerTime],
        groups: Sequence[tuple[str, ...]] = (),
        unsupported: Mapping[str, int] | None = None,
        fused: Sequence[tuple[str, ...]] | bool = False,
    ) -> None:
        self.hardware = hardware
        self.dtype = dtype
        self.layers: tuple[LayerTime, ...] = tuple(layers)
        self.pipeline: tuple[tuple[str, ...], ...] = tuple(groups)
        self.fused = fused
        self.unsupported: Counter[str] = Counter(unsupported or {})
        self.uncalled: frozenset[str] = frozenset()
        self._modules: dict[str, Summary] | None = None

    # ----- totals --------------------------------------------------------------------------
    @property
    def total_time(self) -> float:
        return sum(t.effective_time for t in self.layers)

    @property
    def total_flops(self) -> float:
        return sum(t.layer.flops for t in self.layers)

    @property
    def total_bytes(self) -> float:
        return sum(t.layer.bytes for t in self.layers)

    def total(self) -> Summary:
        return _summarize("", self.layers)

    def cycles(self, seconds: float) -> float | None:
        """``seconds`` in clock cycles of the hardware (None when it has no clock)."""
        return None if self.hardware.clock_hz is None else seconds * self.hardware.clock_hz

    # ----- roll-ups ------------------------------------------------------------------------
    def by_operator(self) -> dict[str, Summary]:
        """One row per operator key (``conv``, ``addmm``, ...), most time first."""
        rows = [_summarize(op, ts) for op, ts in _by_op(self.layers).items()]
        return {r.name: r for r in sorted(rows, key=lambda r: -r.time)}

    def by_module(self) -> dict[str, Summary]:
        """One row per module that holds layers (the model is ``""``), in first-call order (a new dict)."""
        return dict(self._module_rows())

    def _module_rows(self) -> dict[str, Summary]:
        """The rows of :meth:`by_module`, built once; handed out only as copies."""
        if self._modules is None:
            groups = grouped((t.layer.owners, t) for t in self.layers)
            self._modules = {name: _summarize(name, ts) for name, ts in groups.items()}
        return self._modules

    def by_module_and_operator(self) -> dict[str, dict[str, Summary]]:
        """Module -> operator -> row, for every module that holds layers."""
        groups = grouped((t.layer.owners, t) for t in self.layers)
        return {m: {op: _summarize(op, ops) for op, ops in _by_op(ts).items()} for m, ts in groups.items()}

    # The analyses' protocol, so report tables can show roofline columns next to theirs.
    def uncalled_modules(self) -> set[str]:
        return set(self.uncalled)

    def unsupported_ops(self, module_name: str = "") -> Counter[str]:
        """Operators lacking a flop or a memory formula (model-wide; the missing part counted as 0)."""
        return Counter(self.unsupported)

    def module(self, name: str = "") -> Summary:
        """The row of one module (an empty row if it holds no layer)."""
        return self._module_rows().get(name) or _summarize(name, ())

    def leaf_modules(self) -> dict[str, Summary]:
        """Rows of the innermost modules that ran layers (where the time is spent)."""
        leaves: dict[str, list[LayerTime]] = {}
        for t in self.layers:
            leaves.setdefault(t.layer.module, []).append(t)
        return {name: _summarize(name, ts) for name, ts in leaves.items()}

    def top(self, n: int = 10, by: str = "module") -> list[Summary]:
        """The ``n`` rows taking the most time: innermost modules (``by="module"``) or operators."""
        rows = self.leaf_modules() if by == "module" else self.by_operator() if by == "operator" else None
        if rows is None:
            raise OpcountValueError(f"by must be 'module' or 'operator', got {by!r}")
        return sorted(rows.values(), key=lambda r: -r.time)[:n]

    # ----- text ----------------------------------------------------------------------------
    def modules(self, max_depth: int | None = None, within: str = "") -> list[Summary]:
        """Module rows: the innermost modules that ran layers, or every module down to ``max_depth``
        levels below the model (``max_depth=0``: the model's own row); only those inside module
        ``within`` (its descendants) when given."""
        check_max_depth(max_depth, optional=True)
        chains = self._chains()  # module -> its owners, the model first: depth and ancestry
        if max_depth is None:
            rows = list(self.leaf_modules().values())
        else:
            lowest = min(max_depth, 1)  # the model's row stands for the whole breakdown at depth 0
            rows = [s for n, s in self.by_module().items() if lowest <= len(chains[n]) - 1 <= max_depth]
        if within:
            rows = [s for s in rows if within in chains[s.name][:-1]]
        return rows

    def _chains(self) -> dict[str, tuple[str, ...]]:
        chains: dict[str, tuple[str, ...]] = {}
        for t in self.layers:
            chain = tuple(dict.fromkeys(("", *t.layer.owners)))
            for depth, name in enumerate(chain):
                chains.setdefault(name, chain[: depth + 1])
        return chains

    def table(self, by: str = "module", top: int | None = 15, max_depth: int | None = None, within: str = "") -> str:
        """A text table: ``by="module"`` (see :meth:`modules`), ``"operator"`` or ``"layer"``
        (every call); ``top`` keeps the slowest rows."""
        import tabulate

        if by == "layer":
            rows = [_layer_row(t) for t in self.layers]
            rows.sort(key=lambda r: -r[-1])
        else:
            if by == "module":
                summaries = self.modules(max_depth, within)
            elif by == "operator":
                summaries = list(self.by_operator().values())
            else:
                raise OpcountValueError(f"by must be 'module', 'operator' or 'layer', got {by!r}")
            rows = [_summary_row(s) for s in sorted(summaries, key=lambda s: -s.time)]
        total = self.total_time
        rows = rows[:top] if top is not None else rows
        body = [[*r[:-1], seconds(r[-1]), f"{100 * r[-1] / total:.1f}%" if total > 0 else ""] for r in rows]
        headers = [by, "unit", "flops", "bytes", "flop/byte", "bound", "time", "share"]
        table: str = tabulate.tabulate(body, headers=headers, tablefmt="github", disable_numparse=True)
        return table

    def summary(self) -> str:
        """One paragraph: hardware, dtype, totals and how the time splits between bounds."""
        total = self.total()
        share = 100 * total.compute_limited_time / (total.compute_limited_time + total.memory_limited_time or 1)
        cycles = self.cycles(self.total_time)
        text = (
            f"{self.hardware.name} ({self.dtype}): {seconds(self.total_time)} speed of light"
            + (f" ({cycles:,.0f} cycles)" if cycles is not None else "")
            + f"; {si(total.flops, unit='FLOP')} (2 per multiply-add), {size(total.bytes)} moved, "
            f"{_fmt(total.intensity)} FLOP/B; "
            f"{share:.0f}% of the time in compute-bound layers"
        )
        if self.unsupported:
            # an operator lacking one formula still has the other counted (a fused call with flops but
            # no bytes formula is not free): name what is missing, not "free"
            text += f"; without a flop or bytes formula (that part counted as 0): {', '.join(sorted(self.unsupported))}"
        return text

    def __repr__(self) -> str:
        return f"<RooflineReport {self.summary()}>"


def _layer_row(t: LayerTime) -> list[Any]:
    name = f"{t.layer.module or '(model)'}:{t.layer.op}"
    return [name, t.layer.unit, si(t.layer.flops), si(t.layer.bytes), _fmt(t.intensity), t.limited_by, t.effective_time]


def _summary_row(s: Summary) -> list[Any]:
    return [s.name or "(model)", "+".join(s.units), si(s.flops), si(s.bytes), _fmt(s.intensity), s.limited_by, s.time]


def _fmt(x: float) -> str:
    return "inf" if math.isinf(x) else "" if math.isnan(x) else unprefixed(x)
