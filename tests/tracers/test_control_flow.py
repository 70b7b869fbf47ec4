"""Forwards the tracers cannot follow, refused by name (issue 42): one that returns a generator or a
coroutine (its body had not run: the dispatch tracer counted 0), and torch's higher-order control
flow operators, ``torch.cond`` and ``torch.while_loop`` (torch's own message named the dispatch
mode by its object's address, or spoke of FX and dynamo under jit tracing)."""

from __future__ import annotations

import gc
import warnings
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TraceError

TRACED = [
    pytest.param({}, id="jit"),
    pytest.param({"tracer": "dispatch"}, id="dispatch"),
    pytest.param({"tracer": "dispatch", "device": "meta"}, id="meta"),
    pytest.param({"tracer": "dispatch", "mode": "train"}, id="train"),
]


class Yields(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> Iterator[torch.Tensor]:  # type: ignore[override]
        yield self.fc(x)


class Awaits(Yields):
    async def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.fc(x)


class YieldsAsync(Yields):
    async def forward(self, x: torch.Tensor) -> AsyncIterator[torch.Tensor]:  # type: ignore[override]
        yield self.fc(x)


@pytest.mark.parametrize("options", TRACED)
@pytest.mark.parametrize(
    ("model", "returned", "until"),
    [(Yields, "generator", "iterated"), (Awaits, "coroutine", "awaited"), (YieldsAsync, "async_generator", "iterated")],
)
def test_a_forward_returning_a_generator_or_coroutine_is_refused(
    model: type[nn.Module], returned: str, until: str, options: dict[str, Any]
) -> None:
    pattern = rf"\({model.__name__}\) returned a {returned}, whose body runs only when it is {until}"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TraceError, match=pattern):
            FlopCountAnalysis(model(), torch.ones(2, 4), **options).total()
        gc.collect()  # a coroutine is closed, never left to warn that it was not awaited
    assert not [w for w in caught if "never awaited" in str(w.message)]


class Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda y: self.fc(y), lambda y: y * 2, (x,))


class Loops(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * 2), (torch.tensor(0), x))[1]


class Inside(nn.Module):
    """The operator called by a submodule: the error names that module."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.branch = Branches()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.branch(self.pre(x))


@pytest.mark.parametrize("options", TRACED)
@pytest.mark.parametrize(
    ("model", "where", "operator"),
    [
        (Branches, r"the model \(Branches\)", r"'cond' \(torch.cond\)"),
        (Loops, r"the model \(Loops\)", r"'while_loop' \(torch.while_loop\)"),
        (Inside, r"module 'branch' \(Branches\)", r"'cond' \(torch.cond\)"),
    ],
)
def test_higher_order_control_flow_is_refused_naming_the_operator(
    model: type[nn.Module], where: str, operator: str, options: dict[str, Any]
) -> None:
    with pytest.raises(
        TraceError, match=rf"could not trace {where}.*: operator {operator} is a higher-order operator"
    ) as e:
        FlopCountAnalysis(model(), torch.ones(1, 4), **options).total()
    message = str(e.value)
    assert "Python control flow (if, for, while)" in message  # what is supported instead
    assert " at 0x" not in message and "dynamo" not in message  # torch's own words gone


def test_python_control_flow_is_what_both_tracers_follow() -> None:
    # The suggested rewrite of Branches: the branch the input takes, [1, 4] x [4, 4] = 16 multiply-adds.
    class Rewritten(Branches):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) if x.sum() > 0 else x * 2

    for tracer in ("jit", "dispatch"):
        assert FlopCountAnalysis(Rewritten(), torch.ones(1, 4), tracer=tracer).by_operator()["linear"] == 16
