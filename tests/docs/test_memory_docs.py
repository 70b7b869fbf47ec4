"""docs/memory.md is generated from the memory handles' docstrings and must not go stale."""

from __future__ import annotations

from opcount.handles import MEMORY
from tests.fixtures.scripts import load_script

gen = load_script("gen_memory_docs")
DOC_PATH, memory_rule, render, rules = gen.DOC_PATH, gen.memory_rule, gen.render, gen.rules


def test_docs_are_up_to_date() -> None:
    assert DOC_PATH.read_text() == render(), "docs/memory.md is stale: run `python scripts/gen_memory_docs.py`"


def test_every_memory_operator_has_a_documented_rule() -> None:
    listed = {op for _, ops, _ in rules() for op in ops}
    assert listed == set(MEMORY.handles) | MEMORY.zero
    assert all(doc for _, _, doc in rules())
    assert "2*C" in (memory_rule("aten::batch_norm") or "")
    assert memory_rule("aten::view") is not None and memory_rule("aten::no_such_op") is None


def test_every_registered_operator_exists() -> None:
    """Catches misspelt operator names (and in-place variants that aten does not have)."""
    import torch

    from opcount.handles import ACTIVATIONS

    for op in [*MEMORY.handles, *sorted(MEMORY.zero), *ACTIVATIONS.handles, *sorted(ACTIVATIONS.zero)]:
        namespace, name = op.split("::")
        assert hasattr(getattr(torch.ops, namespace), name), op
