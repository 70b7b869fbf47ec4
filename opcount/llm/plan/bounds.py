"""The bounds of a plan's search, counted before a model is built (no trace, no torch model imported): the most
devices, the most configurations simulated, and :func:`space`, the configurations a search may simulate."""

from __future__ import annotations

from collections.abc import Sequence

from ...hardware.lookup import Hardware

MAX_DEVICES = 1024  # --max-devices: a bound on the search, not on any cluster
MAX_SIMULATIONS = 4096  # configurations a search may simulate: above it the space is refused before building


def powers_of_two(most: int) -> list[int]:
    return [2**i for i in range(most.bit_length()) if 2**i <= most]


def engines(hardware: Hardware, max_devices: int) -> list[tuple[int, int]]:
    """The (tp, pp) of every engine on at most ``max_devices`` of ``hardware``: tp a power of two within a node,
    pp a power of two; a device without links alone."""
    node = hardware.interconnect.devices_per_node if hardware.interconnect is not None else 1
    return [
        (tp, pp) for tp in powers_of_two(min(node, max_devices)) for pp in powers_of_two(max_devices // tp)
        if hardware.interconnect is not None or tp * pp == 1
    ]  # fmt: skip


def space(hardware: Sequence[Hardware], precisions: int, max_devices: int) -> int:
    """Every engine and every number of its copies (experts' layouts, known only from the model, not counted)."""
    return precisions * sum(max_devices // (tp * pp) for h in hardware for tp, pp in engines(h, max_devices))
