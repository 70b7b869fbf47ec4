"""The one place an engine profile's terms join the estimate: what a deployed step's shape
(:class:`StepShape`, read from the traced step by the deployment) adds under a profile (:func:`terms`).

Each term is a closed form in the step's own figures, never a fit of the step's time:

- ``step``: ``step_overhead_s``, once a step;
- ``collectives``: ``collective_latency_s`` x the step's collective calls (two all-reduces a layer at
  ``tp > 1``, an all-to-all pair an experts block under expert parallelism);
- ``small_m``: the kernels' seconds x ``(1 / gemm_small_m_efficiency - 1) x max(0, 1 - M / 64)``, with ``M``
  the step's tokens on a device (a decode step's sequences): a batch of one pays the whole factor, a step of a
  full 64-row tile or more none;
- ``prefill``: a prompt's kernels' seconds x ``(1 / prefill_efficiency - 1)``;
- ``moe``: ``moe_routing_s`` x the experts blocks a step runs;
- ``attention``: a decode step's KV read at the streaming bandwidth x ``(1 / attention_decode_efficiency - 1)``;
- ``overlap``: minus ``overlap`` x the smaller of the collectives' and the kernels' seconds;
- ``dequant``: the kernels' seconds x ``software_dequant`` where the weights' 4-bit format has no tensor peak
  on the device.

The bound never sees them: it stays the speed of light whatever the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from ...hardware.efficiency import TILE_ROWS
from .profile import EngineProfile


@dataclass(frozen=True)
class StepShape:
    """What a deployed step is, as the terms read it: its ``phase``, its ``tokens`` on a device (``M``), the
    estimate's ``kernels_s`` and ``communication_s``, its ``collectives`` calls, its ``moe_blocks``, the seconds
    its KV cache takes to stream (``kv_read_s``), and whether its weights are converted in software."""

    phase: str
    tokens: int
    kernels_s: float
    communication_s: float
    collectives: int
    moe_blocks: int
    kv_read_s: float
    software_dequant: bool = False


def terms(profile: EngineProfile, shape: StepShape) -> dict[str, float]:
    """Each term's seconds for one step of ``shape`` under ``profile`` (the module's docstring)."""
    small = max(0.0, 1.0 - shape.tokens / TILE_ROWS)
    return {
        "step": profile.step_overhead_s,
        "collectives": profile.collective_latency_s * shape.collectives,
        "small_m": shape.kernels_s * (1 / profile.gemm_small_m_efficiency - 1) * small,
        "prefill": shape.kernels_s * (1 / profile.prefill_efficiency - 1) if shape.phase == "prefill" else 0.0,
        "moe": profile.moe_routing_s * shape.moe_blocks,
        "attention": shape.kv_read_s * (1 / profile.attention_decode_efficiency - 1)
        if shape.phase == "decode"
        else 0.0,
        "overlap": -profile.overlap * min(shape.communication_s, shape.kernels_s),
        "dequant": shape.kernels_s * profile.software_dequant if shape.software_dequant else 0.0,
    }


# the terms a step pays once whatever its tokens: a prompt that rides in a step the engine runs anyway (beside
# decodes, or beside other prompts in one chunk) adds its tokens' terms, not these
PER_STEP = ("step", "collectives", "moe")


def step_seconds(profile: EngineProfile | None, shape: StepShape) -> float:
    """What ``profile`` adds to a step of ``shape`` (0 without a profile)."""
    return 0.0 if profile is None else sum(terms(profile, shape).values())
