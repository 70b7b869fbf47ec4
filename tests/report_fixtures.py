"""Small models for the report and CLI tests (cheap to trace, several levels deep)."""

from __future__ import annotations

import torch
from torch import nn


class Tiny(nn.Module):
    """conv -> bn -> relu -> pool, then a ModuleList of two linears (a container never called)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.blocks = nn.ModuleList([nn.Linear(8, 16), nn.Linear(16, 4)])
        self.unused = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.stem(x)).flatten(1)
        for block in self.blocks:
            x = block(x)
        return x


def tiny() -> tuple[nn.Module, torch.Tensor]:
    """A factory for ``opcount tests.report_fixtures:tiny``: the model and its input."""
    return Tiny().eval(), torch.randn(2, 3, 16, 16)


def tiny_model() -> nn.Module:
    """A factory returning only the model (the CLI then needs --input)."""
    return Tiny()


class Encoder(nn.Module):
    """A two-layer transformer encoder with a classifier, small enough for golden files."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(16, 32)
        layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(x)).mean(1))


def not_a_model() -> int:
    return 3
