"""A served workload: when requests arrive and how long they are. Open loop (``rate`` requests a second,
Poisson or evenly spaced, as ``vllm bench serve --request-rate`` sends them) or closed loop (``concurrency``
clients, each sending its next request when its last one finishes, as ``--max-concurrency`` with an
unbounded rate does); every prompt ``input_len`` tokens and every answer ``output_len`` tokens."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from ...errors import OpcountValueError

ARRIVALS = ("poisson", "constant")
MAX_REQUESTS = 10_000_000  # a bound on the arithmetic one run does, not a property of any engine


@dataclass(frozen=True, kw_only=True)
class Workload:
    """``requests`` requests of ``input_len`` prompt tokens and ``output_len`` generated tokens, arriving at
    ``rate`` a second (``arrivals``: ``poisson`` or ``constant``) or sent by ``concurrency`` clients in a closed
    loop (exactly one of the two); ``seed`` draws the Poisson gaps."""

    requests: int
    input_len: int
    output_len: int
    rate: float | None = None
    concurrency: int | None = None
    arrivals: str = "poisson"
    seed: int = 0

    def __post_init__(self) -> None:
        for name, least in (("requests", 1), ("input_len", 1), ("output_len", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise OpcountValueError(f"{name} must be a whole number from {least}, got {value!r}")
        if self.requests > MAX_REQUESTS:
            raise OpcountValueError(f"requests must be at most {MAX_REQUESTS:,}, got {self.requests:,}")
        if (self.rate is None) == (self.concurrency is None):
            raise OpcountValueError("a workload takes a rate (requests/s) or a concurrency (clients), one of them")
        if self.rate is not None and not (
            isinstance(self.rate, (int, float)) and not isinstance(self.rate, bool) and math.isfinite(self.rate)
            and self.rate > 0
        ):  # fmt: skip
            raise OpcountValueError(f"rate must be a finite number of requests a second above 0, got {self.rate!r}")
        c = self.concurrency
        if c is not None and (not isinstance(c, int) or isinstance(c, bool) or c < 1):
            raise OpcountValueError(f"concurrency must be a whole number of clients from 1, got {c!r}")
        if self.arrivals not in ARRIVALS:
            raise OpcountValueError(f"unknown arrivals {self.arrivals!r}; choose {' or '.join(ARRIVALS)}")
        if self.concurrency is not None and self.arrivals != "poisson":
            raise OpcountValueError("arrivals apply to a rate: a closed loop sends each request as one finishes")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise OpcountValueError(f"seed must be a whole number, got {self.seed!r}")

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    def first_arrivals(self) -> list[float]:
        """The arrival times known before the run: every request of an open loop (the first at 0, as a
        benchmark client sends its first at once), or a closed loop's first ``concurrency`` ones, all at 0."""
        if self.concurrency is not None:
            return [0.0] * min(self.concurrency, self.requests)
        assert self.rate is not None
        if self.arrivals == "constant":
            return [i / self.rate for i in range(self.requests)]
        draw = random.Random(self.seed)  # its own generator: the same seed, the same gaps, whatever else ran
        times, now = [], 0.0
        for _ in range(self.requests):
            times.append(now)
            now += draw.expovariate(self.rate)
        return times

    def as_dict(self) -> dict[str, object]:
        return {
            "requests": self.requests, "input_len": self.input_len, "output_len": self.output_len,
            "rate": self.rate, "concurrency": self.concurrency,
            "arrivals": None if self.closed_loop else self.arrivals, "seed": self.seed,
        }  # fmt: skip
