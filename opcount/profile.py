"""Predicted beside measured: per-module and per-operator wall time of real forward passes,
next to the roofline's speed-of-light time (AMAIX validated its model against measured layer
times; the Sparsity Roofline reports "% of speed-of-light").

How it measures
---------------
- Every module gets a ``record_function`` range for the duration of each of its calls (forward
  pre/post hooks, removed in ``finally``), every forward pass another one. One
  ``torch.profiler`` session covers ``repeats`` passes after ``warmup`` unprofiled ones; each
  pass's event tree is walked once.
- **Operators** are the outermost dispatcher events in a module (``aten::conv2d``, not the
  ``aten::convolution`` / ``mkldnn_convolution`` it calls), keyed as the analyses key them
  (``conv``, ``addmm``, ``relu_``), so they pair with the roofline's ``by_operator()`` rows.
- **Custom operators** (MXNet's custom-operator profiling): a
  ``torch.autograd.Function`` appears under its class name, a ``torch.library`` operator under
  its name without namespace (as the analyses name it). The operators it launches are
  attributed under its name (``MyOp::add``), and its own time, outside those operators, is a row
  of its own (``MyOp::(python)``; ``(self)`` for operators not defined in Python).
  ``torch.library.custom_op`` operators called through their Python object or an
  ``OpOverload`` make no profiler event of their own; ``OpOverload.__call__`` is wrapped for the
  duration of the measurement to give them one (restored in ``finally``).
- **Times.** On CPU an event's time is its wall time; on CUDA the time of the kernels it
  launched (the profiler's device time), passes separated by ``torch.cuda.synchronize``. The
  model's time without the profiler (``wall``) is measured too: ``perf_counter`` on CPU, CUDA
  events on CUDA. Python rows and the modules' ``self`` time are host time.
- **Statistic.** ``"midmean"`` (default): the passes are ranked by the model's time and the
  middle half kept (all of them below 4 passes); every row is its mean over those passes. Unlike
  a per-row median this is additive: within one pass a child's range lies inside its parent's,
  so the children's times sum to no more than the parent's, and averages over the same passes
  keep that. ``"median"`` (per row, robust but not additive) and ``"mean"`` are available.

The model is left as it was: hooks removed, training flags untouched, buffers (batch-norm
statistics updated by a training-mode pass) restored, the global RNG forked; also after an error.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.autograd import Function
from torch.autograd.profiler import record_function

from ._runtime import kineto_quiet
from .analysis import FlopCountAnalysis, op_key
from .errors import OpcountError, failure_site, first_line
from .handles import FLOPS
from .hardware import Hardware
from .report import COMPACT, check_max_depth, format_number
from .scopes import ModuleTree
from .torch_internals import OpOverload, custom_op_definitions, op_qualified_name, pytree
from .tracers.patching import replaced
from .tracers.structure import normalize_inputs
from .tracing import Trace
from .units import seconds, time_unit

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .roofline import RooflineReport

__all__ = ["STATISTICS", "ProfileError", "ProfileReport", "ProfileRow", "profile"]

STATISTICS = ("midmean", "median", "mean")
MODULE_RANGE = "opcount.module:"  # + canonical module name ("" for the model)
PASS_RANGE = "opcount.forward#"  # + pass index
PYTHON, SELF = "(python)", "(self)"
# Namespaces whose operators are PyTorch's own: their inner events are implementation detail.
_BUILTIN = ("aten::",)
_TRANSPARENT_NS = ("profiler::",)
# torch.library.custom_op wraps its autograd formula in a generated Function named after the op:
# the same operator twice, not a custom operator inside a custom operator.
_GENERATED = "GeneratedBackwardFor_"


class ProfileError(OpcountError):
    """The model failed during a profiled forward pass; the message names the module."""


# ================================================================================================
# Results
# ================================================================================================
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
                f"achieved {_rate(t.flop_rate)}FLOP/s, {_rate(t.byte_rate)}B/s"
            )
            if self.roofline.unsupported:
                text += f"; no formula (predicted free): {', '.join(sorted(self.roofline.unsupported))}"
        return text

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
            raise ValueError(f"by must be 'module', 'leaf' or 'operator', got {by!r}")
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
        return tabulate.tabulate(
            body, headers=headers, tablefmt="github", disable_numparse=True, preserve_whitespace=True
        )

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

    def to_csv(self, level: str = "modules") -> str:
        """One CSV row per module (``level="modules"``) or operator (``"operators"``)."""
        if level not in ("modules", "operators"):
            raise ValueError(f"unknown level {level!r}; choose 'modules' or 'operators'")
        rows = [r.to_dict() for r in (self.modules if level == "modules" else self.operators).values()]
        out = io.StringIO()
        fields = list(ProfileRow("", "").to_dict())
        writer = csv.DictWriter(out, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: "" if v is None else v for k, v in row.items()})
        return out.getvalue()

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
                label=f"speed of light ({self.roofline.hardware.name})",
            )
            for y, r in zip(ys, rows):
                if r.sol_percent is not None:
                    ax.annotate(
                        _percent(r.sol_percent),
                        (r.measured / scale, y + height / 2),
                        xytext=(3, -3),
                        textcoords="offset points",
                        fontsize=6,
                    )
        ax.set_yticks(ys, [r.name or "(model)" for r in rows], fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel(f"time per forward pass ({unit}, log)")
        ax.set_title(
            title
            or f"{self.model_type} on {self.device}: measured {seconds(self.total.measured)}"
            + (f", speed of light {seconds(self.total.predicted)}" if self.roofline is not None else ""),
            fontsize=10,
        )
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(True, axis="x", which="both", lw=0.3, alpha=0.5)
        if path is not None:
            fig.savefig(Path(path), dpi=fig.dpi)
        return fig


def _percent(x: float | None) -> str:
    if x is None:
        return ""
    return f"{x:.3g}%" if x < 10 else f"{x:.1f}%"


def _rate(x: float | None) -> str:
    return "" if x is None else format_number(x, COMPACT)


def _finite(obj: Any) -> Any:
    """JSON has no inf/nan: they become null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


