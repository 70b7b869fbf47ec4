"""The links between devices and what a collective costs on them.

An :class:`Interconnect` is plain data: the per-device scale-up bandwidth inside a node (NVLink
and NVSwitch, Infinity Fabric), the devices a node holds, and the per-device scale-out network
between nodes (InfiniBand, RoCE). Bandwidths are per device and per direction, the figure NCCL's
"bus bandwidth" reaches at best (nccl-tests, PERFORMANCE.md): a datasheet's bidirectional NVLink
figure is twice it. Latencies are per step of a ring, the hop latency of NCCL's tuning model
(src/graph/tuning.cc); its fixed launch latency per collective is left out, so that a collective's
time is a bound no library beats.

The collectives (:func:`all_reduce`, :func:`reduce_scatter`, :func:`all_gather`,
:func:`all_to_all`, :func:`send_recv`) price ``payload`` bytes per device on ``devices`` devices
in the ring algorithm's closed forms: an all-reduce sends ``2 (n - 1) / n x payload`` per device
in ``2 (n - 1)`` steps; a reduce-scatter or an all-gather ``(n - 1) / n x payload`` in ``n - 1``.
A group wider than a node runs at the network's bandwidth and latency (the slowest link of a ring).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import OpcountError, OpcountValueError

# Physical ranges of the figures (a figure outside them is a typo or a unit slip): links from
# 1 MB/s to 1 PB/s per direction; latencies from 1 ns to 1 s per step; 1 to a million devices a node.
RANGES: dict[str, tuple[float, float, str]] = {
    "bandwidth": (1e6, 1e15, "bytes/s"),
    "latency": (1e-9, 1.0, "s"),
    "devices_per_node": (1, 1e6, "devices"),
}
# Per step of a ring: NCCL's tuning model (src/graph/tuning.cc, ring algorithm, LL protocol), 0.47 us an
# NVLink hop, 2.7 us a network hop; AMD publishes none for Infinity Fabric, which takes the NVLink figure.
NVLINK_STEP, NETWORK_STEP = 0.47e-6, 2.7e-6
FIELDS = {
    "bandwidth": "bandwidth",
    "latency": "latency",
    "devices_per_node": "devices_per_node",
    "network_bandwidth": "bandwidth",
    "network_latency": "latency",
}


@dataclass(frozen=True)
class Interconnect:
    """``bandwidth`` (bytes/s per device per direction) and ``latency`` (s per step) inside a node
    of ``devices_per_node``; ``network_bandwidth`` and ``network_latency`` between nodes (None: the
    device is sold as one node, no layout spans two)."""

    bandwidth: float
    latency: float
    devices_per_node: int
    network_bandwidth: float | None = None
    network_latency: float | None = None
    description: str = ""

    def __post_init__(self) -> None:
        for name, kind in FIELDS.items():
            value = getattr(self, name)
            if value is None and name.startswith("network_"):
                continue
            _check(name, kind, value)
        if not isinstance(self.devices_per_node, int) or isinstance(self.devices_per_node, bool):
            raise OpcountValueError(
                f"interconnect: devices_per_node must be a whole number, got {self.devices_per_node!r}"
            )
        if (self.network_bandwidth is None) != (self.network_latency is None):
            raise OpcountValueError("interconnect: give network_bandwidth and network_latency together")

    def link(self, devices: int, name: str = "this device") -> tuple[float, float]:
        """(bandwidth, latency per step) of a group of ``devices``: the node's links when it fits in
        one node, else the network's."""
        if devices <= self.devices_per_node:
            return self.bandwidth, self.latency
        if self.network_bandwidth is None or self.network_latency is None:
            raise OpcountError(
                f"{name}: a group of {devices} devices spans nodes of {self.devices_per_node}, and no network "
                "between nodes is given (network_bandwidth, network_latency)"
            )
        return self.network_bandwidth, self.network_latency

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {f: getattr(self, f) for f in FIELDS if getattr(self, f) is not None}
        if self.description:
            out["description"] = self.description
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interconnect:
        allowed = {*FIELDS, "description"}
        unknown = set(data) - allowed
        if unknown:
            raise OpcountValueError(f"unknown interconnect keys {sorted(unknown)}; allowed: {sorted(allowed)}")
        missing = {"bandwidth", "latency", "devices_per_node"} - set(data)
        if missing:
            raise OpcountValueError(f"interconnect lacks {sorted(missing)}")
        return cls(**dict(data))


