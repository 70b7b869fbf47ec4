"""The validation loop over the 2025-26 serving measurements (scripts/validation_2026.py): no bound beaten, the
held-out error within the figures docs/llm.md documents, the page current, and the stored steps equal to the
rows priced again (a few rows here, every row in the slow test)."""

from __future__ import annotations

import pytest

from opcount.llm.calibration import evaluate, steady
from tests.fixtures.scripts import load_script

loop = load_script("validation_2026")
STORED = loop.stored()
PRICED = [p for p in STORED if isinstance(p, steady.Priced)]
RUN = loop.loop(STORED)


def test_no_measurement_beats_its_bound() -> None:
    beaten = [p.row.case for p in PRICED if steady.bound(p) > p.row.seconds]
    assert beaten == []


def test_the_held_out_error_is_within_the_documented_figures() -> None:
    held = RUN.held
    assert len(held) >= loop.HELD_OUT_ROWS
    assert RUN.error(held) <= loop.HELD_OUT_ERROR
    for name, group in loop.groups(RUN):
        if len(group) >= loop.MIN_GROUP:
            assert RUN.error(group) <= loop.GROUP_ERROR, name


def test_profiles_are_fitted_on_training_rows_only() -> None:
    # moving every held-out row's measurement changes no fitted profile
    moved = [
        steady.Priced(
            type(p.row)(**{**vars(p.row), "measured": p.row.measured * 3}), p.batch, p.replicas, p.burst, p.decode,
            p.prefill,
        ) if p.row.case in RUN.held_cases else p
        for p in PRICED
    ]  # fmt: skip
    assert loop.loop(list(moved)).profiles == RUN.profiles


def test_an_engine_line_is_its_older_architecture_by_version() -> None:
    by_case = {p.row.case: p.row for p in PRICED}
    # vLLM 0.7.3 ran the V0 engine (V1 is the default from 0.8.0); 0.11.0 is V1; TensorRT-LLM 0.17 built engines
    assert by_case["dsr1-mi300x-vllm-tp8-3200-800-c4-tpot-mean"].line == "vllm V0"
    assert by_case["dsr1-h200-vllm-tp8-sharegpt-c4-tpot-mean"].line == "vllm"
    assert by_case["mixtral-8x7b-h100-sxm-trtllm017-tp1-fp8-1000-1000-out-tok-s"].line == "trtllm TensorRT engines"
    assert by_case["llama33-70b-h100-nim18-tp2-fp8-5000-500-c1-itl"].line == "trtllm"  # NIM: not stated


def test_the_page_shows_the_current_loop() -> None:
    page = loop.PAGE.read_text(encoding="utf-8")
    assert loop.block(RUN) in page, "stale: run python scripts/validation_2026.py --write"


def _same(a: steady.Priced, b: steady.Priced) -> None:
    assert (a.batch, a.replicas, a.burst, a.chunk, a.prompts_alone) == (
        b.batch, b.replicas, b.burst, b.chunk, b.prompts_alone,
    ), a.row.case  # fmt: skip
    for x, y in ((a.decode, b.decode), (a.prefill, b.prefill)):
        assert x.estimate == pytest.approx(y.estimate, rel=1e-6) and x.bound == pytest.approx(y.bound, rel=1e-6)
        for key, value in vars(x.shape).items():
            expected = getattr(y.shape, key)
            assert value == (expected if isinstance(value, str) else pytest.approx(expected, rel=1e-6)), (
                a.row.case,
                key,
            )


def check_priced_again(cases: set[str] | None) -> None:
    # a row --price has not reached yet is not compared (the page says it is not priced)
    done = [p for p in STORED if not (isinstance(p, evaluate.Unmodelled) and p.reason == loop.NOT_PRICED)]
    rows = [p.row for p in done if cases is None or p.row.case in cases]
    for now, kept in zip(evaluate.price(rows), [p for p in done if p.row in rows], strict=True):
        assert type(now) is type(kept), now.row.case
        if isinstance(now, steady.Priced) and isinstance(kept, steady.Priced):
            _same(now, kept)


def test_a_few_rows_priced_again_match_the_stored_steps() -> None:
    check_priced_again({p.row.case for p in PRICED if p.row.model == "llama-3-8b"})


@pytest.mark.slow
def test_every_row_priced_again_matches_the_stored_steps() -> None:
    check_priced_again(None)
