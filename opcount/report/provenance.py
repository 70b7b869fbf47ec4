"""What an export was computed from: versions, model, inputs, tracer, conventions, hardware.

JSON exports carry it as a ``"meta"`` object. A CSV export is a header and rows only, so that
tools read it as they are; its column names carry the flop convention (``macs`` or ``flops``)
and units, and the command writes this description beside it as JSON on request
(``--csv-meta FILE``). A number without its convention is ambiguous (1 multiply-add is 1 flop in
fvcore, 2 in FlopCounterMode and vendor peaks), so every export says which one it used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from .._version import __version__
from .columns import flops_unit

__all__ = ["export_meta", "input_specs"]


def input_specs(inputs: Any, kwargs: Mapping[str, Any] | None = None) -> list[dict[str, Any]]:
    """Each tensor of the inputs with where it goes, its shape and dtype:
    ``[{"name": "args[0]", "shape": [1, 3, 224, 224], "dtype": "float32"}]``. ``inputs`` is read
    as the analyses read it: a tuple holds the positional arguments, anything else is the one
    positional argument."""
    found: list[dict[str, Any]] = []
    positional = inputs if isinstance(inputs, tuple) else (inputs,)
    for i, value in enumerate(positional):
        _walk(value, f"args[{i}]", found)
    for key, value in (kwargs or {}).items():
        _walk(value, str(key), found)
    return found


def _walk(value: Any, name: str, found: list[dict[str, Any]]) -> None:
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if isinstance(dtype, torch.dtype) and shape is not None:  # tensors and TensorShape placeholders
        found.append({"name": name, "shape": [int(d) for d in shape], "dtype": _dtype_name(dtype)})
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _walk(item, f"{name}.{key}", found)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _walk(item, f"{name}[{i}]", found)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def export_meta(analysis: Any, *, model: str | None = None, roofline: Any = None) -> dict[str, Any]:
    """The description of an export of ``analysis`` (a :class:`~opcount.FlopCountAnalysis` or
    another analysis): opcount and torch versions, the model (``model``, default its class
    name) and its inputs, the tracer, the flop preset and flops-per-mac convention, and with a
    roofline report the hardware and the dtype the roofline assumed."""
    return {
        "opcount": __version__,
        "torch": torch.__version__,
        "model": model or type(analysis.model).__name__,
        "model_class": type(analysis.model).__name__,
        "inputs": input_specs(analysis.inputs, analysis.kwargs),
        "tracer": analysis.tracer,
        "mode": analysis.mode,
        "device": _device(analysis),
        "preset": getattr(analysis, "preset", None),
        "flops_per_mac": getattr(analysis, "flops_per_mac", None),
        "flops_unit": flops_unit(getattr(analysis, "flops_per_mac", None)),
        "hardware": None if roofline is None else roofline.hardware.name,
        "roofline_dtype": None if roofline is None else roofline.dtype,
    }


def _device(analysis: Any) -> str | None:
    """The device the analysis asked for, else ``"meta"`` when the model or its inputs are meta
    tensors (an LLM built on meta, a Trace of one), else None."""
    if analysis.device is not None:
        return str(analysis.device)
    found: list[Any] = []
    _flat(analysis.inputs, found)
    _flat(analysis.kwargs or {}, found)
    first = next(iter(analysis.model.parameters()), None)
    on_meta = any(getattr(t, "is_meta", False) is True for t in found) or (first is not None and first.is_meta)
    return "meta" if on_meta else None


def _flat(value: Any, found: list[Any]) -> None:
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, Mapping):
        for item in value.values():
            _flat(item, found)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _flat(item, found)
