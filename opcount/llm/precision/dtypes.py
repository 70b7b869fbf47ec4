"""What each tensor of an LLM is stored in, by role: weights, activations, KV cache, recurrent state.

Weights are stored per module (:mod:`opcount.llm.precision.assignments`: a default and ``PATTERN=FORMAT``
assignments, e.g. ``experts=mxfp4`` with bfloat16 elsewhere), each format with its scales (and
zero-points) counted (:mod:`opcount.llm.precision.formats`): ``int4`` groups of 128 with float16 scale
and zero-point (GPTQ / AWQ style, 4.25 bits), ``int8`` one float16 scale per row, ``float8_e4m3fn``
(``fp8``) one float32 scale per tensor, ``fp8-block`` one float32 scale per 128 x 128 block
(DeepSeek-V3), ``mxfp4`` (OCP Microscaling, 4.25 bits) and ``nvfp4`` (4.5 bits plus a float32 per
tensor).

By default the weights of ``nn.Linear`` layers and fused expert stacks are in the weight format,
the output projection (``lm_head``) excepted; embeddings, norms, biases and routers stay in 16
bits (the activations' float dtype, bfloat16 under 8-bit activations), as these schemes ship them.
The peak a phase runs at is the activation dtype's: w4a16 computes in 16 bits after
dequantizing, w8a8 in int8, FP8 in the device's own FP8 encoding (OCP e4m3fn, or fnuz on an
MI300X), and ``--act-dtype nvfp4`` / ``mxfp4`` (activations quantized to block-scaled FP4, each
element with its share of the scales) at the FP4 tensor peak of a device that has one.

The KV cache is held in the model's dtype (:attr:`Precision.stored`: bfloat16 under 8- or 4-bit
activations) unless ``kv`` names another, whatever the activations: vLLM's ``kv_cache_dtype="auto"``
uses the model's data type (its ``CacheConfig``), and TensorRT-LLM's ``KvCacheConfig.dtype="auto"``
follows the checkpoint's ``kv_cache_quant_algo``, not its weights' or activations' format; both take
an FP8 cache when asked (``--kv-cache-dtype fp8``). A recurrent state's conv parts are
held in the model's dtype and its recurrent parts in ``state`` (default: what the model's config sets,
else the model's dtype), apart from the KV cache, as vLLM holds them (:mod:`..cache.state_dtypes`).

A weight transformers keeps in float32 (a class's ``_keep_in_fp32_modules_strict``, or
``_keep_in_fp32_modules`` in float16: :mod:`.kept_float32`) is priced in float32 unless an
assignment (``PATTERN=FORMAT``) names it: an assignment, then the float32 rule, then the default.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from ...errors import OpcountValueError
from ...hardware.lookup import DType, dtype_name
from ...hardware.spec import SCALED_FP4, dtype_bytes
from ...ir import DTYPE_BYTES, TensorSpec
from ..attention.indexed import INDEX_BUFFER, element_bytes
from ..cache.names import CONV_STATE, FLOAT32_STATE, KV_PREFIX, RECURRENT_STATE, state_part
from ..cache.state_dtypes import STATE_DTYPES
from .assignments import WeightFormats, WeightSpec, quantizable
from .formats import ALIASES, BITS, FORMATS, GROUP_SIZE, PLAIN, stacked_bytes
from .kept_float32 import kept_in_float32

__all__ = [
    "GROUP_SIZE",
    "Precision",
    "WeightTable",
    "footprint_weights",
    "pricing_for",
    "weight_bytes",
    "weight_formats",
    "weight_table",
]

WEIGHT_DTYPES = FORMATS
ACT_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3fn", "int8", *SCALED_FP4)
KV_DTYPES = ("float32", "bfloat16", "float16", "float8_e4m3fn", "int8")


class StateDtypeError(OpcountValueError):
    """A recurrent state's dtype given for a model that holds no recurrent state."""


def canonical(dtype: DType, allowed: tuple[str, ...], role: str) -> str:
    """``dtype``'s canonical name, checked against what ``role`` may be stored in."""
    text = str(dtype_name(dtype)).lower()
    name = ALIASES.get(text, text)
    if name not in allowed:
        short = [a for a in ("bf16", "fp16", "fp8") if ALIASES[a] in allowed]
        raise OpcountValueError(
            f"unknown {role} dtype {dtype!r}; choose one of {', '.join(allowed)} (or {', '.join(short)})"
        )
    return name


