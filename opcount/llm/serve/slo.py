"""A latency target as a serving engineer states it: a metric (``ttft``, ``tpot``, ``itl`` or ``e2el``, the names
``vllm bench serve`` gives them), a percentile (p50 unless stated) and a duration. Written ``2s``, ``200ms`` or
``p90:2s`` (``--slo-ttft p90:2s``); a bare number is refused, since ``vllm bench serve --goodput ttft:MS`` reads
milliseconds and a reader of ``--slo-ttft 2`` could mean either."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ...errors import OpcountValueError

METRICS = ("ttft", "tpot", "itl", "e2el")
_TEXT = re.compile(r"^(?:p(?P<p>\d+(?:\.\d+)?):)?(?P<value>\d+(?:\.\d*)?|\.\d+)(?P<unit>ms|s)$")
MAX_SECONDS = 86_400.0  # a day: a target beyond it is a typo, not a latency


@dataclass(frozen=True)
class Slo:
    """``metric`` at ``percentile`` (0 < p <= 100) at most ``seconds``."""

    metric: str
    seconds: float
    percentile: float = 50.0

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise OpcountValueError(f"unknown latency {self.metric!r}; choose one of {', '.join(METRICS)}")
        if not (math.isfinite(self.seconds) and 0 < self.seconds <= MAX_SECONDS):
            raise OpcountValueError(
                f"a {self.metric} target must be above 0 s and at most a day, got {self.seconds!r} s"
            )
        if not (math.isfinite(self.percentile) and 0 < self.percentile <= 100):
            raise OpcountValueError(f"a percentile is above 0 and at most 100, got p{self.percentile:g}")

    @property
    def key(self) -> str:
        """The metric's key among ``vllm bench serve``'s names in milliseconds (``p90_ttft_ms``; p50 is its median)."""
        return f"median_{self.metric}_ms" if self.percentile == 50 else f"p{self.percentile:g}_{self.metric}_ms"

    def met(self, seconds: float) -> bool:
        return seconds <= self.seconds

    def __str__(self) -> str:
        return f"{self.metric} p{self.percentile:g} <= {self.seconds:g} s"


def parse(metric: str, text: str) -> Slo:
    """``text`` (``[pNN:]DURATION``, the duration in ``s`` or ``ms``) as a target on ``metric``."""
    found = _TEXT.match(text.strip())
    if found is None:
        raise OpcountValueError(
            f"a {metric} target is a duration with its unit, optionally after a percentile: 2s, 200ms or p90:2s; got {text!r}"
        )
    value = float(found["value"]) / (1000.0 if found["unit"] == "ms" else 1.0)
    return Slo(metric, value, float(found["p"]) if found["p"] is not None else 50.0)
