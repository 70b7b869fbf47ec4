"""Models nested as deep as torch runs them: a chain of nn.Sequential, each holding the next, a
Linear at the bottom. torch takes a few frames per level, so 200 levels run under Python's default
recursion limit and 1000 under the limit torch itself needs; opcount traces and reports them under
the same limit (it once failed at 200 with a RecursionError and a hint about data-dependent shapes)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, MemoryTrafficAnalysis, trace
from opcount.errors import TraceError
from opcount.report import (
    flop_count_str,
    flop_count_table,
    html_report,
    module_table,
    operator_table,
    parameter_count_table,
    to_csv,
    to_json,
    tree_str,
)
from opcount.roofline import roofline
from opcount.scopes import ModuleTree

TRACERS = [
    {"tracer": "jit"},
    {"tracer": "dispatch"},
    {"tracer": "dispatch", "device": "meta"},
    {"tracer": "dispatch", "mode": "train"},
]


def deep(levels: int) -> nn.Module:
    """``levels`` Sequentials, each holding the next, around one Linear(4 -> 4)."""
    model: nn.Module = nn.Linear(4, 4)
    for _ in range(levels):
        model = nn.Sequential(model)
    return model


def _runs(model: nn.Module, x: torch.Tensor, limit: int) -> bool:
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        model(x)
        return True
    except RecursionError:
        return False
    finally:
        sys.setrecursionlimit(before)


def torch_limit(model: nn.Module, x: torch.Tensor) -> int:
    """The least recursion limit under which torch runs ``model(x)`` from here (a bisection)."""
    low, high = 50, 100_000
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if _runs(model, x, middle) else (middle + 1, high)
    return low


@pytest.fixture(params=[200, pytest.param(1000, marks=pytest.mark.slow)], ids=lambda n: f"{n}-deep")
def limited(request: pytest.FixtureRequest) -> Iterator[tuple[nn.Module, torch.Tensor]]:
    """A deep model, its input, and Python's recursion limit set to what torch needs to run it
    (a few frames more, for the test's own calls)."""
    model, x = deep(request.param), torch.randn(2, 4)
    limit = max(torch_limit(model, x) + 10, sys.getrecursionlimit()) if request.param > 200 else 0
    before = sys.getrecursionlimit()
    if limit:
        sys.setrecursionlimit(limit)
    try:
        yield model, x
    finally:
        sys.setrecursionlimit(before)


def test_torch_runs_200_levels_under_the_default_limit() -> None:
    model, x = deep(200), torch.randn(2, 4)
    assert torch_limit(model, x) <= sys.getrecursionlimit()


@pytest.mark.parametrize("options", TRACERS, ids=lambda o: "-".join(o.values()))
def test_every_tracer_counts_a_deep_model(limited: tuple[nn.Module, torch.Tensor], options: dict) -> None:
    model, x = limited
    levels = len(list(model.modules())) - 1
    flops = FlopCountAnalysis(model, x, **options)
    # Linear(4 -> 4) on [2, 4]: 2 x 4 x 4 multiply-adds. Training adds the weight gradient, [4, 2] x
    # [2, 4] (32; the input needs none), and two sums of n values into m at n - m additions each: the
    # loss, 8 outputs into 1 (7), and the bias gradient, [2, 4] into [4] (4).
    train = options.get("mode") == "train"
    loss = 7 if train else 0  # the loss is the model's caller's: the root's alone
    expected = 32 + 32 + 4 if train else 32
    assert flops.total() == expected + loss
    by_module = flops.by_module()
    assert len(by_module) == levels + 1
    assert all(v == expected for name, v in by_module.items() if name)
    assert flops.uncalled_modules() == set()


def test_reports_of_a_deep_model(limited: tuple[nn.Module, torch.Tensor]) -> None:
    model, x = limited
    levels = len(list(model.modules())) - 1
    linear = ".".join(["0"] * levels)  # the Linear's name, at the bottom
    t = trace(model, x, tracer="dispatch")
    flops, memory = FlopCountAnalysis(t), MemoryTrafficAnalysis(t)
    deepest = levels + 1
    # fvcore's table merges a chain of only children into one row: the Linear's, 32 flops
    assert f"| {linear} " in flop_count_table(flops, max_depth=deepest)
    table = module_table(flops, max_depth=deepest, memory=memory, columns=("params", "flops", "bytes"))
    assert f"| {linear} " in table
    tree = tree_str(flops, max_depth=deepest).splitlines()
    assert len(tree) == 1 + levels + 1 and tree[-1].split()[-3:] == ["(Linear)", "20", "32"]  # 16 weights + 4 biases
    assert operator_table(flops, max_depth=deepest).count("| linear ") == levels + 1
    assert flop_count_str(flops).count("Sequential") == levels
    data = json.loads(to_json(flops, max_depth=deepest))
    assert data["total"] == {"params": 20, "flops": 32}
    assert len(data["modules"]) == levels + 1 and data["modules"][-1]["name"] == linear
    rows = [line for line in to_csv(flops).splitlines() if not line.startswith("#")]
    assert len(rows) == 1 + levels + 1 and rows[-1].startswith(f"{linear},Linear,")
    report = roofline(t, hardware="h100-sxm")
    page = html_report(flops, report, charts=False)
    assert page.count('class="row leaf') == 1 and page.count('<details class="node"') == levels
    assert len(report.by_module()) == levels + 1
    assert len(report.modules(max_depth=deepest)) == levels  # every module below the model
    assert report.table(by="module", max_depth=deepest)


def test_beyond_what_torch_runs_the_error_names_the_depth() -> None:
    model, x = deep(1000), torch.randn(2, 4)
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        assert not _runs(model, x, 1000)
        for options in TRACERS[:2]:
            with pytest.raises(TraceError, match=r"1000 levels deep.*sys\.setrecursionlimit"):
                FlopCountAnalysis(model, x, **options).total()
    finally:
        sys.setrecursionlimit(before)


def test_walks_that_run_no_forward_take_any_depth() -> None:
    # No forward pass, so torch needs no recursion: the module tree and the parameter table of
    # 3000 levels are walked under Python's default limit.
    model = deep(3000)
    tree = ModuleTree(model)
    assert len(tree.names) == 3001 and tree.depth(tree.names[-1]) == 3000
    table = parameter_count_table(model, max_depth=3001)
    # a header, its rule, the model's row, 3000 module rows, the weight's and the bias' rows
    assert table.count("\n") + 1 == 2 + 1 + 3000 + 2
