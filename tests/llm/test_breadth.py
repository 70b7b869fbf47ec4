"""Every decoder-only causal LM of the installed transformers, built from its default config made
small (tests/llm/small_configs.py: 2 layers, or one of each layer type) on meta: a prompt of 16
tokens and one decode step run, and the step's multiply-adds are at least those of the weights one
token must touch.

The lower bound: a token goes through every linear layer of the decoder and the output projection
once (``in x out`` multiply-adds each, transformers' ``Conv1D`` alike), experts left out (a token
reaches only ``top_k`` of them, so none is a bound that holds), and so are a multimodal model's
other encoders and its cross-attention to them (a text-only phase runs neither). What the decoder
runs besides (attention, recurrent state) only adds. Models that do not run yet are listed in :data:`KNOWN`
with the reason, as docs/llm.md lists them; an entry that starts to run fails the test too, so
that the list is kept true.
"""

from __future__ import annotations

import pytest
from torch import nn

transformers = pytest.importorskip("transformers")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from tests.llm.small_configs import causal_lm_config_classes, small  # noqa: E402

QSA = (
    "Qwen4-Exp's sparse attention (QSA): its indexer scores mean-pooled blocks of keys and picks them per query in "
    "data-dependent loops, which opcount does not model (DeepSeek sparse attention's indexer it does)"
)
DRAFTER = "a speculative-decoding drafter: every layer reads the KV cache of a target model it is given"
KNOWN: dict[str, str] = {}  # filled below, by class name


def _known(reason: str, *names: str) -> None:
    KNOWN.update(dict.fromkeys(names, reason))


_known(QSA, "Qwen4ExpConfig", "Qwen4ExpTextConfig")
_known(DRAFTER, "Gemma4AssistantConfig", "Gemma4UnifiedAssistantConfig")
_known("a cache layer type opcount does not know ('heavily_compressed_attention')", "DeepseekV4Config")
_known("byte-level: three transformers (local encoder, global, local decoder), heads kept per part", "BltConfig")


# what a text token of a decoder-only phase need not run: another modality's encoder and the
# cross-attention to it (run only with images or audio), and experts (a token reaches top_k of them)
_NOT_RUN_BY_TEXT = ("experts", "vision", "visual", "image", "audio", "cross", "encoder_attn")


def token_macs_lower_bound(model: nn.Module) -> int:
    """``in x out`` of every linear layer (transformers' ``Conv1D`` alike) a text token must run,
    each module once however many names it has."""
    from transformers.pytorch_utils import Conv1D

    get_decoder = getattr(model, "get_decoder", None)
    decoder = get_decoder() if callable(get_decoder) else model  # a multimodal model's text decoder
    head = model.get_output_embeddings()
    named = [*decoder.named_modules(), *([("lm_head", head)] if head is not None else [])]
    layers = {
        id(m): m
        for name, m in named
        if isinstance(m, (nn.Linear, Conv1D)) and not any(part in name for part in _NOT_RUN_BY_TEXT)
    }
    return sum(m.weight.shape[0] * m.weight.shape[1] for m in layers.values())


def _run(cls: type) -> None:
    llm = CausalLM(small(cls))
    llm.phase("prefill", seq_len=16)
    step = llm.phase("decode", kv_len=16, preset="macs")
    macs, bound = step.flops.total(), token_macs_lower_bound(llm.model)
    assert macs >= bound > 0, f"{macs} multiply-adds in a decode step, fewer than the {bound} of its linear layers"


@pytest.mark.slow
def test_a_prompt_and_a_decode_step_run() -> None:
    # one test over every class (not one per class): listing them imports every config module of
    # transformers, which the default suite's collection should not pay for
    failed: dict[str, str] = {}
    ran: list[str] = []
    for cls in causal_lm_config_classes():
        try:
            _run(cls)
            ran.append(cls.__name__)
        except Exception as e:
            failed[cls.__name__] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    assert {name: why for name, why in failed.items() if name not in KNOWN} == {}
    assert [name for name in ran if name in KNOWN] == []  # they run now: take them off the list (and the docs)


def test_the_documented_list_is_the_tested_one() -> None:
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "llm.md").read_text()
    section = page.split("## Which transformers models run")[1].split("\n## ")[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    documented = {name.strip() + "Config" for row in rows for name in row.split(",")}
    assert documented == set(KNOWN)
