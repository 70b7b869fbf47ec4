"""``opcount compare`` analyzes whole models: an ``llm:`` model (no module named ``llm`` to
import) or an LLM phase flag (silently ignored) is refused in one line, before anything is built."""

from __future__ import annotations

import pytest

from opcount import cli


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["compare", "resnet18", "llm:gpt2"], "llm:gpt2"),
        (["compare", "resnet18", "resnet50", "--phase", "decode"], "--phase"),
        (["compare", "resnet18", "resnet50", "--weight-dtype", "int4"], "--weight-dtype"),
    ],
)
def test_llm_models_and_flags_are_refused(
    nothing_built: None, capsys: pytest.CaptureFixture[str], argv: list[str], named: str
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "opcount compare analyzes whole models, not LLM phases" in err and named in err, err
