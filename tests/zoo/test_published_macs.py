"""Multiply-adds against the figures torchvision publishes for its weights (``meta["_ops"]``).

``preset="macs"`` under ``torch.no_grad()`` at each model's default weights' input size reproduces
torchvision's GFLOPS column to its three decimals: convolutions, linear layers, einsum (MaxViT),
attention on the MultiheadAttention fast path (ViT) and in scaled_dot_product_attention / matmul
(Swin, MViT). Segmentation weights may carry the auxiliary head; the models are built as the weights describe
(parameter count).
Detection and optical-flow figures depend on the image the model resizes to and on data, and are
not compared. The full comparison is slow: ``pytest -m slow tests/zoo/test_published_macs.py``.
"""

from __future__ import annotations

import pytest
import torch

from opcount import FlopCountAnalysis
from tests.fixtures import zoo

models = pytest.importorskip("torchvision.models")


def _published_case(name: str) -> tuple[torch.nn.Module, tuple, float]:
    weights = models.get_model_weights(name).DEFAULT
    family = next(f for f in zoo.FAMILIES if name in zoo.torchvision_names(f))
    crop = getattr(weights.transforms(), "crop_size", None)
    crop = crop[0] if isinstance(crop, (list, tuple)) else crop
    kwargs: dict = {"weights": None}
    if family == "segmentation":
        kwargs["weights_backbone"] = None
        model = models.get_model(name, **kwargs)
        if sum(p.numel() for p in model.parameters()) != weights.meta["num_params"]:
            kwargs["aux_loss"] = True  # the weights include the auxiliary classifier
        inputs: tuple = (torch.randn(1, 3, 520, 520),)
    elif family == "video":
        inputs = (torch.randn(1, 3, 16, crop, crop),)
    else:
        if name.startswith("vit_") and crop != 224:
            kwargs["image_size"] = crop
        inputs = (torch.randn(1, 3, crop, crop),)
    return models.get_model(name, **kwargs).eval(), inputs, weights.meta["_ops"]


def _check(name: str) -> None:
    model, inputs, published = _published_case(name)
    with torch.no_grad():
        macs = FlopCountAnalysis(model, inputs, preset="macs").total()
    assert round(macs / 1e9, 3) == pytest.approx(published, abs=1e-9), f"{name}: {macs / 1e9:.4f} G vs {published}"


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v3_small"])
def test_published_macs_fast(name: str) -> None:
    _check(name)


PUBLISHED = [name for family in ("classification", "video", "segmentation") for name in zoo.torchvision_names(family)]


@pytest.mark.slow
@pytest.mark.parametrize("name", PUBLISHED)
def test_published_macs_zoo(name: str) -> None:
    _check(name)
