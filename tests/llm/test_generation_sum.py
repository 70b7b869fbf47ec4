"""A generation's decode time summed in closed form (an arithmetic series and the positive part
of one), checked against the explicit sum, in memory that does not grow with the steps."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM
from opcount.llm.generation import decode_times
from opcount.roofline.bound import positive_part_sum
from tests.llm.test_llm import llama


@pytest.mark.parametrize("steps", [1, 2, 3, 7, 64])
def test_positive_part_sum_is_the_explicit_sum(steps: int) -> None:
    # terms crossing zero inside the steps (both slopes), never, always, and constant ones
    start = np.array([-3.0, 3.0, 2.0, -2.0, 0.0, 1.5, -1.5, 0.0, 5.0, -5.0])
    slope = np.array([1.0, -1.0, 0.5, -0.5, 0.0, 0.0, 0.0, 1.0, 0.25, -0.25])
    explicit = [sum(max(a + b * j, 0.0) for j in range(steps)) for a, b in zip(start, slope, strict=True)]
    assert positive_part_sum(start, slope, steps) == pytest.approx(explicit, rel=1e-12, abs=1e-12)


def test_generation_time_memory_does_not_grow_with_steps() -> None:
    llm = CausalLM(llama())
    first = llm.phase("decode", kv_len=8, hardware="h100-sxm").schedule
    last = llm.phase("decode", kv_len=8 + 10**6, hardware="h100-sxm").schedule
    assert first is not None and last is not None
    tracemalloc.start()
    try:
        decode_times(first, last, 10**6 + 1)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # a steps x kernels float64 array would be 10**6 x len(kernels) x 8 bytes
    assert peak < 10**6
