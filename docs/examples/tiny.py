"""The small model of docs/reports.md's examples: ``opcount docs/examples/tiny.py:tiny``.

A convolution, batch norm and ReLU in a ``Sequential``, a pooling layer, two linears in a
``ModuleList`` (a container that is never called itself) and a linear never called at all.
"""

import torch
from torch import nn


class Tiny(nn.Module):
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
    """The model in eval mode and a batch of two 16x16 RGB images."""
    return Tiny().eval(), torch.randn(2, 3, 16, 16)
