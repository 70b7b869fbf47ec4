"""Hardware models for the roofline: peak throughput per compute unit and dtype, memory bandwidth.

A :class:`Hardware` is plain data. Peaks are dense (no structured sparsity) and in FLOP/s
counting a multiply-add as 2 operations, the way vendors quote them. Units are named freely;
the roofline maps multiply-add operators (conv, matmul, einsum, attention) to ``"tensor"`` when
that unit has a peak for the dtype, and everything else to ``"vector"``. The figures and their
sources are tabulated in docs/hardware.md. ``sparse`` says which structured-sparse patterns the
tensor unit runs natively (:class:`~opcount.sparse_support.SparseSupport`, read by the sparsity roofline).
"""

from __future__ import annotations

import difflib
import json
import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import torch

from .errors import OpcountError, OpcountKeyError, OpcountValueError
from .sparse_support import SparseSupport

TENSOR, VECTOR = "tensor", "vector"
T, G = 1e12, 1e9


@dataclass(frozen=True)
class Hardware:
    """A device as the roofline sees it.

    ``peak``: unit -> dtype -> FLOP/s (2 per multiply-add), e.g.
    ``{"vector": {"float32": 67e12}, "tensor": {"float16": 989e12, "tf32": 495e12}}``.
    The key ``"tf32"`` under a tensor unit is float32 data run as TF32 (see ``roofline(allow_tf32=)``).
    ``bandwidth``: main-memory bytes/s. ``buffer_bytes``: on-chip memory (L2 / last-level cache /
    convolution buffer), informative. ``clock_hz``: to express times in cycles.
    ``sparse``: the N:M patterns (and block sizes) the tensor unit runs natively, a
    :class:`~opcount.sparse_support.SparseSupport` or its dict form; the default runs no N:M.
    """

    name: str
    peak: Mapping[str, Mapping[str, float]]
    bandwidth: float
    buffer_bytes: float | None = None
    clock_hz: float | None = None
    description: str = field(default="", compare=False)
    sparse: SparseSupport = SparseSupport()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise OpcountValueError("hardware needs a non-empty name")
        if not _positive(self.bandwidth):
            raise OpcountValueError(
                f"{self.name}: bandwidth must be a positive number of bytes/s, got {self.bandwidth!r}"
            )
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
                        "(float32, float16, bfloat16, float8_e4m3fn, int8, ...) or tf32"
                    )
                if not _positive(value):
                    raise OpcountValueError(
                        f"{self.name}: peak[{unit!r}][{dtype!r}] must be a positive FLOP/s, got {value!r}"
                    )
            frozen[str(unit)] = MappingProxyType({str(dtype_name(d)): float(v) for d, v in table.items()})
        # Read-only views: a preset shared by every caller must not be edited in place.
        object.__setattr__(self, "peak", MappingProxyType(frozen))
        object.__setattr__(self, "bandwidth", float(self.bandwidth))
        for opt in ("buffer_bytes", "clock_hz"):
            value = getattr(self, opt)
            if value is not None and not _positive(value):
                raise OpcountValueError(f"{self.name}: {opt} must be positive or None, got {value!r}")
        if isinstance(self.sparse, Mapping):
            try:
                object.__setattr__(self, "sparse", SparseSupport.from_dict(self.sparse))
            except ValueError as e:
                raise OpcountValueError(f"{self.name}: {e}") from e
        elif not isinstance(self.sparse, SparseSupport):
            raise OpcountValueError(f"{self.name}: sparse must be a SparseSupport or a table, got {self.sparse!r}")

    def __hash__(self) -> int:  # the peak tables are read-only mappings, which do not hash
        return hash((self.name, self.bandwidth, tuple((u, tuple(t.items())) for u, t in self.peak.items())))

    # ----- queries -------------------------------------------------------------------------
    @property
    def units(self) -> tuple[str, ...]:
        return tuple(self.peak)

    def peak_of(self, unit: str, dtype: DType) -> float | None:
        """FLOP/s of ``unit`` on ``dtype`` (a name or a torch.dtype), None when the unit does not run that dtype."""
        return self.peak.get(unit, {}).get(dtype_name(dtype))

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
        for key in ("buffer_bytes", "clock_hz"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.description:
            out["description"] = self.description
        if self.sparse != SparseSupport():
            out["sparse"] = self.sparse.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Hardware:
        """Build from ``{"name", "bandwidth", "peak": {unit: {dtype: FLOP/s}}, ...}``; unknown keys are errors."""
        allowed = {"name", "peak", "bandwidth", "buffer_bytes", "clock_hz", "description", "sparse"}
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
        [peak.tensor]
        float16 = 2.048e12        # FLOP/s, 2 per multiply-add
        [peak.vector]
        float16 = 16e9
        [sparse]                  # optional; without it no N:M pattern runs natively
        nm = ["2:4"]
        nm_precisions = ["float16"]
        """
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        try:
            data = tomllib.loads(text) if path.suffix.lower() == ".toml" else json.loads(text)
        except (tomllib.TOMLDecodeError, json.JSONDecodeError) as e:
            raise OpcountValueError(
                f"{path}: not valid {'TOML' if path.suffix.lower() == '.toml' else 'JSON'}: {e}"
            ) from e
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


def _is_dtype_name(name: object) -> bool:
    # A key no operator's dtype matches (a typo, an alias such as half) would only fail later, at
    # the first layer priced in that dtype: the roofline looks peaks up by torch's canonical names.
    if isinstance(name, torch.dtype):
        return True
    if name == "tf32":
        return True
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return isinstance(dtype, torch.dtype) and str(dtype) == f"torch.{name}"


def _positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


# ----- presets (dense peaks; sources in docs/hardware.md) ---------------------------------------
_H100_SXM_PEAK = {
    VECTOR: {"float64": 33.5 * T, "float32": 66.9 * T, "float16": 133.8 * T, "bfloat16": 133.8 * T},
    TENSOR: {
        "float64": 66.9 * T,
        "tf32": 494.7 * T,
        "float16": 989.4 * T,
        "bfloat16": 989.4 * T,
        "float8_e4m3fn": 1978.9 * T,
        "float8_e5m2": 1978.9 * T,
        "int8": 1978.9 * T,
    },
}
_A100_PEAK = {  # the A100's peaks do not depend on memory (40 / 80 GB) or form factor (SXM4 / PCIe)
    VECTOR: {"float64": 9.7 * T, "float32": 19.5 * T, "float16": 78 * T, "bfloat16": 39 * T},
    TENSOR: {"float64": 19.5 * T, "tf32": 156 * T, "float16": 312 * T, "bfloat16": 312 * T, "int8": 624 * T},
}
# Sparse tensor cores (Ampere, Ada, Hopper, Blackwell) run 2:4 in tf32, fp16, bf16, int8 and fp8, not fp64.
# No sparse support (the default) on Turing (T4), AMX (dense tiles only), the M2 Max (no tensor unit)
# and NVDLA (it compresses weights in memory but computes dense).
_NVIDIA_2_4 = SparseSupport(
    nm=((2, 4),),
    nm_precisions=frozenset({"tf32", "float16", "bfloat16", "int8", "float8_e4m3fn", "float8_e5m2"}),
)


def _xeon_8480_2s() -> Hardware:
    # Intel publishes no FLOP/s for this part: cores x FLOP/cycle x base clock (AVX-512 and AMX
    # run near base under sustained load). Per core and cycle: AVX-512 2 FMA ports x 16 fp32 = 64
    # FLOP (fp64 32, AVX512-FP16 / -BF16 128); AMX 1024 bf16 FLOP, 2048 int8 ops.
    cores, clock = 2 * 56, 2.0e9
    per_cycle = cores * clock
    return Hardware(
        "xeon-8480-2s",
        {
            VECTOR: {
                "float64": 32 * per_cycle,
                "float32": 64 * per_cycle,
                "float16": 128 * per_cycle,
                "bfloat16": 128 * per_cycle,
            },
            TENSOR: {"bfloat16": 1024 * per_cycle, "int8": 2048 * per_cycle},
        },
        bandwidth=2 * 8 * 4800e6 * 8,  # 2 sockets x 8 DDR5-4800 channels x 8 bytes
        buffer_bytes=2 * 105 * 2**20,
        clock_hz=clock,
        description="2 x Intel Xeon Platinum 8480+ (Sapphire Rapids, 2 x 56 cores, AVX-512 + AMX, 16 x DDR5-4800)",
    )


def _nvdla_full() -> Hardware:
    # AMAIX: CONV_CORE peak = Tk * Tc * clock multiply-adds with Tk = 16, Tc = 64 for
    # fp16 (int8 doubles Tk); the SDP handles 16 elements per cycle (nv_full.spec, SDP_*_THROUGHPUT_16);
    # 512-bit AXI at 1 GHz = 64 GB/s; 512 KiB convolution buffer.
    clock = 1e9
    return Hardware(
        "nvdla-full",
        {
            TENSOR: {"float16": 2 * 16 * 64 * clock, "int8": 2 * 32 * 64 * clock},
            VECTOR: {"float16": 16 * clock, "int8": 16 * clock},
        },
        bandwidth=64e9,
        buffer_bytes=512 * 1024,
        clock_hz=clock,
        description="NVDLA full configuration at 1 GHz: 16 x 64 fp16 MAC array, SDP 16/cycle, 64 GB/s (AMAIX)",
    )


def _current_accelerators() -> tuple[Hardware, ...]:
    """H200, B200, MI300X, A10G, L40S and A100 PCIe 40 GB: dense peaks, sources in docs/hardware.md."""
    # H200: the same GH100 chip and clocks as the H100 SXM; its datasheet repeats the H100 SXM
    # figures and only the memory differs (141 GB HBM3e, 4.8 TB/s).
    h100 = {unit: dict(table) for unit, table in _H100_SXM_PEAK.items()}
    # AMD ROCm documentation, "AMD Instinct MI300 series microarchitecture": FLOPS/clock/CU x 304 CUs
    # x 2.1 GHz. FP8 on CDNA 3 is the fnuz variant; no vector fp16 figure is given (runs at fp32's).
    mi300x_clock = 2.1e9
    return (
        Hardware(
            "h200-sxm",
            h100,
            bandwidth=4.8e12,
            buffer_bytes=50 * 2**20,
            clock_hz=1.98e9,
            description="NVIDIA H200 SXM 141 GB (HBM3e)",
            sparse=_NVIDIA_2_4,
        ),
        Hardware(
            "b200",
            {
                VECTOR: {"float64": 37 * T, "float32": 75 * T},
                TENSOR: {
                    "float64": 37 * T,
                    "tf32": 1.1e15,
                    "float16": 2.25e15,
                    "bfloat16": 2.25e15,
                    "float8_e4m3fn": 4.5e15,
                    "float8_e5m2": 4.5e15,
                    "int8": 4.5e15,
                },
            },
            bandwidth=7.7e12,
            description="NVIDIA B200 (HGX B200, 180 GB HBM3e)",
            sparse=_NVIDIA_2_4,
        ),
        Hardware(
            "mi300x",
            {
                VECTOR: {"float64": 128 * 304 * mi300x_clock, "float32": 256 * 304 * mi300x_clock},
                TENSOR: {
                    "float64": 256 * 304 * mi300x_clock,
                    "float32": 256 * 304 * mi300x_clock,
                    "tf32": 1024 * 304 * mi300x_clock,
                    "float16": 2048 * 304 * mi300x_clock,
                    "bfloat16": 2048 * 304 * mi300x_clock,
                    "float8_e4m3fnuz": 4096 * 304 * mi300x_clock,
                    "float8_e5m2fnuz": 4096 * 304 * mi300x_clock,
                    "int8": 4096 * 304 * mi300x_clock,
                },
            },
            bandwidth=5.3e12,
            buffer_bytes=256 * 2**20,
            clock_hz=mi300x_clock,
            description="AMD Instinct MI300X 192 GB (HBM3)",
            # CDNA 3 (AMD Instinct MI300X data sheet): 2:4 in fp16, bf16, fp8 and int8, not tf32/fp32/fp64
            sparse=SparseSupport(
                nm=((2, 4),),
                nm_precisions=frozenset({"float16", "bfloat16", "int8", "float8_e4m3fnuz", "float8_e5m2fnuz"}),
            ),
        ),
        Hardware(
            "a10g",
            # The NVIDIA A10 datasheet's figures: AWS's A10G has the same 24 GB / 600 GB/s but lower
            # tensor-core peaks that NVIDIA does not publish, so the tensor figures are an upper bound.
            {
                VECTOR: {"float32": 31.2 * T, "float16": 31.2 * T, "bfloat16": 31.2 * T},
                TENSOR: {"tf32": 62.5 * T, "float16": 125 * T, "bfloat16": 125 * T, "int8": 250 * T},
            },
            bandwidth=600e9,
            description="NVIDIA A10G 24 GB (GDDR6), A10 datasheet figures",
            sparse=_NVIDIA_2_4,
        ),
        Hardware(
            "l40s",
            {
                VECTOR: {"float32": 91.6 * T, "float16": 91.6 * T, "bfloat16": 91.6 * T},
                TENSOR: {
                    "tf32": 183 * T,
                    "float16": 362.05 * T,
                    "bfloat16": 362.05 * T,
                    "float8_e4m3fn": 733 * T,
                    "float8_e5m2": 733 * T,
                    "int8": 733 * T,
                },
            },
            bandwidth=864e9,
            description="NVIDIA L40S 48 GB (GDDR6)",
            sparse=_NVIDIA_2_4,
        ),
        Hardware(
            "a100-pcie-40gb",
            {unit: dict(table) for unit, table in _A100_PEAK.items()},
            bandwidth=1.555e12,
            buffer_bytes=40 * 2**20,
            clock_hz=1.41e9,
            description="NVIDIA A100 PCIe 40 GB (HBM2)",
            sparse=_NVIDIA_2_4,
        ),
    )


PRESETS: dict[str, Hardware] = {
    hw.name: hw
    for hw in (
        Hardware(
            "h100-sxm",
            _H100_SXM_PEAK,
            bandwidth=3.35e12,
            buffer_bytes=50 * 2**20,
            clock_hz=1.98e9,
            description="NVIDIA H100 SXM5 80 GB (HBM3)",
            sparse=_NVIDIA_2_4,
        ),
        Hardware(
            "h100-pcie",
            {
                VECTOR: {"float64": 25.6 * T, "float32": 51.2 * T, "float16": 102.4 * T, "bfloat16": 102.4 * T},
                TENSOR: {
                    "float64": 51.2 * T,
                    "tf32": 378 * T,
                    "float16": 756.5 * T,
                    "bfloat16": 756.5 * T,
                    "float8_e4m3fn": 1513 * T,
                    "float8_e5m2": 1513 * T,
                    "int8": 1513 * T,
                },
            },
            bandwidth=2.0e12,
            buffer_bytes=50 * 2**20,
            clock_hz=1.755e9,
            description="NVIDIA H100 PCIe 80 GB (HBM2e)",
            sparse=_NVIDIA_2_4,
        ),
        Hardware(
            "a100-sxm",
            _A100_PEAK,
            bandwidth=2.039e12,
            buffer_bytes=40 * 2**20,
            clock_hz=1.41e9,
            description="NVIDIA A100 SXM4 80 GB (HBM2e)",
            sparse=_NVIDIA_2_4,
        ),
        Hardware(
            "l4",
            {
                VECTOR: {"float32": 30.3 * T, "float16": 30.3 * T, "bfloat16": 30.3 * T},
                TENSOR: {
                    "tf32": 60 * T,
                    "float16": 121 * T,
                    "bfloat16": 121 * T,
                    "float8_e4m3fn": 242.5 * T,
                    "float8_e5m2": 242.5 * T,
                    "int8": 242.5 * T,
                },
            },
            bandwidth=300e9,
            buffer_bytes=48 * 2**20,
            clock_hz=2.04e9,
            description="NVIDIA L4 24 GB (GDDR6)",
            sparse=_NVIDIA_2_4,
        ),
        Hardware(
            "t4",
            {
                VECTOR: {"float32": 8.1 * T, "float16": 16.2 * T},
                TENSOR: {"float16": 65 * T, "int8": 130 * T},
            },
            bandwidth=320e9,
            buffer_bytes=4 * 2**20,
            clock_hz=1.59e9,
            description="NVIDIA T4 16 GB (GDDR6); Turing: no bf16, no TF32",
        ),
        Hardware(
            "rtx-4090",
            {
                VECTOR: {"float32": 82.6 * T, "float16": 82.6 * T, "bfloat16": 82.6 * T},
                # fp32 accumulation, as PyTorch's fp16/bf16 matmuls use (fp16 accumulation: 330.3)
                TENSOR: {
                    "tf32": 82.6 * T,
                    "float16": 165.2 * T,
                    "bfloat16": 165.2 * T,
                    "float8_e4m3fn": 330.3 * T,
                    "float8_e5m2": 330.3 * T,
                    "int8": 660.6 * T,
                },
            },
            bandwidth=1008e9,
            buffer_bytes=72 * 2**20,
            clock_hz=2.52e9,
            description="NVIDIA GeForce RTX 4090 24 GB (GDDR6X)",
            sparse=_NVIDIA_2_4,
        ),
        _xeon_8480_2s(),
        *_current_accelerators(),
        Hardware(
            "m2-max",
            # 38-core GPU: 38 cores x 128 ALUs x 2 x 1.398 GHz; fp16 at the fp32 rate. The 15.8 TOPS
            # Neural Engine is left out: PyTorch (MPS) does not run on it.
            {VECTOR: {"float32": 13.6 * T, "float16": 13.6 * T}},
            bandwidth=400e9,
            clock_hz=1.398e9,
            description="Apple M2 Max, 38-core GPU, 400 GB/s unified memory (GPU only)",
        ),
        _nvdla_full(),
    )
}

ALIASES = {"h100": "h100-sxm", "h200": "h200-sxm", "a100": "a100-sxm", "4090": "rtx-4090", "nvdla": "nvdla-full"}
# Names that once meant something else, with what to use instead: an error, not a guess.
RETIRED = {"cpu": "'xeon-8480-2s' (2 x Intel Xeon Platinum 8480+) or 'local' (measures this machine)"}
LOCAL = "local"


class UnknownHardwareError(OpcountError, LookupError):
    """No preset has that name and no such file exists; the message suggests the closest names."""


def hardware(name_or_path: str | Path | Hardware, *, recalibrate: bool = False) -> Hardware:
    """A preset by name (case and ``_``/``-`` insensitive), ``"local"``, a TOML/JSON file, or a Hardware as is.

    ``"local"`` measures this machine's device (the GPU when torch sees one, else the CPU;
    ``"local:cpu"`` / ``"local:cuda"`` choose) once and caches the result, see
    :mod:`opcount.calibrate`; ``recalibrate=True`` measures again.
    """
    if isinstance(name_or_path, Hardware):
        return name_or_path
    text = str(name_or_path)
    key = text.strip().lower().replace("_", "-").replace(" ", "-")
    key = ALIASES.get(key, key)
    if key in PRESETS:
        return PRESETS[key]
    if key == LOCAL or key.startswith(LOCAL + ":"):
        from .calibrate import local_hardware  # imports torch: only when asked

        return local_hardware(key.partition(":")[2] or None, recalibrate=recalibrate)
    path = Path(text)
    if path.suffix.lower() in (".toml", ".json") or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"no hardware file {text!r}")
        return Hardware.from_file(path)
    raise UnknownHardwareError(_unknown(text, key))


def _unknown(text: str, key: str) -> str:
    if key in RETIRED:
        return f"unknown hardware {text!r}: use {RETIRED[key]}"
    names = sorted([*PRESETS, *ALIASES, LOCAL])
    close = difflib.get_close_matches(key, names, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (
        f"unknown hardware {text!r}: {hint}choose one of {', '.join(sorted(PRESETS))}, local (aliases: "
        f"{', '.join(f'{a}={n}' for a, n in sorted(ALIASES.items()))}) or give a .toml/.json file"
    )