# ================================================================================================
# Measuring
# ================================================================================================
def profile(
    model: nn.Module,
    inputs: Any,
    kwargs: Mapping[str, Any] | None = None,
    *,
    hardware: Hardware | str | None = None,
    device: str | None = None,
    repeats: int = 10,
    warmup: int = 2,
    dtype: str | None = None,
    statistic: str = "midmean",
    grad: bool = False,
    predicted: RooflineReport | Trace | FlopCountAnalysis | None = None,
    roofline_options: Mapping[str, Any] | None = None,
) -> ProfileReport:
    """Measure ``model(*inputs, **kwargs)`` per module and operator and put the roofline beside it.

    ``hardware`` (a preset name, file or :class:`Hardware`) adds the speed-of-light prediction of
    :func:`opcount.roofline.roofline` (with ``dtype`` and ``roofline_options``); or pass a ready
    ``predicted`` report, or a :class:`~opcount.Trace` or :class:`~opcount.FlopCountAnalysis` of the
    model that the roofline on ``hardware`` is computed from (no trace of its own; the analysis'
    handles price the compute). ``device``: ``"cpu"`` or ``"cuda"``, default where the model's
    parameters are; the model and inputs must already be there (they are not moved).
    ``grad``: run the passes with autograd recording (default: under ``torch.no_grad()``).
    See the module docstring for what is measured and how rows are aggregated.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be a non-negative integer, got {warmup!r}")
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; choose one of {', '.join(STATISTICS)}")
    args, kw = normalize_inputs(inputs, kwargs)
    dev = _device(model, (args, kw), device)
    if isinstance(predicted, (Trace, FlopCountAnalysis)):
        if hardware is None:
            raise TypeError(f"profile(predicted=a {type(predicted).__name__}) needs hardware= for its roofline")
        if predicted.model is not model:
            raise ValueError(f"profile(predicted=...): the {type(predicted).__name__} is of another model")
        from .roofline import roofline

        predicted = roofline(predicted, hardware=hardware, dtype=dtype, **dict(roofline_options or {}))
    elif predicted is None and hardware is not None:
        from .roofline import roofline  # traces the model once more; only when asked

        predicted = roofline(model, inputs, hardware, dtype=dtype, kwargs=kwargs, **dict(roofline_options or {}))
    tree = ModuleTree(model)
    runner = _Runner(model, tree, args, kw, dev, grad)
    wall, passes = runner.measure(repeats, warmup)
    walker = _Walker(runner.clock, predicted)
    samples = [walker.sample(p) for p in passes]
    return _report(model, tree, dev, samples, walker, wall, repeats, warmup, statistic, predicted)


def _device(model: nn.Module, inputs: Any, device: str | None) -> torch.device:
    found = next((p.device for p in model.parameters()), None)
    if found is None:
        leaves = pytree.tree_leaves(inputs)
        found = next((t.device for t in leaves if isinstance(t, torch.Tensor)), torch.device("cpu"))
    if device is None:
        device = found.type
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' but no CUDA device is available")
    if found.type != device:
        raise ValueError(f"the model is on {found.type}, not {device}: move the model and inputs there first")
    return found


class _Runner:
    """Runs the forward passes: unprofiled wall time, then profiled passes with module ranges."""

    def __init__(
        self,
        model: nn.Module,
        tree: ModuleTree,
        args: tuple[Any, ...],
        kw: dict[str, Any],
        device: torch.device,
        grad: bool,
    ) -> None:
        self.model, self.tree, self.args, self.kw, self.device, self.grad = model, tree, args, kw, device, grad
        self.cuda = device.type == "cuda"

    def forward(self) -> None:
        self.model(*self.args, **self.kw)

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def clock(self, event: Any) -> float:
        """An event's measured time in seconds: kernel time on CUDA, wall time on CPU."""
        return (event.device_time_total if self.cuda else event.time_range.elapsed_us()) * 1e-6

    def wall_time(self) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.forward()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) * 1e-3
        t0 = time.perf_counter()
        self.forward()
        return time.perf_counter() - t0

    def measure(self, repeats: int, warmup: int) -> tuple[float, list[Any]]:
        """(median unprofiled time, the top-level event of every profiled pass)."""
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as torch_profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.cuda else [])
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(_preserved(self.model, self.tree, self.device))
                stack.enter_context(torch.set_grad_enabled(self.grad))
                for _ in range(warmup):
                    self.forward()
                self.sync()
                walls = [self.wall_time() for _ in range(repeats)]
                stack.enter_context(_module_ranges(self.tree))
                stack.enter_context(_custom_ops_recorded())
                self.forward()  # once more with the ranges: their first use allocates
                self.sync()
                with kineto_quiet(self.cuda), torch_profile(activities=activities) as prof:
                    for i in range(repeats):
                        with record_function(f"{PASS_RANGE}{i}"):
                            self.forward()
                        self.sync()
        except Exception as e:  # re-raised with the module that failed
            raise _forward_error(self.model, self.tree, e) from e
        passes = {e.name: e for e in prof.events() if e.cpu_parent is None and e.name.startswith(PASS_RANGE)}
        if len(passes) != repeats:
            raise ProfileError(f"the profiler recorded {len(passes)} of {repeats} forward passes")
        return statistics.median(walls), [passes[f"{PASS_RANGE}{i}"] for i in range(repeats)]


