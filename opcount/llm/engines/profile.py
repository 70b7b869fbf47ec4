"""An engine profile: the few costs a serving engine pays that the kernels' estimate leaves out, each a
named parameter with its range and its source (:class:`EngineProfile`), the built-in profiles of vLLM,
SGLang and TensorRT-LLM (:data:`BUILTIN`), and a profile as a JSON file (:func:`load`, :func:`dumps`).

The parameters (how each becomes seconds is :mod:`.terms`):

- ``step_overhead_s``: a fixed cost per engine step, the scheduler, sampling and the launch of the step's
  CUDA graph, paid once a forward whatever its size;
- ``collective_latency_s``: each collective call's latency beyond the ring's hop latency the deployment
  already prices (NCCL's launch and synchronisation; nccl-tests' ``all_reduce_perf`` reports a time per call
  that stays flat, latency-bound, below a few hundred KB: PERFORMANCE.md in NVIDIA/nccl-tests);
- ``gemm_small_m_efficiency``: the share of the estimate's speed a step's kernels keep when its GEMMs have
  a single row per sequence: a decode GEMM of ``M`` rows is padded to the kernel's 64-row tile and streams
  its weights through fewer thread blocks than the bandwidth needs; linear in ``M`` up to the tile, where
  it reaches 1 (:data:`opcount.hardware.efficiency.TILE_ROWS`);
- ``prefill_efficiency``: the share of the estimate's speed a prompt's kernels keep at the engine's own GEMM
  shapes and attention kernels (the estimate's factors are the best of a microbenchmark's sweep of shapes:
  :mod:`opcount.hardware.efficiency`);
- ``moe_routing_s``: the router's top-k, and the permutation of tokens to their experts and back, per
  mixture-of-experts block a step (the fused-MoE kernels' align-and-sort and unpermute passes);
- ``attention_decode_efficiency``: the share of the streaming bandwidth a decode step's attention reaches
  reading its KV cache (paged blocks, split-KV reductions), so that its cost grows with the context read;
- ``overlap``: the share of the collectives' time an engine hides under its kernels (0: none);
- ``software_dequant``: where the hardware has no tensor peak for the weights' 4-bit format (MXFP4 on CDNA3),
  the kernels' extra time converting weights in software, as a multiple of the kernels' time;
- ``ttft_overhead_s``: the server's own time to first token (HTTP, tokenisation, detokenising the first
  token), a separate term added to each request's TTFT, not to a step.

No profile (``None``) adds nothing: the estimate is the kernels' and the collectives' alone, as it was.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ...errors import OpcountValueError
from ...files.read import parse_json, read_text

# each parameter's physical range: what calibrate searches within and a file may hold
RANGES: dict[str, tuple[float, float]] = {
    "step_overhead_s": (0.0, 0.05),
    # nccl-tests' small all-reduce within one NVLink or xGMI domain takes tens of microseconds at most: a fit that
    # wants more is pricing something else per layer
    "collective_latency_s": (0.0, 5e-5),
    "gemm_small_m_efficiency": (0.1, 1.0),
    "prefill_efficiency": (0.02, 1.0),  # an unoptimised prompt path (early MLA on ROCm) runs far below the estimate
    # a top-k, an align-and-sort and an unpermute: a few kernels of a few microseconds each
    "moe_routing_s": (0.0, 1e-4),
    "attention_decode_efficiency": (0.1, 1.0),
    "overlap": (0.0, 1.0),
    "software_dequant": (0.0, 4.0),
    # a server's own time to first token (HTTP, tokenisation) is tens of milliseconds: more would be a queue
    "ttft_overhead_s": (0.0, 0.1),
}
ENGINES = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True)
class EngineProfile:
    """One engine's parameters (the module's docstring), ``sources`` saying where each value comes from, and
    ``fit`` what calibration found (rows, leave-one-out error), empty for a built-in profile."""

    name: str = "none"
    step_overhead_s: float = 0.0
    collective_latency_s: float = 0.0
    gemm_small_m_efficiency: float = 1.0
    prefill_efficiency: float = 1.0
    moe_routing_s: float = 0.0
    attention_decode_efficiency: float = 1.0
    overlap: float = 0.0
    software_dequant: float = 0.0
    ttft_overhead_s: float = 0.0
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    fit: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise OpcountValueError(f"an engine profile's name must be a non-empty string, got {self.name!r}")
        for key, (low, high) in RANGES.items():
            value = getattr(self, key)
            number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            if not number or not low <= value <= high:
                raise OpcountValueError(
                    f"engine profile {self.name}: {key} must be a number from {low:g} to {high:g}, got {value!r}"
                )
            object.__setattr__(self, key, float(value))

    def parameters(self) -> dict[str, float]:
        return {key: getattr(self, key) for key in RANGES}

    def with_parameters(self, values: Mapping[str, float], **extra: Any) -> EngineProfile:
        """This profile with ``values`` in place of its parameters (and ``extra``: ``name``, ``sources``, ``fit``)."""
        changes: dict[str, Any] = {**values, **extra}
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"engine": self.name, "parameters": self.parameters()}
        if self.sources:
            out["sources"] = dict(self.sources)
        if self.fit:
            out["fit"] = dict(self.fit)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "engine profile") -> EngineProfile:
        if not isinstance(data, Mapping) or not isinstance(data.get("parameters"), Mapping):
            raise OpcountValueError(f"{where}: expected an object with 'engine' and 'parameters'")
        unknown = set(data) - {"engine", "parameters", "sources", "fit"}
        unknown_parameters = set(data["parameters"]) - set(RANGES)
        if unknown or unknown_parameters:
            raise OpcountValueError(
                f"{where}: unknown keys {sorted(unknown | unknown_parameters)}; parameters are {sorted(RANGES)}"
            )
        sources, fit = data.get("sources", {}), data.get("fit", {})
        if not isinstance(sources, Mapping) or not isinstance(fit, Mapping):
            raise OpcountValueError(f"{where}: 'sources' and 'fit' must be objects")
        names = {f.name for f in fields(cls)}
        assert set(RANGES) <= names
        try:
            return cls(str(data.get("engine", "custom")), **dict(data["parameters"]), sources=sources, fit=fit)
        except OpcountValueError as e:
            raise OpcountValueError(f"{where}: {e}") from e


def load(path: str | Path) -> EngineProfile:
    """A profile file (what ``opcount calibrate`` writes); each failure one line naming the file."""
    return EngineProfile.from_dict(parse_json(read_text(path, "an engine profile"), path), str(path))


def dumps(profile: EngineProfile) -> str:
    return json.dumps(profile.as_dict(), indent=2) + "\n"


_NCCL = (
    "nccl-tests all_reduce_perf (NVIDIA/nccl-tests, PERFORMANCE.md): a small all-reduce's time per call is its "
    "latency, flat below a few hundred KB; the engines' one-shot custom all-reduce for small messages "
    "(vLLM's csrc/custom_all_reduce.cuh, TensorRT-LLM's AllReduce plugin) keeps it to a few microseconds on NVLink"
)
_FUSED_MOE = (
    "the fused-MoE path runs, per block and step, a top-k, an align-and-sort of the routes and an unpermute "
    "(vLLM's fused_moe moe_align_block_size, SGLang's and TensorRT-LLM's equivalents): a few small kernels of a "
    "few microseconds each"
)
_SMALL_M = (
    "a decode GEMM of M rows is padded to a 64-row tile (CUTLASS's smallest efficient tile, "
    "opcount.hardware.efficiency) and streams its weights through few thread blocks: below the tile it reaches "
    "a fraction of the bandwidth a large GEMM does"
)
_PREFILL = (
    "the estimate's GEMM factors are the best shapes of Stas Bekman's mamf-finder sweep "
    "(opcount.hardware.efficiency); a prompt's GEMMs and attention at the engine's own shapes reach at most that: "
    "1 until calibrated"
)
_ATTENTION = (
    "paged decode attention reads its KV blocks through a page table and reduces split-KV partials "
    "(FlashDecoding, Dao et al. 2023; FlashInfer, Ye et al. 2025): below the streaming bandwidth"
)
_DEQUANT = (
    "MXFP4 weights on a device with no FP4 tensor cores (MI300X, CDNA3) are converted in software inside the "
    "GEMM before a BF16 or FP8 product (vLLM's and SGLang's Triton MoE kernels on ROCm)"
)
_TTFT = (
    "the OpenAI-compatible server's time to first token beyond the prefill: HTTP, tokenisation and "
    "detokenisation, measured by vllm bench serve from the client"
)


def _sources(step_overhead: str, overlap: str) -> dict[str, str]:
    """A built-in profile's sources: its engine's own for the per-step cost and the overlap, the rest shared."""
    return {
        "step_overhead_s": step_overhead, "collective_latency_s": _NCCL, "gemm_small_m_efficiency": _SMALL_M,
        "prefill_efficiency": _PREFILL, "moe_routing_s": _FUSED_MOE, "attention_decode_efficiency": _ATTENTION,
        "overlap": overlap, "software_dequant": _DEQUANT, "ttft_overhead_s": _TTFT,
    }  # fmt: skip


BUILTIN: dict[str, EngineProfile] = {
    "vllm": EngineProfile(
        "vllm",
        step_overhead_s=0.5e-3,
        collective_latency_s=8e-6,
        gemm_small_m_efficiency=0.85,
        moe_routing_s=30e-6,
        attention_decode_efficiency=0.8,
        overlap=0.0,
        software_dequant=1.0,
        ttft_overhead_s=15e-3,
        sources=_sources(
            "vLLM V1 (blog 'vLLM V1', January 2025): the scheduler and the API server run in "
            "their own processes beside the model's step under CUDA graphs; the value is a starting point of the order "
            "a host-side step costs, for opcount calibrate to refit",
            "vLLM runs its collectives after the kernels they reduce: none hidden",
        ),
    ),
    "sglang": EngineProfile(
        "sglang",
        step_overhead_s=0.3e-3,
        collective_latency_s=8e-6,
        gemm_small_m_efficiency=0.85,
        moe_routing_s=30e-6,
        attention_decode_efficiency=0.8,
        overlap=0.0,
        software_dequant=1.0,
        ttft_overhead_s=15e-3,
        sources=_sources(
            "SGLang v0.4 (blog, December 2024): the zero-overhead batch scheduler prepares the "
            "next batch while the GPU runs the current one; a sampling and graph-launch cost remains (half vLLM's "
            "starting point)",
            "two-batch overlap is a flag (--enable-two-batch-overlap), priced by the deployment itself",
        ),
    ),
    "trtllm": EngineProfile(
        "trtllm",
        step_overhead_s=0.2e-3,
        collective_latency_s=6e-6,
        gemm_small_m_efficiency=0.85,
        moe_routing_s=20e-6,
        attention_decode_efficiency=0.8,
        overlap=0.0,
        software_dequant=1.0,
        ttft_overhead_s=10e-3,
        sources=_sources(
            "TensorRT-LLM's C++ executor (batch manager) schedules in-flight batches without "
            "a Python step; its overlap scheduler hides the host's work behind the GPU's (less than SGLang's starting "
            "point)",
            "collectives run after the GEMMs they reduce (AllReduce fused with the next RMSNorm): none hidden",
        ),
    ),
}


def resolve(engine: str | None, path: str | Path | None) -> EngineProfile | None:
    """The profile ``--engine`` names or ``--engine-profile`` holds (a file wins over its engine's built-in);
    None for neither: the estimate as it was."""
    if path is not None:
        return load(path)
    if engine is None:
        return None
    if engine not in BUILTIN:
        raise OpcountValueError(f"--engine {engine!r}: expected one of {', '.join(ENGINES)}")
    return BUILTIN[engine]
