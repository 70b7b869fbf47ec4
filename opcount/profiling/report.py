"""The profile's results: :class:`ProfileRow` (one measured row beside its prediction) and
:class:`ProfileReport` with its text tables, JSON/CSV exports and chart.

Pure reporting: rows in, text out. Times go through :mod:`opcount.units` so they read as in
the roofline and sparsity reports; rates use the compact number format of the flop tables.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import OpcountValueError
from ..files import save_figure
from ..hardware.lookup import Hardware
from ..report import check_max_depth, csv_rows
from ..roofline.chart_labels import plain
from ..scopes import ModuleTree
from ..units import seconds, si, time_unit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..roofline import RooflineReport

__all__ = ["ProfileReport", "ProfileRow"]


# CSV headers with their units: times in seconds, rates per second; flops count 2 per multiply-add.
PROFILE_CSV_NAMES = {
    "measured": "measured_s",
    "self_time": "self_time_s",
    "predicted": "predicted_s",
    "flop_rate": "flops_per_s",
    "byte_rate": "bytes_per_s",
}


@dataclass(frozen=True)
class ProfileRow:
    """One measured row beside its prediction. Times in seconds per forward pass.

    ``kind``: ``"module"`` (``""`` is the model), ``"operator"`` (outermost operators),
    ``"inner"`` (an operator launched by custom operator ``parent``) or ``"python"`` (the custom
    operator's own time outside the operators it launched). ``self_time`` (modules): time in the
    module outside its child modules and its operators (its Python code, hooks, profiler).
    ``predicted``, ``flops`` (2 per multiply-add) and ``bytes`` come from the roofline, None without one.
    """

    name: str
    kind: str
    type: str = ""
    parent: str | None = None
    calls: float = 0.0
    measured: float = 0.0
    self_time: float | None = None
    predicted: float | None = None
    flops: float | None = None
    bytes: float | None = None

    @property
    def sol_percent(self) -> float | None:
        """% of speed-of-light: 100 * predicted / measured (100 = at the roofline)."""
        if self.predicted is None or self.measured <= 0:
            return None
        return 100.0 * self.predicted / self.measured

    @property
    def flop_rate(self) -> float | None:
        """Achieved FLOP/s: the predicted flops done in the measured time."""
        return None if self.flops is None or self.measured <= 0 else self.flops / self.measured

    @property
    def byte_rate(self) -> float | None:
        """Achieved bytes/s: the roofline's bytes moved in the measured time."""
        return None if self.bytes is None or self.measured <= 0 else self.bytes / self.measured

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(sol_percent=self.sol_percent, flop_rate=self.flop_rate, byte_rate=self.byte_rate)
        return out


class ProfileReport:
    """Measured per-module and per-operator times of a model, beside the roofline's.

    ``modules``: one row per module of the model in registration order (the model is ``""``;
    a module never called has ``calls == 0``). ``operators``: the outermost operators, slowest
    first, each custom operator followed by its ``inner`` and ``python`` rows; operators the
    roofline predicts but the profiler never saw come last with ``calls == 0``.
    ``module_operators``: measured time of the operators each module ran itself.
    ``wall``: the model's time without profiler or hooks (median of ``repeats`` passes).
    """

    def __init__(
        self,
        model_type: str,
        device: str,
        modules: Mapping[str, ProfileRow],
        operators: Mapping[str, ProfileRow],
        module_operators: Mapping[str, Mapping[str, float]],
        wall: float,
        repeats: int,
        warmup: int,
        statistic: str,
        tree: ModuleTree,
        roofline: RooflineReport | None = None,
    ) -> None:
        self.model_type = model_type
        self.device = device
        self.modules = dict(modules)
        self.operators = dict(operators)
        self.module_operators = {m: dict(ops) for m, ops in module_operators.items()}
        self.wall = wall
        self.repeats = repeats
        self.warmup = warmup
        self.statistic = statistic
        self.tree = tree
        self.roofline = roofline

    @property
    def hardware(self) -> Hardware | None:
        return None if self.roofline is None else self.roofline.hardware

    @property
    def total(self) -> ProfileRow:
        """The model's row."""
        return self.modules[""]

    def by_module(self) -> dict[str, ProfileRow]:
        return dict(self.modules)

    def by_operator(self, inner: bool = True) -> dict[str, ProfileRow]:
        """Operator rows; ``inner=False`` keeps only the outermost operators (they sum to the
        model's operator time)."""
        return {k: r for k, r in self.operators.items() if inner or r.kind == "operator"}

    def parent(self, name: str) -> str | None:
        """The module's parent by name (None for the model)."""
        return self.tree.parent(name)

    def children(self, name: str) -> list[str]:
        """The module's children by name, in registration order."""
        return list(self.tree.children(name))

    def leaf_modules(self) -> dict[str, ProfileRow]:
        """Called modules none of whose children were called (where the time is spent)."""
        called = {n for n, r in self.modules.items() if r.calls > 0}
        inner = {self.parent(n) for n in called if n}
        return {n: r for n, r in self.modules.items() if n in called and n not in inner}

    # ----- text ----------------------------------------------------------------------------
    def summary(self) -> str:
        t = self.total
        how = f"{self.statistic} of {self.repeats} passes"
        text = (
            f"{self.model_type} on {self.device}: {seconds(t.measured)} per forward pass profiled ({how}), "
            f"{seconds(self.wall)} without the profiler"
        )
        if self.roofline is not None and t.predicted is not None:
            text += (
                f"; speed of light on {self.roofline.hardware.name} ({self.roofline.dtype}) "
                f"{seconds(t.predicted)} = {_percent(t.sol_percent)} of the measured time; "
                f"achieved {_rate(t.flop_rate, 'FLOP/s')}, {_rate(t.byte_rate, 'B/s')}"
            )
            if self.roofline.unsupported:
                text += f"; no formula (predicted free): {', '.join(sorted(self.roofline.unsupported))}"
            text += self._faster_than_light()
        return text

    def _faster_than_light(self) -> str:
        """Over 100% of the speed of light is no error to hide: the measurement beat the bound, so
        one of the bound's assumptions does not hold there. Said once, with what to read into it."""
        rows = {**{n or "model": r for n, r in self.modules.items()}, **self.operators}
        faster = [name for name, r in rows.items() if r.sol_percent is not None and r.sol_percent > 100]
        if not faster:
            return ""
        shown = ", ".join(faster[:5]) + (f" and {len(faster) - 5} more" if len(faster) > 5 else "")
        return (
            f". Measured faster than the speed of light (over 100%): {shown}. The bound assumes every byte "
            "comes from main memory once at the device's bandwidth and every flop at its peak; a tensor "
            "served from the cache, a peak or bandwidth set below what the device reaches, or a kernel "
            "doing less work than the formula counts beats it (docs/profiling.md, faster than the speed of light)"
        )

    def table(self, by: str = "module", max_depth: int | None = 3, top: int | None = None) -> str:
        """A text table. ``by="module"``: the module tree to ``max_depth`` levels (called
        modules only); ``"leaf"``: innermost modules, slowest first; ``"operator"``: operators,
        custom operators' breakdown indented below them. ``top`` keeps the first rows."""
        import tabulate

        check_max_depth(max_depth, optional=True)

        if by == "module":
            rows = [
                (self._indent(n), r)
                for n, r in self.modules.items()
                if r.calls > 0 and (max_depth is None or self.tree.depth(n) <= max_depth)
            ]
        elif by == "leaf":
            rows = [(n, r) for n, r in sorted(self.leaf_modules().items(), key=lambda kv: -kv[1].measured)]
        elif by == "operator":
            rows = [(("  " if r.parent else "") + n, r) for n, r in self.operators.items()]
        else:
            raise OpcountValueError(f"by must be 'module', 'leaf' or 'operator', got {by!r}")
        rows = rows[:top] if top is not None else rows
        total = self.total.measured
        modules = by != "operator"
        headers = [
            "module" if modules else "operator",
            *(["type"] if modules else []),
            "calls",
            "measured",
            "share",
            *(["self"] if modules else []),
        ]
        if self.roofline is not None:
            headers += ["predicted", "% SOL", "FLOP/s", "B/s"]
        body = []
        for label, r in rows:
            cells = [
                label or "model",
                *([r.type] if modules else []),
                f"{r.calls:g}",
                seconds(r.measured),
                _percent(100 * r.measured / total if total > 0 else None),
                *([seconds(r.self_time)] if modules else []),
            ]
            if self.roofline is not None:
                cells += [seconds(r.predicted), _percent(r.sol_percent), _rate(r.flop_rate), _rate(r.byte_rate)]
            body.append(cells)
        table: str = tabulate.tabulate(
            body, headers=headers, tablefmt="github", disable_numparse=True, preserve_whitespace=True
        )
        return table

    def _indent(self, name: str) -> str:
        depth = self.tree.depth(name)
        parent = self.parent(name)
        local = name[len(parent) + 1 :] if parent else name  # owners are prefixes of the name
        return "  " * depth + (local or "model")

    def __str__(self) -> str:
        return self.summary() + "\n\n" + self.table() + "\n\n" + self.table(by="operator")

    def __repr__(self) -> str:
        return f"<ProfileReport {self.summary()}>"

    # ----- machine formats -----------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain data: settings, totals, one entry per module and operator (seconds, FLOP, bytes)."""
        return {
            "model": self.model_type,
            "device": self.device,
            "hardware": None if self.roofline is None else self.roofline.hardware.name,
            "dtype": None if self.roofline is None else self.roofline.dtype,
            "repeats": self.repeats,
            "warmup": self.warmup,
            "statistic": self.statistic,
            "wall": self.wall,
            "total": self.total.to_dict(),
            "modules": [r.to_dict() for r in self.modules.values()],
            "operators": [r.to_dict() for r in self.operators.values()],
            "module_operators": self.module_operators,
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(_finite(self.to_dict()), indent=indent)

    def to_csv(self, level: str = "modules", *, raw: bool = False) -> str:
        """One CSV row per module (``level="modules"``) or operator (``"operators"``), the header
        first, units in its names (``measured_s``), the model's own row named ``"."``; a name a
        spreadsheet would run as a formula gets a leading ``'`` unless ``raw`` (:func:`opcount.report.csv_rows`)."""
        if level not in ("modules", "operators"):
            raise OpcountValueError(f"unknown level {level!r}; choose 'modules' or 'operators'")
        rows = [r.to_dict() for r in (self.modules if level == "modules" else self.operators).values()]
        fields = list(ProfileRow("", "").to_dict())
        return csv_rows(fields, rows, names=PROFILE_CSV_NAMES, raw=raw)

    # ----- chart ---------------------------------------------------------------------------
    def plot(
        self, path: str | Path | None = None, *, top: int = 20, max_depth: int | None = None, title: str | None = None
    ) -> Figure:
        """Horizontal bars, measured beside predicted, for the ``top`` slowest innermost modules
        (or the modules ``max_depth`` levels down), log time axis (on a CPU the two differ by
        orders of magnitude); each measured bar is labelled with its % of speed-of-light."""
        try:
            from matplotlib.figure import Figure
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("plots need matplotlib: pip install 'opcount[plot]'") from e
        if max_depth is None:
            rows = list(self.leaf_modules().values())
        else:
            rows = [r for n, r in self.modules.items() if n and r.calls > 0 and self.tree.depth(n) == max_depth]
        rows = sorted(rows, key=lambda r: -r.measured)[:top][::-1]  # slowest at the top
        fig = Figure(figsize=(8, 1.4 + 0.32 * max(len(rows), 1)), dpi=100, layout="constrained")
        ax = fig.add_subplot()
        ys = list(range(len(rows)))
        height = 0.4
        unit, scale = time_unit(max((r.measured for r in rows), default=0.0))
        ax.barh(
            [y + height / 2 for y in ys], [r.measured / scale for r in rows], height, color="tab:blue", label="measured"
        )
        if self.roofline is not None:
            ax.barh(
                [y - height / 2 for y in ys],
                [(r.predicted or 0) / scale for r in rows],
                height,
                color="tab:orange",
                label=plain(f"speed of light ({self.roofline.hardware.name})"),
            )
            for y, r in zip(ys, rows, strict=True):
                if r.sol_percent is not None:
                    ax.annotate(
                        _percent(r.sol_percent),
                        (r.measured / scale, y + height / 2),
                        xytext=(3, -3),
                        textcoords="offset points",
                        fontsize=6,
                    )
        ax.set_yticks(ys, [plain(r.name or "(model)") for r in rows], fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel(f"time per forward pass ({unit}, log)")
        ax.set_title(
            title
            or plain(
                f"{self.model_type} on {self.device}: measured {seconds(self.total.measured)}"
                + (f", speed of light {seconds(self.total.predicted)}" if self.roofline is not None else "")
            ),
            fontsize=10,
        )
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(True, axis="x", which="both", lw=0.3, alpha=0.5)
        if path is not None:
            save_figure(fig, path, dpi=fig.dpi)
        return fig


def _percent(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x:.3g}%" if x < 10 else f"{x:.1f}%"


def _rate(x: float | None, unit: str = "") -> str:
    return "" if x is None else si(x, unit=unit)


def _finite(obj: Any) -> Any:
    """JSON has no inf/nan: they become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
