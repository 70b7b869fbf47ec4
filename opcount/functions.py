"""fvcore's one-call functions: ``flop_count`` and ``activation_count``.

Each builds the analysis, applies ``supported_ops`` (extra or replacement handles, fvcore's
argument) and returns the per-operator totals scaled as fvcore scales them (GFLOPs, mega
activations) with the unsupported operators' counts.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from torch import nn

from .analysis import ActivationCountAnalysis, FlopCountAnalysis, JitModelAnalysis
from .errors import OpcountTypeError

Result = tuple[defaultdict[str, float], Counter[str]]


def flop_count(
    model: nn.Module, inputs: Any, supported_ops: Mapping[str, Callable[..., Any] | None] | None = None, **options: Any
) -> Result:
    """GFLOPs per operator and the unsupported operators, as ``fvcore.nn.flop_count``.

    ``options`` go to :class:`~opcount.FlopCountAnalysis` (``preset="fvcore"`` for fvcore's numbers).
    """
    return _scaled(FlopCountAnalysis(model, inputs, **options), supported_ops, 1e9)


def activation_count(
    model: nn.Module, inputs: Any, supported_ops: Mapping[str, Callable[..., Any] | None] | None = None, **options: Any
) -> Result:
    """Mega activations per operator and the unsupported operators, as ``fvcore.nn.activation_count``."""
    return _scaled(ActivationCountAnalysis(model, inputs, **options), supported_ops, 1e6)


def _scaled(analysis: JitModelAnalysis, supported_ops: Mapping[str, Any] | None, unit: float) -> Result:
    if supported_ops is not None:
        if not isinstance(supported_ops, Mapping):
            raise OpcountTypeError(
                f"supported_ops must map operator names to handles, got {type(supported_ops).__name__}"
            )
        analysis.set_op_handle(**supported_ops)
    scaled: defaultdict[str, float] = defaultdict(float)
    for op, value in analysis.by_operator().items():
        scaled[op] = value / unit
    return scaled, analysis.unsupported_ops()
