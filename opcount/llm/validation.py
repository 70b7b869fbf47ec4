"""Published serving measurements set beside the bound and the estimate (docs/measured/serving.csv).

Each case names its engine, model, precision, GPU, parallelism, batch and lengths. A throughput
case (``out_tokens_per_s``: ``batch x output`` tokens over a whole static batch) is a prefill of
``input`` tokens and ``output - 1`` decode steps (the prefill yields the first token); a
``first_token_ms`` case is the prefill alone; a ``decode_step_ms`` case is one decode step of
``batch`` sequences with ``input`` tokens cached. Models are the catalogue's (:mod:`.catalogue`: their
published configs). A case's ``checks`` say what it checks: ``bound`` (no run may beat it) or
``bound+estimate`` (a serving engine's run, which the estimate should come near); ``missed`` says why
a case is left out of the estimate's error.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import OpcountValueError
from .causal_lm import CausalLM
from .generation import generation
from .models.catalogue import config
from .precision.dtypes import Precision

CHECKS = ("bound", "bound+estimate")


@dataclass(frozen=True)
class Case:
    """One published measurement and what opcount makes of it, all in seconds."""

    row: dict[str, str]
    measured: float
    bound: float
    estimate: float

    @property
    def error(self) -> float:
        """The estimate over the measurement, less 1."""
        return self.estimate / self.measured - 1

    @property
    def missed(self) -> str:
        return self.row.get("missed", "")

    @property
    def kept(self) -> bool:
        """Counted in the estimate's error: a serving engine's run, not left out."""
        return self.row["checks"] == "bound+estimate" and not self.missed


def geomean_error(cases: Sequence[Case]) -> float:
    """The geometric mean of ``estimate / measured`` or its inverse, whichever is above 1, less 1:
    an estimate half or twice the measurement is 100% off."""
    if not cases:
        raise OpcountValueError("no cases to average")
    return math.exp(sum(abs(math.log(c.estimate / c.measured)) for c in cases) / len(cases)) - 1


def load(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        if row.get("checks") not in CHECKS:
            raise OpcountValueError(f"{path}: case {row.get('case')!r}: checks must be one of {CHECKS}")
    return rows


def evaluate(row: dict[str, str]) -> Case:
    """The bound and the estimate of one measured case."""
    if int(row["tp"]) != 1:
        raise OpcountValueError(f"{row['case']}: tensor parallelism is not modelled here")
    llm = CausalLM(config(row["model"]), Precision(row["weight"], row["act"], row["kv"] or None))
    batch, prompt, output = int(row["batch"]), int(row["input"]), int(row["output"])
    if row["metric"] == "decode_step_ms":
        step = llm.phase("decode", kv_len=prompt, batch=batch, hardware=row["hardware"])
        assert step.time_bound is not None and step.time is not None  # hardware was given
        return Case(row, float(row["measured"]) / 1e3, step.time_bound, step.time)
    gen = generation(
        llm, prompt, output - 1 if row["metric"] == "out_tokens_per_s" else 0, batch=batch, hardware=row["hardware"]
    )
    if row["metric"] == "out_tokens_per_s":
        measured = batch * output / float(row["measured"])
        bound, estimate = gen.time_bound, gen.time
    elif row["metric"] == "first_token_ms":
        measured = float(row["measured"]) / 1e3
        bound, estimate = gen.time_to_first_token_bound, gen.time_to_first_token
    else:
        raise OpcountValueError(f"{row['case']}: unknown metric {row['metric']!r}")
    assert bound is not None and estimate is not None  # hardware was given
    return Case(row, measured, bound, estimate)
