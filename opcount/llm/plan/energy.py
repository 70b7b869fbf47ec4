"""Energy of a simulated run at board power: joules per output token and output tokens a second per megawatt.

The model is each device drawing its board power (``power_w``: NVIDIA's TDP, AMD's TBP, cited per preset in
docs/hardware.md) for the whole run. It is an upper figure: measured draw under LLM serving sits below the
board's limit, and more so at small batches (the ML.ENERGY Benchmark, Chung et al. 2025, measures GPU energy
rather than assuming TDP for that reason). Host, network and cooling are left out; a facility's PUE scales
both figures alike. Tokens a second per megawatt is ``1e6 / joules_per_token``: the same run's two faces."""

from __future__ import annotations

MEGAWATT = 1e6


def joules_per_token(watts: float | None, seconds: float, tokens: float) -> float | None:
    """Joules per output token of a run of ``seconds`` drawing ``watts`` (every device's board power summed);
    None where a device states no power, or nothing was generated."""
    if watts is None or tokens <= 0:
        return None
    return watts * seconds / tokens


def tokens_per_s_per_mw(joules: float | None) -> float | None:
    """Output tokens a second per megawatt of board power, from the run's joules per output token."""
    if joules is None or joules <= 0:
        return None
    return MEGAWATT / joules
