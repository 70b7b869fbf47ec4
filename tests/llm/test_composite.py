"""A multimodal config whose wrapper needs a package that is not installed (Gemma 3n's timm vision
tower) is analyzed as its text decoder, and the run says so."""

from __future__ import annotations

import importlib.util
import logging

import pytest

transformers = pytest.importorskip("transformers")
if int(transformers.__version__.split(".")[0]) < 5 or importlib.util.find_spec("timm") is not None:
    pytest.skip("Gemma 3n's wrapper builds here: nothing to fall back from", allow_module_level=True)

from opcount.cli.main import main  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.models.composite import text_decoder_instead  # noqa: E402

TEXT = {"num_hidden_layers": 2, "layer_types": ["sliding_attention", "full_attention"], "num_kv_shared_layers": 0}


def gemma3n() -> object:
    return transformers.Gemma3nConfig(text_config=TEXT)


def test_the_text_decoder_is_built_and_noted(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="opcount"):
        llm = CausalLM(gemma3n())
    assert type(llm.model).__name__ == "Gemma3nForCausalLM"
    # the same model as the text decoder's own config builds: the towers' weights left out
    assert llm.parameters == CausalLM(transformers.Gemma3nTextConfig(**TEXT)).parameters
    notes = [r.getMessage() for r in caplog.records if getattr(r, "opcount_note", False)]
    assert notes == [
        "Gemma3nConfig: the multimodal model needs timm, which is not installed; its text decoder "
        "(Gemma3nTextConfig) is analyzed, the other modalities' towers and their weights left out"
    ]


def test_the_command_prints_the_note(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    # (caplog: the test suite silences logged warnings in tests that do not read the log)
    argv = ["hf:Gemma3nConfig", "--hf-config", "text_config={'num_hidden_layers': 2, 'num_kv_shared_layers': 0}"]
    assert main([*argv, "--phase", "decode", "--kv-len", "4", "--depth", "0"]) == 0
    err = capsys.readouterr().err
    assert "opcount: note: Gemma3nConfig: the multimodal model needs timm" in err


def test_other_failures_are_not_hidden() -> None:
    """Only a missing package falls back: a config error is the user's to see."""
    assert text_decoder_instead(gemma3n(), ValueError("hidden_size must be positive")) is None
    missing = ImportError("TimmWrapperModel requires the timm library but it was not found")
    assert text_decoder_instead(transformers.Gemma3nTextConfig(**TEXT), missing) is None  # no wrapper to leave
    wrapped = RuntimeError("while building")
    wrapped.__cause__ = missing
    assert type(text_decoder_instead(gemma3n(), wrapped)).__name__ == "Gemma3nTextConfig"