def _forward_error(model: nn.Module, tree: ModuleTree, e: Exception) -> ProfileError:
    what, first = failure_site(model, tree, e), first_line(e)
    return ProfileError(f"forward pass failed while profiling, in {what}: {type(e).__name__}: {first}")


@contextlib.contextmanager
def _preserved(model: nn.Module, tree: ModuleTree, device: torch.device) -> Iterator[None]:
    """Buffers and training flags as they were, the global RNG untouched (dropout draws from a fork)."""
    modules = [tree.module(name) for name in tree.names]
    flags = [(m, m.training) for m in modules]
    buffers = [(b, b.detach().clone()) for m in modules for b in m._buffers.values() if b is not None]
    devices = (
        [device.index if device.index is not None else torch.cuda.current_device()] if device.type == "cuda" else []
    )
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        with torch.no_grad():
            for buf, value in buffers:
                buf.copy_(value)
        for m, flag in flags:
            m.training = flag


@contextlib.contextmanager
def _module_ranges(tree: ModuleTree) -> Iterator[None]:
    """A ``record_function`` range around every call of every module, named by its canonical
    name. The hooks are removed and ranges left open by an error are closed on the way out."""
    open_ranges: list[tuple[str, record_function]] = []
    handles = []

    def enter(name: str) -> Callable[..., None]:
        def pre_hook(module: nn.Module, args: Any) -> None:
            rf = record_function(MODULE_RANGE + name)
            rf.__enter__()
            open_ranges.append((name, rf))

        return pre_hook

    def leave(name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            while open_ranges:  # a range opened by a child that failed is closed with it
                top, rf = open_ranges.pop()
                rf.__exit__(None, None, None)
                if top == name:
                    break

        return hook

    try:
        for name in tree.names:
            module = tree.module(name)
            # Our range opens before the user's pre-hooks run and closes after their hooks.
            handles.append(module.register_forward_pre_hook(enter(name), prepend=True))
            handles.append(module.register_forward_hook(leave(name), always_call=True))
        yield
    finally:
        for h in handles:
            h.remove()
        while open_ranges:
            open_ranges.pop()[1].__exit__(None, None, None)


@contextlib.contextmanager
def _custom_ops_recorded() -> Iterator[None]:
    """Give ``torch.library.custom_op`` operators a profiler event when called through their
    ``OpOverload`` (the dispatcher records them only through ``torch.ops.ns.op(...)``).
    ``OpOverload.__call__`` is replaced under :mod:`.trace.patching`'s lock and put back if it
    is still ours."""
    defined = custom_op_definitions()
    if not defined:  # none defined, or the internal moved: custom ops stay unnamed
        yield
        return
    name_of = op_qualified_name

    def recorded(original: Any) -> Any:
        def call(self: Any, /, *args: Any, **kwargs: Any) -> Any:
            name = name_of(self)
            if name in defined:
                with record_function(name):
                    return original(self, *args, **kwargs)
            return original(self, *args, **kwargs)

        return call

    with replaced(OpOverload, "__call__", recorded):
        yield


# ================================================================================================
# From events to rows
# ================================================================================================
Key = tuple[str, ...]  # ("module", name) | ("calls", name) | ("direct", name) | ("op", key) | ...


def _function_names() -> frozenset[str]:
    """Class names of every autograd Function defined so far: their ``apply`` is a profiler event
    named by the class."""
    found: set[str] = set()
    todo = list(Function.__subclasses__())
    while todo:
        cls = todo.pop()
        found.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(found)


def _python_defined(name: str) -> bool:
    return name in custom_op_definitions()


class _Walker:
    """Turns one pass's event tree into a flat sample of times and counts."""

    def __init__(self, clock: Callable[[Any], float], predicted: RooflineReport | None) -> None:
        self.clock = clock
        self.functions = _function_names()
        self.predicted_ops = frozenset(predicted.by_operator()) if predicted is not None else frozenset()
        self.keys: dict[str, str] = {}
        self.parents: dict[str, str] = {}  # breakdown row -> its custom operator
        self.free: set[str] = set()  # operator keys declared free of cost (views, reshapes)
        self.values: dict[Key, float] = {}

    def add(self, key: Key, value: float) -> None:
        self.values[key] = self.values.get(key, 0.0) + value

    def sample(self, top: Any) -> dict[Key, float]:
        self.values = {}
        self.walk(top, "", "", frozenset())
        return self.values

    def kind(self, event: Any, parent: Any) -> str | None:
        """ "op", "custom" or None (not an operator: look inside)."""
        name = event.name
        if name == getattr(parent, "name", None) or name.startswith(_GENERATED) or name.startswith(_TRANSPARENT_NS):
            return None  # the same operator recorded twice (see _custom_ops_recorded), or profiler plumbing
        if name.startswith(_BUILTIN):
            return "op"
        if "::" in name or name in self.functions:
            return "custom"
        return None

    def key(self, event: Any) -> str:
        """The analyses' key of an operator; a composite whose own key the roofline does not know
        takes the key of the first operator inside it that it does (conv2d -> _convolution)."""
        name = event.name
        if name not in self.keys:
            key = _op_key(name)
            if self.predicted_ops and key not in self.predicted_ops:
                key = next((k for k in map(_op_key, _descendant_names(event)) if k in self.predicted_ops), key)
            self.keys[name] = key
        return self.keys[name]

    def walk(self, event: Any, module: str, prefix: str, active: frozenset[str]) -> tuple[float, float]:
        """Record the children of ``event``, which ran in ``module`` (inside custom operator
        ``prefix``); return the (measured, host) time of the rows recorded at this level."""
        measured = host = 0.0
        for child in event.cpu_children:
            name = child.name
            if name.startswith(MODULE_RANGE):
                mod = name[len(MODULE_RANGE) :]
                if mod in active:  # a module running inside itself: its outer range counts it
                    m, h = self.walk(child, mod, prefix, active)
                else:
                    m, h = self.clock(child), _host(child)
                    self.add(("module", mod), m)
                    self.add(("calls", mod), 1)
                    self.add(("self", mod), h - self.walk(child, mod, prefix, active | {mod})[1])
                measured, host = measured + m, host + h
                continue
            kind = self.kind(child, event)
            if kind is None:
                m, h = self.walk(child, module, prefix, active)
                measured, host = measured + m, host + h
                continue
            key = prefix + (self.key(child) if kind == "op" else _op_key(name))
            if name in FLOPS.zero:
                self.free.add(key)
            t = self.clock(child)
            self.add(("inner" if prefix else "op", key), t)
            self.add(("op_calls", key), 1)
            if prefix:
                self.parents[key] = prefix[:-2]
            else:
                self.add(("module_op", module, key), t)
            if kind == "custom":
                _, inner_host = self.walk(child, module, key + "::", active)
                if inner_host > 0:
                    label = PYTHON if name in self.functions or _python_defined(name) else SELF
                    self.parents[f"{key}::{label}"] = key
                    self.add(("python", f"{key}::{label}"), _host(child) - inner_host)
            measured, host = measured + t, host + _host(child)
        return measured, host


def _host(event: Any) -> float:
    return event.time_range.elapsed_us() * 1e-6


def _op_key(name: str) -> str:
    handle = FLOPS.handles.get(name)
    return (handle.name if handle is not None else None) or op_key(name)


def _descendant_names(event: Any) -> Iterator[str]:
    for child in event.cpu_children:
        yield child.name
        yield from _descendant_names(child)


def _aggregate(samples: Sequence[Mapping[Key, float]], statistic: str) -> dict[Key, float]:
    keys = dict.fromkeys(k for s in samples for k in s)
    if statistic == "median":
        return {k: statistics.median(s.get(k, 0.0) for s in samples) for k in keys}
    chosen = list(samples)
    if statistic == "midmean":
        order = sorted(range(len(samples)), key=lambda i: samples[i].get(("module", ""), 0.0))
        cut = len(order) // 4  # keep the middle half (everything below 4 passes)
        chosen = [samples[i] for i in order[cut : len(order) - cut]]
    return {k: sum(s.get(k, 0.0) for s in chosen) / len(chosen) for k in keys}


def _report(
    model: nn.Module,
    tree: ModuleTree,
    device: torch.device,
    samples: Sequence[Mapping[Key, float]],
    walker: _Walker,
    wall: float,
    repeats: int,
    warmup: int,
    statistic: str,
    predicted: RooflineReport | None,
) -> ProfileReport:
    v = _aggregate(samples, statistic)
    pm = predicted.by_module() if predicted is not None else {}
    po = predicted.by_operator() if predicted is not None else {}

    def pred(summary: Any, missing: float | None = None) -> dict[str, float | None]:
        # A module without roofline layers costs nothing. An operator without any costs nothing
        # if declared free (a view); otherwise the roofline has not seen it or has no formula
        # for it (a custom operator and its inside, an operator the tracer folded away): unknown.
        if predicted is None:
            return {}
        if summary is None:
            return {"predicted": missing, "flops": missing, "bytes": missing}
        return {"predicted": summary.time, "flops": summary.flops, "bytes": summary.bytes}

    modules = {}
    for name in tree.names:
        calls = v.get(("calls", name), 0.0)
        modules[name] = ProfileRow(
            name,
            "module",
            type(tree.module(name)).__name__,
            tree.parent(name),
            calls,
            v.get(("module", name), 0.0),
            v.get(("self", name)) if calls else None,
            **pred(pm.get(name), 0.0),
        )
    breakdown: dict[str, list[ProfileRow]] = {}
    for k, t in v.items():
        if k[0] in ("inner", "python"):
            parent = walker.parents[k[1]]
            # A custom operator's own (Python) time runs once per call of the operator.
            calls = v.get(("op_calls", k[1] if k[0] == "inner" else parent), 0.0)
            extra = pred(po.get(k[1])) if k[0] == "inner" else {}  # the inside of a custom op: unknown
            breakdown.setdefault(parent, []).append(ProfileRow(k[1], k[0], "", parent, calls, t, **extra))
    operators: dict[str, ProfileRow] = {}

    def place(row: ProfileRow) -> None:
        operators[row.name] = row
        for sub in sorted(breakdown.get(row.name, ()), key=lambda r: (r.kind == "python", -r.measured)):
            place(sub)

    tops = [
        ProfileRow(
            k[1],
            "operator",
            "",
            None,
            v.get(("op_calls", k[1]), 0.0),
            t,
            **pred(po.get(k[1]), 0.0 if k[1] in walker.free else None),
        )
        for k, t in v.items()
        if k[0] == "op"
    ]
    for row in sorted(tops, key=lambda r: -r.measured):
        place(row)
    for name, s in po.items():  # predicted, never measured (e.g. folded away by the tracer)
        if name not in operators:
            operators[name] = ProfileRow(name, "operator", "", None, 0.0, 0.0, **pred(s))
    module_ops: dict[str, dict[str, float]] = {}
    for k, t in v.items():
        if k[0] == "module_op":
            module_ops.setdefault(k[1], {})[k[2]] = t
    return ProfileReport(
        type(model).__name__,
        device.type,
        modules,
        operators,
        module_ops,
        wall,
        repeats,
        warmup,
        statistic,
        tree,
        predicted,
    )
