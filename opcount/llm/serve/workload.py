"""A served workload: when requests arrive and how long they are. Open loop (``rate`` requests a second,
Poisson or evenly spaced, as ``vllm bench serve --request-rate`` sends them), closed loop (``concurrency``
clients, each sending its next request when its last one finishes, as ``--max-concurrency`` with an
unbounded rate does), or a trace's own arrival times (:mod:`.traces`).

Lengths: ``input_len`` prompt and ``output_len`` generated tokens each, drawn around them as ``vllm bench
serve``'s random dataset draws them with ``--random-range-ratio R`` (``_get_sampling_params`` of
``RandomDataset`` in vllm/benchmarks/datasets.py: uniform whole numbers from ``floor(L (1 - R))`` to ``ceil(L (1
+ R))``, an answer at least one token; a NumPy generator seeded by ``--seed``), or a trace's. A shared prefix
(``prefix_hit``: the first share of every prompt, in whole KV blocks, the same tokens in every request, as a
system prompt is) or a trace's block hashes say which prompt blocks requests have in common (:mod:`.prefix_cache`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import OpcountValueError

ARRIVALS = ("poisson", "constant")
MAX_REQUESTS = 10_000_000  # a bound on the arithmetic one run does, not a property of any engine
MAX_TOKENS = 2**31 - 1  # a request's prompt or answer: beyond any model's context


@dataclass(frozen=True)
class Sent:
    """One request as its client sends it: when (None: a closed loop sends it when a client is free), its
    prompt and answer tokens, and the hashes of its prompt's blocks where a trace gives them (each a block of
    ``hash_block`` tokens, the same hash the same tokens and everything before them)."""

    arrival: float | None
    prompt: int
    output: int
    hashes: tuple[int, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Workload:
    """``requests`` requests of ``input_len`` prompt tokens and ``output_len`` generated tokens (each drawn within
    ``range_ratio`` of them), arriving at ``rate`` a second (``arrivals``: ``poisson`` or ``constant``), sent by
    ``concurrency`` clients in a closed loop, or replayed from ``trace`` (its rows; its arrival times unless a
    rate or a concurrency is given); ``seed`` draws the gaps and the lengths; ``prefix_hit`` the share of every
    prompt that is one prefix shared by all (0: none)."""

    requests: int
    input_len: int
    output_len: int
    rate: float | None = None
    concurrency: int | None = None
    arrivals: str = "poisson"
    seed: int = 0
    range_ratio: float = 0.0
    prefix_hit: float = 0.0
    trace: tuple[Sent, ...] | None = None
    hash_block: int = 0  # tokens a trace's hash covers (Mooncake's 512); 0: the trace has no hashes

    def __post_init__(self) -> None:
        for name, least in (("requests", 1), ("input_len", 1), ("output_len", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise OpcountValueError(f"{name} must be a whole number from {least}, got {value!r}")
            if value > (MAX_REQUESTS if name == "requests" else MAX_TOKENS):
                raise OpcountValueError(
                    f"{name} must be at most {MAX_REQUESTS if name == 'requests' else MAX_TOKENS:,}, got {value:,}"
                )
        timed = self.trace is not None and all(s.arrival is not None for s in self.trace)
        if self.rate is not None and self.concurrency is not None:
            raise OpcountValueError("a workload takes a rate (requests/s) or a concurrency (clients), not both")
        if self.rate is None and self.concurrency is None and not timed:
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
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**63:
            raise OpcountValueError(f"seed must be a whole number from 0 below 2**63, got {self.seed!r}")
        for name in ("range_ratio", "prefix_hit"):  # vLLM refuses a range ratio outside [0, 1)
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value < 1:
                raise OpcountValueError(f"{name} must be a number from 0 below 1, got {value!r}")
        if self.trace is not None:
            if not self.trace:
                raise OpcountValueError("the trace has no request")
            if len(self.trace) != self.requests:
                raise OpcountValueError(f"the trace has {len(self.trace)} requests, the workload {self.requests}")
            if self.range_ratio:
                raise OpcountValueError("range_ratio draws lengths: a trace gives its own")

    @classmethod
    def replay(
        cls, rows: Sequence[Sent], *, hash_block: int = 0, rate: float | None = None, concurrency: int | None = None,
        arrivals: str = "poisson", seed: int = 0, prefix_hit: float = 0.0,
    ) -> Workload:  # fmt: skip
        """A trace's requests: its arrival times (rebased to start at 0), or ``rate``'s or ``concurrency``'s."""
        if not rows:
            raise OpcountValueError("the trace has no request")
        first = min((s.arrival for s in rows if s.arrival is not None), default=0.0)
        rebased = tuple(
            Sent(None if s.arrival is None else s.arrival - first, s.prompt, s.output, s.hashes) for s in rows
        )
        return cls(
            requests=len(rows), input_len=max(s.prompt for s in rows), output_len=max(s.output for s in rows),
            rate=rate, concurrency=concurrency, arrivals=arrivals, seed=seed, prefix_hit=prefix_hit,
            trace=rebased, hash_block=hash_block,
        )  # fmt: skip

    @property
    def closed_loop(self) -> bool:
        return self.concurrency is not None

    @property
    def from_trace_times(self) -> bool:
        """Arrivals are the trace's own (no rate or concurrency replaces them)."""
        return self.trace is not None and self.rate is None and self.concurrency is None

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Every request's prompt and answer tokens, in order (int64 arrays)."""
        if self.trace is not None:
            return (np.fromiter((s.prompt for s in self.trace), np.int64, self.requests),
                    np.fromiter((s.output for s in self.trace), np.int64, self.requests))  # fmt: skip
        if not self.range_ratio:
            return np.full(self.requests, self.input_len, np.int64), np.full(self.requests, self.output_len, np.int64)
        draw = np.random.default_rng(self.seed)
        r = self.range_ratio
        low, high = math.floor(self.input_len * (1 - r)), math.ceil(self.input_len * (1 + r))
        prompts = draw.integers(max(low, 1), high + 1, size=self.requests)  # a prompt of one token at least
        low, high = max(math.floor(self.output_len * (1 - r)), 1), max(math.ceil(self.output_len * (1 + r)), 1)
        return prompts, draw.integers(low, high + 1, size=self.requests)

    def longest(self) -> tuple[int, int]:
        """The longest prompt and the longest answer (checked against the model's context, fitted up to)."""
        prompts, outputs = self.lengths()
        return int(prompts.max()), int(outputs.max())

    def longest_request(self) -> int:
        """The most tokens one request holds: its prompt and its answer."""
        prompts, outputs = self.lengths()
        return int((prompts + outputs).max())

    def first_arrivals(self) -> list[float]:
        """The arrival times known before the run: every request of an open loop (the first at 0, as a
        benchmark client sends its first at once) or of a trace, or a closed loop's first ``concurrency`` ones,
        all at 0."""
        if self.concurrency is not None:
            return [0.0] * min(self.concurrency, self.requests)
        if self.rate is None:
            assert self.trace is not None  # a timed trace (checked in __post_init__)
            return [s.arrival or 0.0 for s in self.trace]
        if self.arrivals == "constant":
            return [i / self.rate for i in range(self.requests)]
        draw = random.Random(self.seed)  # its own generator: the same seed, the same gaps, whatever else ran
        times, now = [], 0.0
        for _ in range(self.requests):
            times.append(now)
            now += draw.expovariate(self.rate)
        return times

    def describe(self, sent: bool = True) -> str:
        """Its requests and (``sent``) how they are sent, in words: ``500 requests of 1,024 prompt + 256 generated
        tokens, poisson arrivals at 40/s (seed 0)``."""
        prompts, answers = self.lengths()

        def span(values: np.ndarray) -> str:
            low, high = int(values.min()), int(values.max())
            return f"{low:,}" if low == high else f"{low:,}-{high:,} (mean {float(values.mean()):,.0f})"

        what = f"{self.requests:,} request{'s' if self.requests != 1 else ''}{' from a trace' if self.trace is not None else ''} of {span(prompts)} prompt + {span(answers)} generated tokens"
        if not sent:
            return what
        if self.concurrency is not None:
            how = f"{self.concurrency} clients in a closed loop"
        elif self.rate is None:
            how = "at the trace's own times"
        else:
            how = f"{self.arrivals} arrivals at {self.rate:g}/s (seed {self.seed})"
        shared = f", the first {self.prefix_hit:.0%} of each prompt shared" if self.prefix_hit else ""
        return f"{what}, {how}{shared}"

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "requests": self.requests, "input_len": self.input_len, "output_len": self.output_len,
            "rate": self.rate, "concurrency": self.concurrency,
            "arrivals": None if self.closed_loop or self.from_trace_times else self.arrivals, "seed": self.seed,
            "range_ratio": self.range_ratio, "prefix_hit": self.prefix_hit,
        }  # fmt: skip
        if self.trace is not None:  # flat: the CSV's one row holds it
            out |= {"trace_own_arrivals": self.from_trace_times, "trace_hash_block": self.hash_block or None}
        return out
