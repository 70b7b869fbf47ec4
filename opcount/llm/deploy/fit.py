"""Whether a phase fits the devices of a layout as a serving engine sizes them, the largest batch that
does, and where it does not, the smallest layout that fits (:mod:`.deployment` gives the per-device
figures; this module is their arithmetic).

- **Capacity**: the memory the device reports (``Hardware.memory_bytes``: ``nvidia-smi``'s
  ``memory.total`` in the presets) times ``gpu_memory_utilization``, the share vLLM takes for the
  weights, the activations and the KV cache (default 0.9: ``CacheConfig.gpu_memory_utilization`` in
  vllm/config/cache.py, ``--gpu-memory-utilization`` among vLLM's engine arguments).
- **Activations**: an engine runs at most ``max_num_batched_tokens`` tokens a step, a long prompt in
  chunks (chunked prefill, always on in vLLM V1), and sizes its activation workspace by a profiling
  run of that many tokens. A step of more tokens holds its traced working set scaled to that many:
  the working set is linear in a step's tokens, as it is in the batch. The default is vLLM V1's for
  its OpenAI-compatible server: 8192 tokens on a device of at least 70 GiB that is not an A100, 2048
  on any other (``EngineArgs.get_batch_defaults`` in vllm/engine/arg_utils.py).
- **The largest batch**: the weights fixed, the cache linear in the batch, the activations linear
  until a step reaches ``max_batched_tokens`` tokens and flat after.
- **A layout that fits**, as vLLM's "Distributed Inference and Serving" guide lays a model out: tensor
  parallelism within a node (the smallest ``tp`` that fits), else a node's tensor parallelism times
  pipeline stages, one a node, up to :data:`HINT_NODES` nodes. Each candidate is priced by the
  deployment's own per-device figures, so a cache every rank holds whole (MLA) counts whole on each.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from ...errors import OpcountValueError
from ...hardware.lookup import Hardware
from ..models.limits import MAX_BATCH
from .figures import DeviceMemory
from .layout import Parallel

GIB = 2**30
# vLLM V1's max_num_batched_tokens for its OpenAI-compatible server (EngineArgs.get_batch_defaults): 8192 on a
# device of 70 GiB or more that is not an A100 (H100, H200, MI300X...), 2048 on the others and where vLLM cannot
# read the device (its offline LLM class doubles both: 16384 and 8192).
LARGE_DEVICE, LARGE_DEFAULT, SMALL_DEFAULT = 70 * GIB, 8192, 2048
HINT_NODES = 8  # the most nodes a suggested layout spans (64 devices on 8-GPU servers)


def default_max_batched_tokens(hardware: Hardware | None) -> int:
    """vLLM V1's ``max_num_batched_tokens`` on ``hardware`` (its OpenAI-compatible server's default)."""
    if hardware is None or hardware.memory_bytes is None:
        return SMALL_DEFAULT
    large = hardware.memory_bytes >= LARGE_DEVICE and "a100" not in hardware.name.lower()
    return LARGE_DEFAULT if large else SMALL_DEFAULT


def check(gpu_memory_utilization: float, max_batched_tokens: int | None) -> None:
    """Refuse a share of memory outside (0, 1] or a token budget below one token."""
    u = gpu_memory_utilization
    if not (isinstance(u, (int, float)) and not isinstance(u, bool) and 0 < u <= 1):
        raise OpcountValueError(f"gpu_memory_utilization must be a fraction above 0 and up to 1, got {u!r}")
    m = max_batched_tokens
    if m is not None and not (isinstance(m, int) and not isinstance(m, bool) and m >= 1):
        raise OpcountValueError(f"max_batched_tokens must be a whole number of tokens from 1, got {m!r}")


def capacity(hardware: Hardware | None, gpu_memory_utilization: float) -> float | None:
    """The bytes an engine gives weights, activations and cache on ``hardware``; None where it says no memory."""
    if hardware is None or hardware.memory_bytes is None:
        return None
    return hardware.memory_bytes * gpu_memory_utilization


@dataclass(frozen=True)
class Holding:
    """What one device of a pipeline stage holds at the batch traced: its weights, its share of the cache,
    and the working set of each step it runs, with that step's tokens (a generation: its prompt, its last
    decode step)."""

    weights: float
    kv_cache: float
    steps: tuple[tuple[float, int], ...]  # (the step's working set at the batch traced, its tokens)

    def activations(self, scale: float, max_batched_tokens: int) -> float:
        """The largest working set at ``scale`` times the batch traced, no step above ``max_batched_tokens`` tokens."""
        return max((peak * min(scale, max_batched_tokens / max(tokens, 1)) for peak, tokens in self.steps), default=0.0)

    def memory(self, max_batched_tokens: int, scale: float = 1.0) -> DeviceMemory:
        """The device's bytes at ``scale`` times the batch traced."""
        return DeviceMemory(self.weights, self.kv_cache * scale, self.activations(scale, max_batched_tokens))


