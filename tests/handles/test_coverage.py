"""Coverage: no arithmetic operator of the model zoos is left unsupported, with or without grad.

The default run covers a fast, representative subset. The full sweep -- every torchvision
classification, segmentation, detection, video and optical-flow model at its usual input size and
the transformers BERT, GPT-2, Llama, T5, ViT, Whisper and CLIP models (small configs), each with
and without ``torch.no_grad()`` -- is marked slow:

    pytest -m slow tests/handles/test_coverage.py            # add -n 2 with pytest-xdist

It reports zero unsupported operators (a list of op kinds and counts on failure).
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from opcount import FlopCountAnalysis
from tests.fixtures import zoo

GRAD_MODES = {"grad": contextlib.nullcontext, "no_grad": torch.no_grad}


def _unsupported(model: torch.nn.Module, inputs: tuple, mode: str) -> dict[str, int]:
    with GRAD_MODES[mode]():
        analysis = FlopCountAnalysis(model, inputs)
        assert analysis.total() > 0
        return dict(analysis.unsupported_ops())


# --- fast subset (default run) ---------------------------------------------------------------

FAST_TORCHVISION = {
    "resnet18": {},
    "mobilenet_v3_small": {},
    "vit_b_16": {"image_size": 32},  # fewer tokens, same operators
}


@pytest.mark.parametrize("mode", GRAD_MODES)
@pytest.mark.parametrize("name", FAST_TORCHVISION)
def test_fast_torchvision_models_fully_supported(name: str, mode: str) -> None:
    model, inputs = zoo.torchvision_model(name, **FAST_TORCHVISION[name])
    assert _unsupported(model, inputs, mode) == {}


@pytest.mark.parametrize("mode", GRAD_MODES)
@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_fast_transformers_models_fully_supported(name: str, mode: str) -> None:
    pytest.importorskip("transformers")
    model, inputs = zoo.TRANSFORMERS[name]()
    assert _unsupported(model, inputs, mode) == {}


def test_llama_without_cache_on_meta_fully_supported() -> None:
    # benchmarks/llama70b_meta.py's configuration, small: without a cache transformers looks for
    # packed sequences in the position ids (torch.diff), on integers: free, but not unsupported.
    pytest.importorskip("transformers")
    model, (ids,) = zoo.TRANSFORMERS["llama"]()
    analysis = FlopCountAnalysis(model, (ids,), {"use_cache": False}, tracer="dispatch", device="meta")
    assert analysis.total() > 0
    assert analysis.unsupported_ops() == {}
    assert analysis.by_operator()["linear"] == FlopCountAnalysis(model, (ids,)).by_operator()["linear"]


def test_vit_b_16_multiply_adds_match_the_published_figure() -> None:
    """torchvision's table lists ViT-B/16 at 17.56 GFLOPS (multiply-adds). fvcore's multiply-add kinds
    (linear, conv) give 11.27 G: it counts none of the attention (11.29 G with its layer norms)."""
    model, inputs = zoo.torchvision_model("vit_b_16")
    with torch.no_grad():
        macs = FlopCountAnalysis(model, inputs, preset="macs")
        assert round(macs.total() / 1e9, 2) == 17.56
        # the fast path carries the attention fvcore misses: in-projection, q.k^T, attn.v, out-projection
        assert macs.by_operator()["_native_multi_head_attention"] == 12 * (
            197 * 768 * 2304 + 2 * 197 * 197 * 768 + 197 * 768 * 768
        )
        assert round((macs.by_operator()["linear"] + macs.by_operator()["conv"]) / 1e9, 2) == 11.27
    # with grad the same arithmetic runs as linear + scaled_dot_product_attention + linear
    with_grad = FlopCountAnalysis(model, inputs, preset="macs")
    assert with_grad.total() == macs.total()


# --- full sweep (slow) -----------------------------------------------------------------------

ALL_TORCHVISION = [name for family in zoo.FAMILIES for name in zoo.torchvision_names(family)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", GRAD_MODES)
@pytest.mark.parametrize("name", ALL_TORCHVISION)
def test_torchvision_zoo_fully_supported(name: str, mode: str) -> None:
    model, inputs = zoo.torchvision_model(name)
    assert _unsupported(model, inputs, mode) == {}


@pytest.mark.slow
@pytest.mark.parametrize("mode", GRAD_MODES)
@pytest.mark.parametrize("name", sorted(zoo.TRANSFORMERS))
def test_transformers_zoo_fully_supported(name: str, mode: str) -> None:
    pytest.importorskip("transformers")
    model, inputs = zoo.TRANSFORMERS[name]()
    assert _unsupported(model, inputs, mode) == {}