@dataclass(frozen=True)
class Precision:
    """The dtype of each role. ``kv=None`` holds the KV cache in the model's dtype (:attr:`stored`),
    whatever the activations; ``state=None`` leaves a recurrent state's dtype to the model (what its
    config sets, else the model's dtype: :meth:`with_state`, which a model built with this precision
    applies). ``holds_kv`` is False for a model none of whose layers keep keys and values (Mamba, RWKV,
    xLSTM): its label names no KV cache, which a model built with this precision settles (:meth:`without_kv`).

    ``weight`` is one format (``"int4"``) or per-module assignments: ``["experts=mxfp4",
    "bfloat16"]`` or ``{"experts": "mxfp4"}`` (see :mod:`opcount.llm.precision.assignments`); it reads back
    as the text ``--weight-dtype`` takes (``"experts=mxfp4,bfloat16"``)."""

    weight: WeightSpec = "bfloat16"
    act: str = "bfloat16"
    kv: str | None = None
    state: str | None = None
    holds_kv: bool = True
    weights: WeightFormats = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        formats = WeightFormats.parse(self.weight)
        object.__setattr__(self, "weights", formats)
        object.__setattr__(self, "weight", formats.text())
        object.__setattr__(self, "act", canonical(self.act, ACT_DTYPES, "activation"))
        # the model's dtype unless asked, as vLLM's and TensorRT-LLM's kv_cache_dtype "auto" (the module's docstring)
        kv = self.stored if self.kv is None else self.kv  # "" is a wrong name, not "the default"
        object.__setattr__(self, "kv", canonical(kv, KV_DTYPES, "KV cache"))
        if self.state is not None:
            object.__setattr__(self, "state", canonical(self.state, STATE_DTYPES, "recurrent state"))

    @property
    def kv_dtype(self) -> str:
        """The KV cache's dtype."""
        return self.kv or self.stored

    @property
    def state_dtype(self) -> str:
        """The dtype of a recurrent state's recurrent parts (its conv parts are in :attr:`stored`)."""
        return self.state or self.stored

    def with_state(self, configured: str | None) -> Precision:
        """This precision with the recurrent state's dtype settled: the one given, else ``configured``
        (what the model's config sets, :func:`..cache.state_dtypes.configured`), else the model's dtype."""
        return replace(self, state=self.state or configured or self.stored)

    def without_kv(self) -> Precision:
        """This precision for a model that holds no keys and values: its label names no KV cache."""
        return replace(self, holds_kv=False)

    @property
    def traced(self) -> torch.dtype:
        """The dtype the model is built and traced in: the activations', or bfloat16 for 8-bit ones
        (their bytes are priced per role afterwards)."""
        return getattr(torch, self.act) if self.act in ("float32", "bfloat16", "float16") else torch.bfloat16

    @property
    def stored(self) -> str:
        """The model's dtype: that of the parameters that are not quantized (embeddings, norms, the
        output projection) and, unless asked otherwise, of the caches."""
        return str(self.traced).removeprefix("torch.")

    def label(self, cache: bool = True) -> str:
        """``w4a16``-style name (the format after it when its name is not the plain dtype's, the
        assignments when the weights have several), then the dtypes of the caches the model holds where
        the activations' do not say them: the KV cache's (unless :attr:`holds_kv` is False) and a settled
        recurrent state's, each named unless it is the activations' own 16- or 32-bit float (``w8a8, KV
        bfloat16``; ``w16a16, state float32``; a Mamba's ``w8a8, state bfloat16``).
        ``cache=False`` leaves them out (a training step holds no cache)."""
        formats, act = self.weights, BITS[self.act]
        if formats.assignments:
            spec = ", ".join(f"{p}={f}" for p, f in formats.assignments)
            text = f"weights {spec}, {formats.default} elsewhere; a{act}"
        else:
            text = f"w{BITS[formats.default]}a{act}"
            if formats.default in ("fp8-block", "mxfp4", "nvfp4"):
                text += f" ({formats.default})"
        said = self.act if self.act in PLAIN else None  # a16 says a 16-bit cache; a8 says nothing of it
        named = [("KV", self.kv_dtype if self.holds_kv else None), ("state", self.state)] if cache else []
        return ", ".join([text, *(f"{role} {dtype}" for role, dtype in named if dtype not in (None, said))])


def weight_bytes(shape: tuple[int, ...], dtype: str, transposed: bool = False) -> int:
    """Bytes of one weight ``[out, in]`` (or a stack ``[experts, out, in]``) stored in ``dtype``,
    scales included (see :mod:`opcount.llm.precision.formats`)."""
    return stacked_bytes(canonical(dtype, FORMATS, "weight"), shape, transposed)