def busiest(holdings: Sequence[Holding], max_batched_tokens: int) -> DeviceMemory:
    """The device holding the most at the batch traced."""
    return max((h.memory(max_batched_tokens) for h in holdings), key=lambda m: m.total)


def largest_batch(holdings: Sequence[Holding], batch: int, capacity: float, max_batched_tokens: int) -> int:
    """The most sequences every stage's device holds within ``capacity`` (``batch``: the batch traced);
    0 when one does not fit. Each device's bytes grow with the batch, so the answer is found by halving."""

    def fits(sequences: int) -> bool:
        scale = sequences / batch
        return all(h.memory(max_batched_tokens, scale).total <= capacity for h in holdings)

    if not fits(1):
        return 0
    low, high = 1, MAX_BATCH  # fits(low) holds; above high is not asked
    if fits(high):
        return high
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    return low


@dataclass(frozen=True)
class Suggestion:
    """The smallest layout found to fit (None: none did), and the most devices searched."""

    layout: Parallel | None
    per_device: float | None  # the busiest device's bytes on it
    searched: int  # devices: the search's bound
    reason: str = ""  # why nothing was searched (no links between devices), if so


def suggest(
    holdings_of: Callable[[Parallel], Sequence[Holding] | None],
    hardware: Hardware,
    capacity: float,
    max_batched_tokens: int,
    alone: float,
) -> Suggestion:
    """The smallest layout whose busiest device holds at most ``capacity``: ``holdings_of`` gives a layout's
    per-stage holdings, None for one the model cannot run. ``alone``: one device's bytes; a layout of ``n``
    devices holds at least ``alone / n`` on its busiest (a split share is never below ``1 / n``), so fewer
    devices are not tried."""
    link = hardware.interconnect
    if link is None:
        return Suggestion(None, None, 0, f"{hardware.name} has no interconnect figures for a layout of several")
    node, limit = link.devices_per_node, HINT_NODES * link.devices_per_node
    least = math.ceil(alone / capacity)
    seen: dict[Parallel, Sequence[Holding] | None] = {}

    def of(layout: Parallel) -> Sequence[Holding] | None:
        if layout not in seen:
            seen[layout] = holdings_of(layout)
        return seen[layout]

    for layout in _candidates(of, node, limit):
        if layout.tp * layout.pp < least:
            continue
        holdings = of(layout)
        if holdings is None:
            continue
        total = busiest(holdings, max_batched_tokens).total
        if total <= capacity:
            return Suggestion(layout, total, limit)
    return Suggestion(None, None, limit)


def _candidates(
    holdings_of: Callable[[Parallel], Sequence[Holding] | None], node: int, limit: int
) -> Iterator[Parallel]:
    """Tensor parallelism within a node, smallest first; then the largest ``tp`` of a node the model takes
    (1 without a plan) times 2, 3, ... pipeline stages, up to ``limit`` devices."""
    yield from (Parallel(tp=tp) for tp in range(2, min(node, limit) + 1))
    widest = next((tp for tp in range(min(node, limit), 1, -1) if holdings_of(Parallel(tp=tp)) is not None), 1)
    for pp in range(2, limit // widest + 1):
        yield Parallel(tp=widest, pp=pp)
