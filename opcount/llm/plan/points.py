"""One simulated configuration as the plan and its frontier read it (:class:`Point`): what it is (hardware,
layout, devices, the traffic it served) and what it gave (throughput per device and per user, latencies,
cost, energy). The search makes them; the frontier, its files and the ranking read only these."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .energy import tokens_per_s_per_mw


@dataclass(frozen=True, kw_only=True)
class Point:
    """A configuration and its simulated figures. ``layout`` is its name as the command line writes it
    (``tp4``, ``tp2 pp2``, ``prefill tp2 x2 + decode tp8``); ``concurrency`` the clients (or None under a
    rate); throughput is output tokens a second, per device (every device of the configuration) and per
    user (1 / mean TPOT); latencies in seconds at the percentiles named; ``cost_per_m_tokens`` in the
    currency of the prices given, per million output tokens, None without a price; ``joules_per_token`` per
    output token at board power (:mod:`.energy`), None where a device states no power; ``precision`` the
    weights' dtype as the search names it."""

    hardware: str
    layout: str
    devices: int
    concurrency: int | None
    rate: float | None
    tokens_per_s_per_device: float
    tokens_per_s_per_user: float
    ttft_p50_s: float
    ttft_p90_s: float
    tpot_p50_s: float
    tpot_p90_s: float
    cost_per_m_tokens: float | None
    joules_per_token: float | None
    meets_slo: bool
    binds: str  # what limits it: compute, memory, capacity, network (the plan's reason)
    precision: str | None = None

    @property
    def tokens_per_s_per_mw(self) -> float | None:
        """Output tokens a second per megawatt of board power (:mod:`.energy`)."""
        return tokens_per_s_per_mw(self.joules_per_token)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"tokens_per_s_per_mw": self.tokens_per_s_per_mw}
