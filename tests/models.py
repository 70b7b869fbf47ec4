"""Small models with known costs for the scope-semantics tests.

Costs are worked by hand with fvcore's convention: Linear(i, o) on a [b, i] input is b*i*o.
"""

from __future__ import annotations

import torch
from torch import nn


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(10, 20)
        self.fc2 = nn.Linear(20, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x))


class Nested(nn.Module):
    """inner.fc1: 4*10*20 = 800, inner.fc2: 4*20*5 = 400, head: 4*5*3 = 60 on a [4, 10] input."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()
        self.head = nn.Linear(5, 3)
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.inner(x))


class CalledTwice(nn.Module):
    """fc (8x8) applied twice on [2, 8]: 2 * 2*8*8 = 256."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.fc(x))


class Shared(nn.Module):
    """``b`` is the same module as ``a``: reported under ``a``; 2 calls of 2*8*8 = 128 each."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = self.a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))


class Recursive(nn.Module):
    """Calls itself ``depth`` more times; each call runs fc (2*6*6 = 72)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
        x = self.fc(x)
        return self(x, depth - 1) if depth > 0 else x


class ViaForward(nn.Module):
    """Calls ``child.forward`` directly: the child's hooks never run, so its cost is the caller's."""

    def __init__(self) -> None:
        super().__init__()
        self.child = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child.forward(x)


class Borrower(nn.Module):
    def __init__(self, lender: nn.Module) -> None:
        super().__init__()
        self.proj = nn.Linear(4, 4)
        object.__setattr__(self, "borrowed", lender)  # not registered: owned elsewhere

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.borrowed(self.proj(x))


class OwnerVsCaller(nn.Module):
    """``a`` calls ``b``, which ``a`` does not own: proj 2*4*4 = 32, b 2*4*4 = 32 on [2, 4]."""

    def __init__(self) -> None:
        super().__init__()
        self.b = nn.Linear(4, 4)
        self.a = Borrower(self.b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(x)


class WithHooks(nn.Module):
    """``child`` (2*4*4 = 32 on [2, 4]) has a forward pre-hook that scales its input (8 muls) and
    a forward hook that multiplies its output by ``extra`` (2*4*4 = 32 multiply-adds). Hooks run
    outside the child's ``forward``: their cost is the caller's (the root's)."""

    def __init__(self) -> None:
        super().__init__()
        self.child = nn.Linear(4, 4)
        self.extra = nn.Parameter(torch.randn(4, 4))
        self.child.register_forward_pre_hook(lambda module, args: (args[0] * 2.0,))
        self.child.register_forward_hook(lambda module, args, out: out @ self.extra)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.child(x)


def nested() -> tuple[nn.Module, torch.Tensor]:
    """``opcount tests.models:nested``: Nested on a [4, 10] input, 1260 flops and 355 parameters
    (inner.fc1 10*20+20, inner.fc2 20*5+5, head 5*3+3, unused 3*3+3)."""
    return Nested().eval(), torch.randn(4, 10)
