"""The hardware record: peak throughput per compute unit and dtype, memory bandwidth, sparse support.

A :class:`Hardware` is plain data. Peaks are dense (no structured sparsity) and in FLOP/s
counting a multiply-add as 2 operations, the way vendors quote them. Units are named freely;
the roofline maps multiply-add operators (conv, matmul, einsum, attention) to ``"tensor"`` when
that unit has a peak for the dtype, and everything else to ``"vector"``. ``sparse`` says which
structured-sparse patterns the tensor unit runs natively
(:class:`~opcount.hardware.sparse_support.SparseSupport`, read by the sparsity roofline). A record is
checked when it is made, from Python or from a TOML/JSON file.

Peak tables are keyed by torch's dtype names and by the compute modes of a tensor unit that are not
torch dtypes: ``tf32`` (float32 data run as TF32) and the block-scaled 4-bit floats ``mxfp4`` and
``nvfp4`` (:data:`SCALED_FP4`). An 8-bit float request finds the FP8 the device runs
(:meth:`Hardware.precision_of`): the OCP formats (``float8_e4m3fn``, ``float8_e5m2``) and AMD CDNA 3's
``fnuz`` ones hold the same 8 bits at the same rate, only the exponent bias and the NaN encoding differ.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from ..errors import OpcountKeyError, OpcountValueError
from ..files.read import parse_json, parse_toml, read_text
from ..ir import DTYPE_BYTES
from .efficiency import Efficiency
from .interconnect import Interconnect
from .sparse_support import SparseSupport

TENSOR, VECTOR = "tensor", "vector"
T, G = 1e12, 1e9

# The figures a device can have, by orders of magnitude around every device made: a figure outside
# them is a typo or a unit slip (a denormal 1e-320 bytes/s makes every time infinite, which JSON
# cannot hold). Bandwidth: 1 MB/s (a microcontroller's flash) .. 1 PB/s (200 times the H200's 4.8 TB/s,
# NVIDIA's H200 datasheet); peaks: 1 MFLOP/s .. 1e18 FLOP/s (an exaflop on one device, 100 times the
# B200's dense FP4, NVIDIA's HGX B200 specifications); clock 1 kHz .. 100 GHz; on-chip memory 1 B .. 1 PB.
RANGES: dict[str, tuple[float, float, str]] = {
    "bandwidth": (1e6, 1e15, "bytes/s"),
    "peak": (1e6, 1e18, "FLOP/s"),
    "clock_hz": (1e3, 1e11, "Hz"),
    "buffer_bytes": (1.0, 1e15, "bytes"),
    "memory_bytes": (1.0, 1e15, "bytes"),
    "power_w": (1e-3, 1e6, "W"),  # a milliwatt microcontroller .. a megawatt (a 72-GPU rack draws 120 kW)
}

# The block-scaled 4-bit floats a tensor unit may run, in bytes per element with their scales: E2M1
# values (half a byte) and one E8M0 scale per 32 (OCP Microscaling Formats (MX) v1.0, MXFP4) or one
# E4M3 scale per 16 (NVIDIA's NVFP4; its one float32 per tensor is left out, nothing per element).
SCALED_FP4: dict[str, float] = {"mxfp4": 0.5 + 1 / 32, "nvfp4": 0.5 + 1 / 16}
# Each 8-bit float and its sibling of the other encoding: OCP FP8 (NVIDIA Hopper/Blackwell, AMD CDNA 4)
# and fnuz (AMD CDNA 3: MI300X, MI325X), one value per byte at one rate. An engine converts an OCP
# checkpoint for a fnuz device (vLLM's and SGLang's normalize_e4m3fn_to_e4m3fnuz reinterpret the bits
# and double the scale), so a request for either runs on the device's own.
FP8_SIBLINGS: dict[str, str] = {
    "float8_e4m3fn": "float8_e4m3fnuz",
    "float8_e4m3fnuz": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2fnuz",
    "float8_e5m2fnuz": "float8_e5m2",
}
NARROW_FLOATS = frozenset({*FP8_SIBLINGS, *SCALED_FP4})  # the floats only their own tensor cores run


@dataclass(frozen=True)
class Hardware:
    """A device as the roofline sees it.

    ``peak``: unit -> dtype -> FLOP/s (2 per multiply-add), e.g.
    ``{"vector": {"float32": 67e12}, "tensor": {"float16": 989e12, "tf32": 495e12}}``.
    The key ``"tf32"`` under a tensor unit is float32 data run as TF32 (see ``roofline(allow_tf32=)``).
    ``bandwidth``: main-memory bytes/s. ``buffer_bytes``: on-chip memory (L2 / last-level cache /
    convolution buffer), informative. ``clock_hz``: to express times in cycles.
    ``sparse``: the N:M patterns (and block sizes) the tensor unit runs natively, a
    :class:`~opcount.hardware.sparse_support.SparseSupport` or its dict form; the default runs no N:M.
    ``memory_bytes``: the device's main memory as it reports it (``nvidia-smi``'s ``memory.total``), of
    which a serving engine takes its ``gpu_memory_utilization`` (what a deployment must fit in).
    ``interconnect``: its links to other devices (:class:`~opcount.hardware.interconnect.Interconnect`
    or its dict form); None: a single device, priced alone. ``power_w``: the board's power limit
    (NVIDIA's TDP, AMD's TBP) in watts, what a device draws at full load, for energy.
    """

    name: str
    peak: Mapping[str, Mapping[str, float]]
    bandwidth: float
    buffer_bytes: float | None = None
    clock_hz: float | None = None
    description: str = field(default="", compare=False)
    sparse: SparseSupport = field(default_factory=SparseSupport)
    memory_bytes: float | None = None
    interconnect: Interconnect | None = None
    efficiency: Efficiency = field(default_factory=Efficiency)  # the LLM estimate's factors
    power_w: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise OpcountValueError("hardware needs a non-empty name")
        _check_range(self.name, "bandwidth", "bandwidth", self.bandwidth)
        if not isinstance(self.peak, Mapping) or not self.peak:
            raise OpcountValueError(f"{self.name}: peak must map unit names to {{dtype: FLOP/s}} tables")
        frozen: dict[str, Mapping[str, float]] = {}
        for unit, table in self.peak.items():
            if not isinstance(table, Mapping) or not table:
                raise OpcountValueError(f"{self.name}: peak[{unit!r}] must be a non-empty {{dtype: FLOP/s}} table")
            for dtype, value in table.items():
                if not _is_dtype_name(dtype):
                    raise OpcountValueError(
                        f"{self.name}: peak[{unit!r}] has unknown dtype {dtype!r}: name it as torch does "
                        "(float32, float16, bfloat16, float8_e4m3fn, int8, ...), tf32, mxfp4 or nvfp4"
                    )
                _check_range(self.name, f"peak[{unit!r}][{dtype!r}]", "peak", value)
            frozen[str(unit)] = MappingProxyType({str(dtype_name(d)): float(v) for d, v in table.items()})
        # Read-only views: a preset shared by every caller must not be edited in place.
        object.__setattr__(self, "peak", MappingProxyType(frozen))
        object.__setattr__(self, "bandwidth", float(self.bandwidth))
        for opt in ("buffer_bytes", "clock_hz", "memory_bytes", "power_w"):
            value = getattr(self, opt)
            if value is not None:
                _check_range(self.name, opt, opt, value)
        if isinstance(self.sparse, Mapping):
            try:
                object.__setattr__(self, "sparse", SparseSupport.from_dict(self.sparse))
            except ValueError as e:
                raise OpcountValueError(f"{self.name}: {e}") from e
        elif not isinstance(self.sparse, SparseSupport):
            raise OpcountValueError(f"{self.name}: sparse must be a SparseSupport or a table, got {self.sparse!r}")
        if isinstance(self.efficiency, Mapping):
            try:
                object.__setattr__(self, "efficiency", Efficiency.from_dict(self.efficiency))
            except (TypeError, ValueError) as e:
                raise OpcountValueError(f"{self.name}: {e}") from e
        elif not isinstance(self.efficiency, Efficiency):
            raise OpcountValueError(f"{self.name}: efficiency must be a table, got {self.efficiency!r}")
        if isinstance(self.interconnect, Mapping):
            try:
                object.__setattr__(self, "interconnect", Interconnect.from_dict(self.interconnect))
            except (TypeError, ValueError) as e:
                raise OpcountValueError(f"{self.name}: {e}") from e
        elif self.interconnect is not None and not isinstance(self.interconnect, Interconnect):
            raise OpcountValueError(f"{self.name}: interconnect must be an Interconnect or a table")

    def __hash__(self) -> int:  # the peak tables are read-only mappings, which do not hash
        return hash((self.name, self.bandwidth, tuple((u, tuple(t.items())) for u, t in self.peak.items())))

    # ----- queries -------------------------------------------------------------------------
    @property
    def units(self) -> tuple[str, ...]:
        return tuple(self.peak)

    def precision_of(self, unit: str, dtype: DType) -> str | None:
        """The key of ``unit``'s peak table that runs ``dtype``: the dtype itself, or for an 8-bit
        float the device's own encoding of it (``float8_e4m3fn`` runs as ``float8_e4m3fnuz`` on an
        MI300X, :data:`FP8_SIBLINGS`); None when the unit runs neither."""
        table = self.peak.get(unit, {})
        name = dtype_name(dtype)
        for key in (name, FP8_SIBLINGS.get(name)):
            if key is not None and key in table:
                return key
        return None

    def refuses_products_in(self, dtype: DType) -> str | None:
        """Why matrix products in ``dtype`` cannot run here, or None: an 8- or 4-bit float runs on tensor
        cores made for it or not at all (priced on another unit, its FLOPs would leave the tensor-peak bound)."""
        name = dtype_name(dtype)
        if name not in NARROW_FLOATS or self.precision_of(TENSOR, name) is not None:
            return None
        narrow = sorted(k for k in self.peak.get(TENSOR, {}) if k in NARROW_FLOATS)
        runs = f"its tensor unit runs {', '.join(narrow)}" if narrow else "its tensor unit runs no 8- or 4-bit float"
        return f"{self.name} runs no {name} matrix products ({runs})"

    def peak_of(self, unit: str, dtype: DType) -> float | None:
        """FLOP/s of ``unit`` on ``dtype`` (a name or a torch.dtype, an 8-bit float in either FP8
        encoding, :meth:`precision_of`), None when the unit does not run that dtype."""
        key = self.precision_of(unit, dtype)
        return None if key is None else self.peak[unit][key]

    @property
    def fp8(self) -> str | None:
        """The E4M3 format the tensor unit runs: ``float8_e4m3fn`` (OCP: NVIDIA Hopper and Blackwell,
        AMD CDNA 4), ``float8_e4m3fnuz`` (AMD CDNA 3), or None without FP8."""
        table = self.peak.get(TENSOR, {})
        return next((f for f in ("float8_e4m3fn", "float8_e4m3fnuz") if f in table), None)

    def ridge(self, unit: str, dtype: DType) -> float:
        """The ridge point (FLOP/byte): intensities above it are compute bound on ``unit``."""
        peak = self.peak_of(unit, dtype)
        if peak is None:
            raise OpcountKeyError(f"{self.name} has no {unit} peak for {dtype_name(dtype)}")
        return peak / self.bandwidth

    # ----- (de)serialization ---------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "bandwidth": self.bandwidth,
            "peak": {u: dict(t) for u, t in self.peak.items()},
        }
        for key in ("buffer_bytes", "clock_hz", "memory_bytes", "power_w"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.interconnect is not None:
            out["interconnect"] = self.interconnect.to_dict()
        if self.description:
            out["description"] = self.description
        if self.sparse != SparseSupport():
            out["sparse"] = self.sparse.to_dict()
        if self.efficiency != Efficiency():
            out["efficiency"] = self.efficiency.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hardware:
        """Build from ``{"name", "bandwidth", "peak": {unit: {dtype: FLOP/s}}, ...}``; unknown keys are errors."""
        allowed = {
            "name",
            "peak",
            "bandwidth",
            "buffer_bytes",
            "clock_hz",
            "description",
            "sparse",
            "memory_bytes",
            "interconnect",
            "efficiency",
            "power_w",
        }
        unknown = set(data) - allowed
        if unknown:
            raise OpcountValueError(f"unknown hardware keys {sorted(unknown)}; allowed: {sorted(allowed)}")
        missing = {"name", "peak", "bandwidth"} - set(data)
        if missing:
            raise OpcountValueError(f"hardware description lacks {sorted(missing)}")
        return cls(**dict(data))

    @classmethod
    def from_file(cls, path: str | Path) -> Hardware:
        """Load a user-defined device from TOML (``.toml``) or JSON (any other suffix). Example TOML::

        name = "my-npu"
        bandwidth = 64e9          # bytes/s
        clock_hz = 1e9
        memory_bytes = 32e9       # optional: the bytes the device reports, what a deployment fits in
        power_w = 75              # optional: board power (TDP), for energy
        [peak.tensor]
        float16 = 2.048e12        # FLOP/s, 2 per multiply-add
        [peak.vector]
        float16 = 16e9
        [sparse]                  # optional; without it no N:M pattern runs natively
        nm = ["2:4"]
        nm_precisions = ["float16"]
        [interconnect]            # optional: needed by layouts of several devices
        bandwidth = 100e9         # bytes/s per device per direction, inside a node
        latency = 1e-6            # s per ring step
        devices_per_node = 8
        network_bandwidth = 50e9  # optional: between nodes
        network_latency = 3e-6
        """
        path = Path(path)
        text = read_text(path, "a hardware file")  # at most 16 MiB; every failure one line naming the file
        data = parse_toml(text, path) if path.suffix.lower() == ".toml" else parse_json(text, path)
        if not isinstance(data, Mapping):
            raise OpcountValueError(f"{path}: expected a table of hardware keys at the top level")
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as e:
            raise OpcountValueError(f"{path}: {e}") from e


DType = str | torch.dtype  # a dtype as a name ("float16") or as torch's object (torch.float16)


def dtype_name(dtype: DType) -> str:
    """The name opcount gives a dtype, torch's without its prefix (``torch.float16`` -> ``"float16"``),
    the name the tracers record and hardware peaks are keyed by; anything else is returned as is."""
    return str(dtype).removeprefix("torch.") if isinstance(dtype, torch.dtype) else dtype


def dtype_bytes(dtype: DType) -> float:
    """Bytes per element of a dtype name (torch's, :data:`~opcount.ir.DTYPE_BYTES`) or of a
    block-scaled 4-bit float with its scales (:data:`SCALED_FP4`); KeyError for anything else."""
    name = dtype_name(dtype)
    return SCALED_FP4[name] if name in SCALED_FP4 else DTYPE_BYTES[name]


def _is_dtype_name(name: object) -> bool:
    # A key no operator's dtype matches (a typo, an alias such as half) would only fail later, at
    # the first layer priced in that dtype: the roofline looks peaks up by torch's canonical names.
    if isinstance(name, torch.dtype):
        return True
    if name == "tf32" or name in SCALED_FP4:  # compute modes of a tensor unit, not torch dtypes
        return True
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return isinstance(dtype, torch.dtype) and str(dtype) == f"torch.{name}"


def _check_range(name: str, field_name: str, kind: str, value: object) -> None:
    """Refuse a figure that is not a number within :data:`RANGES` (``kind``), naming the field."""
    low, high, unit = RANGES[kind]
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or not low <= value <= high:  # type: ignore[operator]
        raise OpcountValueError(
            f"{name}: {field_name} must be a number of {unit} from {low:g} to {high:g}, got {value!r}"
        )
