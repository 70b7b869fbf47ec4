"""What each tensor of an LLM is stored in, by role: weights, activations, KV cache.

Quantized weights carry their scales (and zero-points) with them; the assumed layouts are the
common ones of weight-only and weight-activation quantization:

- ``int4``: groups of 128 consecutive input elements per output row share one float16 scale
  and one float16 zero-point (GPTQ / AWQ style): ``4 + 32/128 = 4.25`` bits per weight;
- ``int8``: one float16 scale per output row (per-channel, symmetric): ``8 + 16/in`` bits;
- ``float8_e4m3fn`` (``fp8``): one float32 scale per tensor.

Only the weights of ``nn.Linear`` layers are quantized, the output projection (``lm_head``)
excepted; embeddings, norms and biases stay in 16 bits (the activations' float dtype, bfloat16
under 8-bit activations), as these schemes ship them.
The peak a phase runs at is the activation dtype's: w4a16 computes in 16 bits after
dequantizing, w8a8 in int8.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import OpcountValueError
from ..hardware.lookup import DType, dtype_name
from ..ir import DTYPE_BYTES, TensorSpec
from .model import KV_PREFIX

ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
    "fp8": "float8_e4m3fn",
    "float8": "float8_e4m3fn",
}
WEIGHT_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3fn", "int8", "int4")
ACT_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3fn", "int8")
KV_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3fn", "int8")
GROUP_SIZE = 128
_SCALE_BYTES = 2  # float16 scales and zero-points


def canonical(dtype: DType, allowed: tuple[str, ...], role: str) -> str:
    """``dtype``'s canonical name, checked against what ``role`` may be stored in."""
    text = str(dtype_name(dtype)).lower()
    name = ALIASES.get(text, text)
    if name not in allowed:
        raise OpcountValueError(
            f"unknown {role} dtype {dtype!r}; choose one of {', '.join(allowed)} (or bf16, fp16, fp8)"
        )
    return name


@dataclass(frozen=True)
class Precision:
    """The dtype of each role; ``kv=None`` stores the cache in the activation dtype."""

    weight: str = "bfloat16"
    act: str = "bfloat16"
    kv: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "weight", canonical(self.weight, WEIGHT_DTYPES, "weight"))
        object.__setattr__(self, "act", canonical(self.act, ACT_DTYPES, "activation"))
        object.__setattr__(self, "kv", canonical(self.kv or self.act, KV_DTYPES, "KV cache"))

    @property
    def kv_dtype(self) -> str:
        return self.kv or self.act

    @property
    def traced(self) -> torch.dtype:
        """The dtype the model is built and traced in: the activations', or bfloat16 for 8-bit ones
        (their bytes are priced per role afterwards)."""
        return getattr(torch, self.act) if self.act in ("float32", "bfloat16", "float16") else torch.bfloat16

    @property
    def stored(self) -> str:
        """The dtype of the parameters that are not quantized (embeddings, norms, the output projection)."""
        return str(self.traced).removeprefix("torch.")

    def label(self) -> str:
        """``w4a16``-style name, with the cache's dtype when it differs."""
        bits = {"float32": 32, "bfloat16": 16, "float16": 16, "float8_e4m3fn": 8, "int8": 8, "int4": 4}
        text = f"w{bits[self.weight]}a{bits[self.act]}"
        return text if self.kv_dtype == self.act else f"{text}, KV {self.kv_dtype}"


def quantized_weights(model: nn.Module) -> set[str]:
    """Names of the parameters a weight-quantized model stores in the weight dtype."""
    get_head: Any = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    return {
        f"{name}.weight" if name else "weight"
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and m is not head
    }


def weight_bytes(shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of one linear weight ``[out, in]`` stored in ``dtype``, scales included (int4: two
    weights a byte, an odd count rounded up to whole bytes)."""
    numel = math.prod(shape)
    out, inner = (shape[0], math.prod(shape[1:])) if len(shape) > 1 else (1, numel)
    if dtype == "int4":
        return math.ceil(numel / 2) + out * math.ceil(inner / GROUP_SIZE) * 2 * _SCALE_BYTES
    if dtype == "int8":
        return numel + out * _SCALE_BYTES
    if dtype == "float8_e4m3fn":
        return numel + 4
    return numel * int(DTYPE_BYTES[dtype])


class Pricing:
    """Bytes per element of each traced tensor, by its role (the roofline's ``itemsize``)."""

    def __init__(self, precision: Precision, quantized: set[str], shapes: Mapping[str, tuple[int, ...]]) -> None:
        self._precision = precision
        self._per_element = {
            name: weight_bytes(shapes[name], precision.weight) / max(1, math.prod(shapes[name]))
            for name in quantized
            if name in shapes
        }
        self._act = DTYPE_BYTES[precision.act]
        self._kv = DTYPE_BYTES[precision.kv_dtype]
        self._other = DTYPE_BYTES[precision.stored]

    def __call__(self, spec: TensorSpec) -> float | None:
        if spec.dtype not in _FLOATING:
            return None  # indices and masks keep their size
        name = spec.param
        if name is None:
            return self._act
        if name.startswith(KV_PREFIX + "."):
            return self._kv
        # an expert's slice of a fused stack (``experts.gate_up_proj[3]``, opcount.llm.moe) is priced as its stack
        return self._per_element.get(name, self._per_element.get(name.partition("[")[0], self._other))


_FLOATING = frozenset({"float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2"})


def pricing_for(model: nn.Module, precision: Precision) -> Callable[[TensorSpec], float | None]:
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    return Pricing(precision, quantized_weights(model), shapes)


def footprint_weights(model: nn.Module, precision: Precision) -> int:
    """Bytes of every parameter (shared ones once) stored per role."""
    quantized = quantized_weights(model)
    total = 0
    for name, p in model.named_parameters():
        if name in quantized:
            total += weight_bytes(tuple(p.shape), precision.weight)
        else:
            total += p.numel() * int(DTYPE_BYTES[precision.stored if p.is_floating_point() else str(p.dtype)[6:]])
    return total
