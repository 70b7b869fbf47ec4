"""An engine profile fitted to measured rows (:func:`fit`), and its leave-one-out error (:func:`leave_one_out`).

The fit is bounded least squares on the log error, ``sum_i (ln estimate_i - ln measured_i)^2`` over the rows,
each parameter within its range (:data:`opcount.llm.engines.profile.RANGES`): Levenberg-Marquardt steps on the
parameters scaled to ``[0, 1]`` over their ranges, each step clipped to the box and kept only where it lowers the
sum, the Jacobian by forward differences. The estimate of a row under a profile is arithmetic on its priced steps
(:func:`.steady.predict`), so a fit costs no trace. A parameter no row's estimate depends on keeps its starting
value. The bound is never fitted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ...errors import OpcountValueError
from ..engines.profile import RANGES, EngineProfile
from .steady import Priced, predict

# what calibrate fits by default: every parameter but the overlap, which no row of a run without it can tell
FITTED = tuple(k for k in RANGES if k != "overlap")
_STEP = 1e-6  # a forward difference, on the [0, 1] scale
_ITERATIONS = 200


def geomean_error(estimates: Sequence[float], measured: Sequence[float]) -> float:
    """``exp(mean |ln(estimate / measured)|) - 1``: an estimate half or twice the measurement is 100% off."""
    if not estimates:
        raise OpcountValueError("no rows to average")
    logs = [abs(math.log(e / m)) for e, m in zip(estimates, measured, strict=True)]
    return math.exp(sum(logs) / len(logs)) - 1


@dataclass(frozen=True)
class Fitted:
    """A fitted profile, its in-sample error over the rows, and the rows fitted."""

    profile: EngineProfile
    error: float
    rows: int


def _profile(start: EngineProfile, names: Sequence[str], x: np.ndarray) -> EngineProfile:
    values = {n: RANGES[n][0] + float(v) * (RANGES[n][1] - RANGES[n][0]) for n, v in zip(names, x, strict=True)}
    return start.with_parameters(values)


def _residuals(rows: Sequence[Priced], start: EngineProfile, names: Sequence[str], x: np.ndarray) -> np.ndarray:
    profile = _profile(start, names, np.clip(x, 0.0, 1.0))
    return np.array([math.log(predict(p, profile) / p.row.seconds) for p in rows])


def fit(rows: Sequence[Priced], start: EngineProfile, names: Sequence[str] = FITTED) -> Fitted:
    """``start``'s parameters ``names`` fitted to ``rows`` (the others kept)."""
    if not rows:
        raise OpcountValueError("no measured rows opcount can price to fit a profile to")
    unknown = [n for n in names if n not in RANGES]
    if unknown:
        raise OpcountValueError(f"unknown profile parameters {unknown}; known: {', '.join(RANGES)}")
    first = np.array([(getattr(start, n) - RANGES[n][0]) / (RANGES[n][1] - RANGES[n][0]) for n in names])
    # two starts, the profile's values and the middle of every range: the sum has valleys (a step's cost and the
    # collectives' trade against each other), and the lower end is kept
    # a parameter no row depends on keeps its starting value in both
    base = _residuals(rows, start, names, first)
    middle = first.copy()
    for j in range(len(names)):
        moved = first.copy()
        moved[j] = 0.5 if abs(first[j] - 0.5) > 0.1 else 0.9
        if np.any(_residuals(rows, start, names, moved) != base):
            middle[j] = 0.5
    best = min((_descend(rows, start, names, x0) for x0 in (first, middle)), key=lambda f: f[1])
    profile = _profile(start, names, best[0])
    error = geomean_error([predict(p, profile) for p in rows], [p.row.seconds for p in rows])
    return Fitted(profile, error, len(rows))


def _descend(
    rows: Sequence[Priced], start: EngineProfile, names: Sequence[str], x: np.ndarray
) -> tuple[np.ndarray, float]:
    """Levenberg-Marquardt from ``x`` (the module's docstring): the point reached and its sum of squares."""
    r = _residuals(rows, start, names, x)
    cost, damping, step = float(r @ r), 1e-3, 1.0
    for _ in range(_ITERATIONS):
        jacobian = np.empty((len(r), len(x)))
        for j in range(len(x)):
            h = _STEP if x[j] + _STEP <= 1 else -_STEP  # stay in the box
            moved = x.copy()
            moved[j] += h
            jacobian[:, j] = (_residuals(rows, start, names, moved) - r) / h
        normal = jacobian.T @ jacobian
        gradient = jacobian.T @ r
        improved = False
        while damping < 1e12:
            # a parameter no row depends on has a zero column: the identity keeps the system solvable
            matrix = normal + damping * (np.diag(np.diag(normal)) + 1e-12 * np.eye(len(x)))
            trial = np.clip(x - np.linalg.solve(matrix, gradient), 0.0, 1.0)
            rt = _residuals(rows, start, names, trial)
            if float(rt @ rt) < cost:
                step = float(np.max(np.abs(trial - x)))
                x, r, cost, damping, improved = trial, rt, float(rt @ rt), max(damping / 3, 1e-12), True
                break
            damping *= 4
        if not improved or step < 1e-12:
            break
    return x, cost


def leave_one_out(rows: Sequence[Priced], start: EngineProfile, names: Sequence[str] = FITTED) -> float:
    """The geometric-mean error of each row's estimate under the profile fitted to the other rows."""
    if len(rows) < 2:
        raise OpcountValueError("leave-one-out needs at least two rows")
    estimates = []
    for i, held in enumerate(rows):
        others = [p for j, p in enumerate(rows) if j != i]
        estimates.append(predict(held, fit(others, start, names).profile))
    return geomean_error(estimates, [p.row.seconds for p in rows])
