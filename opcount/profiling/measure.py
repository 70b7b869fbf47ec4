""":func:`profile`, the entry point: checks its arguments, gets the roofline's prediction when
asked for one, runs the model (:mod:`.runner`), walks each pass's events (:mod:`.events`) and
aggregates them into the report (:mod:`.aggregate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from torch import nn

from ..analysis import FlopCountAnalysis
from ..errors import OpcountTypeError, OpcountValueError
from ..hardware.lookup import DType, Hardware
from ..scopes import ModuleTree
from ..tracers.structure import normalize_inputs
from ..tracing import Trace
from .aggregate import STATISTICS, build_report
from .events import Walker
from .report import ProfileReport
from .runner import Runner, model_device

if TYPE_CHECKING:
    from ..roofline import RooflineReport

__all__ = ["profile"]


def profile(
    model: nn.Module,
    inputs: Any,
    kwargs: Mapping[str, Any] | None = None,
    *,
    hardware: Hardware | str | None = None,
    device: str | None = None,
    repeats: int = 10,
    warmup: int = 2,
    dtype: DType | None = None,
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
    See :mod:`opcount.profiling` for what is measured and how rows are aggregated.
    """
    if not isinstance(model, nn.Module):
        raise OpcountTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise OpcountValueError(f"repeats must be a positive integer, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise OpcountValueError(f"warmup must be a non-negative integer, got {warmup!r}")
    if statistic not in STATISTICS:
        raise OpcountValueError(f"unknown statistic {statistic!r}; choose one of {', '.join(STATISTICS)}")
    args, kw = normalize_inputs(inputs, kwargs)
    dev = model_device(model, (args, kw), device)
    mode = _mode_of(predicted, roofline_options)
    if mode != "eval":  # a step's prediction over a forward's time would read as a speed-up
        raise OpcountValueError(
            f"profile measures forward passes; its prediction cannot be of mode={mode!r}: analyze with mode='eval'"
        )
    if isinstance(predicted, (Trace, FlopCountAnalysis)):
        if hardware is None:
            raise OpcountTypeError(f"profile(predicted=a {type(predicted).__name__}) needs hardware= for its roofline")
        if predicted.model is not model:
            raise OpcountValueError(f"profile(predicted=...): the {type(predicted).__name__} is of another model")
        from ..roofline import roofline

        predicted = roofline(predicted, hardware=hardware, dtype=dtype, **dict(roofline_options or {}))
    elif predicted is None and hardware is not None:
        from ..roofline import roofline  # traces the model once more; only when asked

        predicted = roofline(model, inputs, hardware, dtype=dtype, kwargs=kwargs, **dict(roofline_options or {}))
    tree = ModuleTree(model)
    runner = Runner(model, tree, args, kw, dev, grad)
    wall, passes = runner.measure(repeats, warmup)
    walker = Walker(runner.clock, predicted)
    samples = [walker.sample(p) for p in passes]
    return build_report(model, tree, dev, samples, walker, wall, repeats, warmup, statistic, predicted)


def _mode_of(predicted: RooflineReport | Trace | FlopCountAnalysis | None, options: Mapping[str, Any] | None) -> str:
    """The mode the prediction is traced in: a given trace's or analysis', else the roofline options'."""
    if isinstance(predicted, Trace):
        return predicted.mode
    if isinstance(predicted, FlopCountAnalysis):
        return predicted.trace().mode
    return str(dict(options or {}).get("mode", "eval"))