def float32_weights(model: nn.Module, precision: Precision) -> frozenset[str]:
    """The weights (and buffers) priced in float32: those transformers keeps in float32 at the
    traced dtype, less those an assignment names."""
    return kept_in_float32(model, precision.traced) - precision.weights.assigned(quantizable(model))


def weight_formats(model: nn.Module, precision: Precision) -> dict[str, tuple[str, int]]:
    """Each quantizable weight's format and bytes, by parameter name, under ``precision``'s weight
    formats; a weight they leave in its stored dtype is absent, and so is one transformers keeps in
    float32 (:mod:`.kept_float32`) unless an assignment names it."""
    weights = quantizable(model)
    chosen = precision.weights.formats(weights, type(model).__name__)
    wide = float32_weights(model, precision)
    chosen = {name: fmt for name, fmt in chosen.items() if name not in wide}
    return {
        w.param: (chosen[w.param], stacked_bytes(chosen[w.param], w.shape, w.transposed))
        for w in weights
        if w.param in chosen and not (chosen[w.param] in PLAIN and chosen[w.param] == precision.stored)
    }


class Pricing:
    """Bytes per element of each traced tensor, by its role (the roofline's ``itemsize``)."""

    def __init__(
        self,
        precision: Precision,
        formats: Mapping[str, tuple[str, int]],
        shapes: Mapping[str, tuple[int, ...]],
        float32: frozenset[str] = frozenset(),
    ) -> None:
        self._precision = precision
        self._float32 = float32
        self._per_element = {
            name: nbytes / max(1, math.prod(shapes[name])) for name, (_, nbytes) in formats.items() if name in shapes
        }
        self._act = dtype_bytes(precision.act)
        self._other = DTYPE_BYTES[precision.stored]
        self._cache = {  # a cache tensor by its part (cache.names.state_part; None: keys, values, latents)
            None: DTYPE_BYTES[precision.kv_dtype],
            CONV_STATE: self._other,
            RECURRENT_STATE: DTYPE_BYTES[precision.state_dtype],
            FLOAT32_STATE: 4,
        }

    def __call__(self, spec: TensorSpec) -> float | None:
        if spec.dtype not in _FLOATING:
            return None  # indices and masks keep their size
        name = spec.param
        if name is None:
            return self._act
        if name.startswith(KV_PREFIX + "."):  # DSA's indexer keys in their own format, a state's parts in theirs
            if name.endswith("." + INDEX_BUFFER):
                return element_bytes(spec.shape[-1])
            return self._cache[state_part(name)]
        # an expert's slice of a fused stack (``experts.gate_up_proj[3]``, opcount.llm.moe.experts) is priced as its stack
        stack = name.partition("[")[0]
        other = 4 if stack in self._float32 else self._other  # kept in float32 as transformers loads it
        return self._per_element.get(name, self._per_element.get(stack, other))


_FLOATING = frozenset({"float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2"})


@dataclass(frozen=True, kw_only=True)
class WeightTable:
    """A model's weights under a precision, worked out once: each parameter's bytes as stored
    (``bytes``, shared ones once: a quantized weight in its format with its scales, one transformers
    keeps in float32 in float32, any other in its stored dtype), and the bytes per element of every
    traced tensor (``pricing``, the roofline's ``itemsize``)."""

    bytes: Mapping[str, int]
    pricing: Pricing

    @property
    def total(self) -> int:
        """Bytes of every parameter: the memory footprint's weights."""
        return sum(self.bytes.values())


def weight_table(model: nn.Module, precision: Precision) -> WeightTable:
    """``model``'s :class:`WeightTable` under ``precision``."""
    formats = weight_formats(model, precision)
    wide = float32_weights(model, precision)
    table: dict[str, int] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for name, p in model.named_parameters():
        shapes[name] = tuple(p.shape)
        if name in formats:
            table[name] = formats[name][1]
        elif name in wide and p.is_floating_point():
            table[name] = p.numel() * 4
        else:
            table[name] = p.numel() * int(DTYPE_BYTES[precision.stored if p.is_floating_point() else str(p.dtype)[6:]])
    return WeightTable(bytes=table, pricing=Pricing(precision, formats, shapes, wide))


def pricing_for(model: nn.Module, precision: Precision) -> Callable[[TensorSpec], float | None]:
    """Bytes per element of each traced tensor of ``model`` (:attr:`WeightTable.pricing`)."""
    return weight_table(model, precision).pricing


def footprint_weights(model: nn.Module, precision: Precision) -> int:
    """Bytes of every parameter (shared ones once) stored per role, those transformers keeps in
    float32 in float32 (:mod:`.kept_float32`): :attr:`WeightTable.total`."""
    return weight_table(model, precision).total
