"""The eight torchvision models the parity and coverage tests share (marked slow where used).

torchvision is imported when a model is built, not when this module is: a test that builds one
is skipped without torchvision, and the other tests in its file still run.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

ZOO8 = (
    "resnet50",
    "mobilenet_v3_large",
    "densenet121",
    "efficientnet_b0",
    "convnext_tiny",
    "regnet_y_400mf",
    "swin_t",
    "r3d_18",
)


def zoo_model(name: str, size: int = 224) -> tuple[nn.Module, torch.Tensor]:
    """``name`` built without weights, in eval mode, and an input of ``size`` pixels a side
    (r3d_18, a video model: 16 frames of ``size // 2``)."""
    pytest.importorskip("torchvision")
    import torchvision.models
    import torchvision.models.video

    if name == "r3d_18":
        return torchvision.models.video.r3d_18(weights=None).eval(), torch.randn(1, 3, 16, size // 2, size // 2)
    return torchvision.models.get_model(name, weights=None).eval(), torch.randn(1, 3, size, size)
