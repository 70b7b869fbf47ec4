"""docs/operators.md is generated from the handles' docstrings and must not go stale."""

from pathlib import Path

from opcount.handles import FLOPS
from tests.fixtures.scripts import load_script

gen = load_script("gen_operator_docs")
DEFAULT_PATH, render = gen.DEFAULT_PATH, gen.render


def test_operators_page_is_current() -> None:
    assert DEFAULT_PATH.exists(), "docs/operators.md is missing; run `python scripts/gen_operator_docs.py`"
    assert Path(DEFAULT_PATH).read_text(encoding="utf-8") == render(), (
        "docs/operators.md is stale; run `python scripts/gen_operator_docs.py`"
    )


def test_page_lists_every_operator_and_the_zero_cost_ones() -> None:
    text = render()
    for op in FLOPS.handles:
        assert f"`{op}`" in text, op
    for op in FLOPS.zero:
        assert f"`{op}`" in text, op


def test_every_handle_documents_itself() -> None:
    undocumented = sorted(op for op, h in FLOPS.handles.items() if not h.doc.strip())
    assert not undocumented, f"handles without a docstring: {undocumented}"


def test_check_mode_reports_a_stale_page(tmp_path) -> None:
    main = gen.main
    page = tmp_path / "operators.md"
    page.write_text("stale", encoding="utf-8")
    assert main(["--output", str(page), "--check"]) == 1
    assert main(["--output", str(page)]) == 0
    assert main(["--output", str(page), "--check"]) == 0