def scale_up(bidirectional: float, devices: int, network_gbit: float, description: str) -> Interconnect:
    """One scale-up domain (NVLink + NVSwitch, Infinity Fabric) of ``devices`` joined at
    ``bidirectional`` bytes/s per device (half each way, as a datasheet's NVLink figure counts both),
    and ``network_gbit`` Gb/s per device between domains (one NIC a GPU), at NCCL's hop latencies."""
    return Interconnect(
        bidirectional / 2, NVLINK_STEP, devices, network_gbit * 1e9 / 8, NETWORK_STEP, description=description
    )


def _check(name: str, kind: str, value: object) -> None:
    low, high, unit = RANGES[kind]
    number = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not number or not low <= value <= high:  # type: ignore[operator]
        raise OpcountValueError(
            f"interconnect: {name} must be a number of {unit} from {low:g} to {high:g}, got {value!r}"
        )


@dataclass(frozen=True)
class Collective:
    """One collective: ``sent`` bytes each device sends, in ``steps`` steps, taking ``time`` seconds."""

    kind: str
    devices: int
    payload: float
    sent: float
    steps: int
    time: float


def _priced(kind: str, payload: float, devices: int, fraction: float, steps: int, link: Interconnect) -> Collective:
    if devices < 1:
        raise OpcountValueError(f"{kind}: devices must be >= 1, got {devices}")
    if devices == 1:
        return Collective(kind, 1, payload, 0.0, 0, 0.0)
    bandwidth, latency = link.link(devices)
    sent = fraction * payload
    return Collective(kind, devices, payload, sent, steps, sent / bandwidth + steps * latency)


def all_reduce(payload: float, devices: int, link: Interconnect) -> Collective:
    """Ring all-reduce of ``payload`` bytes on each device: ``2 (n - 1) / n x payload`` sent per device, ``2 (n - 1)`` steps."""
    n = devices
    return _priced("all_reduce", payload, n, 2 * (n - 1) / n, 2 * (n - 1), link)


def reduce_scatter(payload: float, devices: int, link: Interconnect) -> Collective:
    """Ring reduce-scatter of ``payload`` bytes (the whole input) per device: ``(n - 1) / n x payload``, ``n - 1`` steps."""
    n = devices
    return _priced("reduce_scatter", payload, n, (n - 1) / n, n - 1, link)


def all_gather(payload: float, devices: int, link: Interconnect) -> Collective:
    """Ring all-gather into ``payload`` bytes (the whole output) per device: ``(n - 1) / n x payload``, ``n - 1`` steps."""
    n = devices
    return _priced("all_gather", payload, n, (n - 1) / n, n - 1, link)


def all_to_all(payload: float, devices: int, link: Interconnect) -> Collective:
    """All-to-all of ``payload`` bytes per device spread evenly over the ``n`` devices: the
    ``(n - 1) / n`` bound for others are sent, every pair at once (one step of latency)."""
    n = devices
    return _priced("all_to_all", payload, n, (n - 1) / n, 1, link)


def send_recv(payload: float, link: Interconnect, across_nodes: bool = False) -> Collective:
    """``payload`` bytes from one device to the next (a pipeline stage's activations): one step."""
    bandwidth, latency = link.link(link.devices_per_node + 1 if across_nodes else 2)
    return Collective("send_recv", 2, payload, payload, 1, payload / bandwidth + latency)
