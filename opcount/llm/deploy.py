"""One phase of an LLM deployed on a parallel layout: what each device holds, the collectives it
runs, its time per step, whether it fits, the largest batch that does, and the cost per token.

Per device, from the phase's single-device trace (:mod:`.parallel` says what is split):

- **weights**: a parameter split by the tensor-parallel plan holds ``1 / tp`` of its bytes, an
  expert's ``1 / ep`` under expert parallelism; a pipeline stage holds its layers (the first stage
  also what runs before them, the last what runs after); the device holding the most is reported;
- **KV cache**: ``kv_heads / tp`` heads a device (one when ``tp`` exceeds them, copied as vLLM
  does), the stage's layers; **activations**: the whole phase's peak working set (an upper bound);
- **time**: each operator's FLOPs and bytes divided as its region is (``1 / tp`` in a split
  attention or MLP, ``dp / ep`` of the experts' tokens and ``1 / ep`` of their weights), priced at
  the roofline, plus the collectives, which do not overlap the compute: a bound, as the roofline is.
  :func:`step_time` is where they combine.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from ..errors import OpcountError, OpcountValueError
from ..hardware.interconnect import Collective, all_gather, all_reduce, all_to_all, send_recv
from ..hardware.lookup import Hardware
from ..ir import DTYPE_BYTES, OpCall
from ..roofline.report import LayerTime
from .limits import MAX_BATCH
from .model import KV_PREFIX
from .parallel import Parallel, Sharding, check_layout, kv_heads_per_device
from .precision import Precision, quantized_weights, weight_bytes

DEFAULT_RESERVE = 0.1  # of a device's memory, for the engine: vLLM's gpu_memory_utilization defaults to 0.9
MAX_PRICE = 1e4  # dollars per device-hour: above any rental price


@dataclass(frozen=True)
class DeviceMemory:
    """Bytes one device holds. ``gradients`` and ``optimizer`` are 0 at inference."""

    weights: float
    kv_cache: float
    activations: float
    gradients: float = 0.0
    optimizer: float = 0.0

    @property
    def total(self) -> float:
        return self.weights + self.kv_cache + self.activations + self.gradients + self.optimizer

    def as_dict(self) -> dict[str, float]:
        return {
            "weights": self.weights,
            "kv_cache": self.kv_cache,
            "activations": self.activations,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "total": self.total,
        }


@dataclass
class Deployment:
    """A phase (or generation) on ``parallel``: per-device memory against ``capacity`` (the device's
    memory less ``reserve``), communication and time per step, tokens/s over all replicas, cost."""

    parallel: Parallel
    hardware: str | None
    per_device: DeviceMemory
    model_bytes: float  # everything the layout holds, replicas excepted: what "needs >= N devices" divides
    reserve: float
    capacity: float | None
    communication_bytes: float
    communication_time: float | None
    compute_time: float | None
    tokens: int  # per step per replica
    price: float | None = None
    cost: dict[str, float] | None = None
    max_batch: int | None = None
    collectives: list[Collective] = field(default_factory=list)

    @property
    def fits(self) -> bool | None:
        return None if self.capacity is None else self.per_device.total <= self.capacity

    @property
    def needs(self) -> int | None:
        """Devices at least, if the layout's bytes were spread evenly over them."""
        return None if not self.capacity else math.ceil(self.model_bytes / self.capacity)

    @property
    def time(self) -> float | None:
        return step_time(self.compute_time, self.communication_time)

    @property
    def tokens_per_s(self) -> float | None:
        time = self.time
        return None if not time else self.tokens * self.parallel.dp / time


def step_time(compute: float | None, communication: float | None) -> float | None:
    """A step's time per device: compute/memory, then the collectives (no overlap assumed)."""
    if compute is None:
        return None
    return compute + (communication or 0.0)


# ------------------------------------------------------------------------------------------------
# What each device holds
# ------------------------------------------------------------------------------------------------
class Placement:
    """A model's layout: its sharding, its decoder layers' stages, each parameter's bytes."""

    def __init__(self, model: nn.Module, config: Any, precision: Precision, parallel: Parallel) -> None:
        self.parallel = parallel
        self.sharding = Sharding.of(model)
        check_layout(model, config, parallel, self.sharding)
        self.layers = int(getattr(config, "num_hidden_layers", 1))
        self.stage_of: dict[str, int] = {}  # module -> stage, for the modules of a decoder layer
        stack = _decoder_layers(model, self.layers) if parallel.pp > 1 else None
        order = [name for name, _ in model.named_modules()]
        self._after = set(order[order.index(stack[0]) + 1 :]) if stack else set()
        for index, name in enumerate(stack[1] if stack else ()):
            for sub, _ in model.get_submodule(name).named_modules(prefix=name):
                self.stage_of[sub] = index * parallel.pp // self.layers
        quantized = quantized_weights(model)
        self.param_bytes: dict[str, int] = {}
        for name, p in model.named_parameters():
            if name in quantized:
                self.param_bytes[name] = weight_bytes(tuple(p.shape), precision.weight)
            else:
                dtype = precision.stored if p.is_floating_point() else str(p.dtype).removeprefix("torch.")
                self.param_bytes[name] = p.numel() * int(DTYPE_BYTES[dtype])
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or getattr(config, "num_attention_heads", 1))

    def stage(self, owners: Sequence[str]) -> int:
        """The pipeline stage running a module scope: its decoder layer's, else the first stage
        before the layers and the last after them."""
        for owner in reversed(owners):
            if owner in self.stage_of:
                return self.stage_of[owner]
        return self.parallel.pp - 1 if any(o in self._after for o in owners) else 0

    def weights_per_stage(self) -> list[float]:
        """Bytes of weights a device of each stage holds."""
        p, s = self.parallel, self.sharding
        out = [0.0] * p.pp
        for name, nbytes in self.param_bytes.items():
            module = s.owner.get(name, "")
            share = 1.0
            if s.expert_block((module,)) is not None and p.ep > 1:
                share = 1 / p.ep
            elif s.split(name):
                share = 1 / p.tp
            out[self.stage((module,))] += nbytes * share
        return out

    def kv_share(self, calls: Sequence[OpCall]) -> float:
        """The share of the KV cache a device holds: ``kv_heads_per_device / kv_heads`` when the
        attention that writes it is split by tensor parallelism, else all of it (replicated)."""
        if self.parallel.tp == 1:
            return 1.0
        split = {self.sharding.in_region(c.scope) is not None for c in calls if _touches_cache(c)}
        if len(split) > 1:
            raise OpcountError("the KV cache is read both inside and outside the tensor-parallel attention")
        if split == {True}:
            return kv_heads_per_device(self.kv_heads, self.parallel.tp) / self.kv_heads
        return 1.0

    def stage_layers(self) -> list[int]:
        counts = [0] * self.parallel.pp
        for i in range(self.layers):
            counts[i * self.parallel.pp // self.layers] += 1
        return counts


def _decoder_layers(model: nn.Module, layers: int) -> tuple[str, list[str]]:
    """The decoder layers' list (the first ``nn.ModuleList`` of ``layers`` entries) and its entries' names."""
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == layers:
            return name, [f"{name}.{child}" for child, _ in module.named_children()]
    raise OpcountError(f"{type(model).__name__}: no list of its {layers} decoder layers to split into pipeline stages")


def _touches_cache(call: OpCall) -> bool:
    return any(
        t.param is not None and t.param.startswith(KV_PREFIX + ".")
        for t in (*call.inputs, *call.outputs)
        if hasattr(t, "param")
    )
