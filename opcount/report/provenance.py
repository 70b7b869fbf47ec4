"""What an export was computed from: versions, model, inputs, tracer, conventions, hardware.

JSON exports carry it as a ``"meta"`` object; CSV exports as ``#``-prefixed lines above the
header (``pandas.read_csv(path, comment="#")`` skips them, :func:`read_csv_meta` reads them).
A number without its convention is ambiguous (1 multiply-add is 1 flop in fvcore, 2 in
FlopCounterMode and vendor peaks), so every export says which one it used.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .._version import __version__
from ..errors import OpcountValueError

__all__ = ["CSV_ROOT", "csv_header", "export_meta", "input_specs", "read_csv_meta"]

# The model's own row in CSV exports. fvcore names the root module "" (``by_module()[""]``), but
# an empty CSV field reads back as NaN in pandas, quoted or not. No module can be named "." (torch
# refuses dots in module names), so it never collides with a child such as transformers' ``model``.
CSV_ROOT = "."


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
        "device": None if analysis.device is None else str(analysis.device),
        "preset": getattr(analysis, "preset", None),
        "flops_per_mac": getattr(analysis, "flops_per_mac", None),
        "hardware": None if roofline is None else roofline.hardware.name,
        "roofline_dtype": None if roofline is None else roofline.dtype,
    }


def csv_header(meta: Mapping[str, Any]) -> str:
    """``meta`` as CSV comment lines, one ``# key: <JSON value>`` line per field."""
    return "".join(f"# {key}: {json.dumps(value)}\n" for key, value in meta.items())


def read_csv_meta(source: str | Path) -> dict[str, Any]:
    """The ``meta`` of a CSV export (a path, or the CSV text itself): the ``# key: value``
    lines above its header, values decoded from JSON."""
    text = Path(source).read_text(encoding="utf-8") if isinstance(source, Path) or "\n" not in source else source
    meta: dict[str, Any] = {}
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        key, sep, value = line[1:].strip().partition(": ")
        if not sep:
            raise OpcountValueError(f"malformed CSV metadata line {line!r}: expected '# key: <JSON value>'")
        meta[key] = json.loads(value)
    return meta
