"""Results belong to the caller: changing a container a query returned changes no later result
of the analysis or report that returned it (fvcore's analyses hand out Counters and dicts that
callers pop from and add to)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from opcount import ActivationCountAnalysis, FlopCountAnalysis, MemoryTrafficAnalysis
from opcount.roofline import roofline
from opcount.sparsity import sparsity_roofline


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Linear(4, 4))


def _ravage(value: Any) -> None:
    """Empty every mutable container in ``value``, nested ones first."""
    if isinstance(value, dict):
        for inner in value.values():
            _ravage(inner)
        value.clear()
    elif isinstance(value, (list, set)):
        for inner in list(value):
            _ravage(inner)
        value.clear()
    elif isinstance(value, tuple):
        for inner in value:
            _ravage(inner)


def _queries(obj: Any, names: tuple[str, ...]) -> dict[str, Callable[[], Any]]:
    return {name: getattr(obj, name) for name in names}


ANALYSIS_QUERIES = (
    "by_operator",
    "by_module",
    "by_module_and_operator",
    "uncalled_modules",
    "unsupported_ops",
    "per_call",
)


def _check_queries(queries: dict[str, Callable[[], Any]], totals: Callable[[], Any]) -> None:
    before = {name: copy.deepcopy(q()) for name, q in queries.items()}
    expected_totals = totals()
    for q in queries.values():
        _ravage(q())
    for name, q in queries.items():
        assert q() == before[name], name
    assert totals() == expected_totals


@pytest.mark.parametrize("cls", [FlopCountAnalysis, ActivationCountAnalysis, MemoryTrafficAnalysis])
def test_analysis_results_are_the_callers(cls: type) -> None:
    a = cls(_model(), torch.randn(2, 8))
    _check_queries(_queries(a, ANALYSIS_QUERIES), lambda: (a.total(), a.total("0")))


def test_popping_an_operator_leaves_the_total() -> None:
    a = FlopCountAnalysis(_model(), torch.randn(2, 8))
    # Linear(8->16) on [2, 8]: 2*8*16 = 256; Linear(16->4): 2*16*4 = 128; Linear(4->4): 2*4*4 = 32;
    # ReLU on [2, 16]: one comparison per element, 32.
    assert a.by_operator().pop("linear") == 256 + 128 + 32
    a.by_module_and_operator().clear()
    a.uncalled_modules().add("nonsense")
    assert a.total() == 416 + 32
    assert a.by_operator() == {"linear": 416, "relu": 32}
    assert a.uncalled_modules() == set()


@pytest.mark.parametrize("kind", ["read", "write", "both"])
def test_memory_results_per_kind_are_the_callers(kind: str) -> None:
    a = MemoryTrafficAnalysis(_model(), torch.randn(2, 8))
    queries = {
        "by_operator": lambda: a.by_operator(kind=kind),
        "by_module": lambda: a.by_module(kind=kind),
        "by_module_and_operator": lambda: a.by_module_and_operator(kind=kind),
        "per_call": lambda: a.per_call(kind=kind),
        "traffic_per_call": a.traffic_per_call,
    }
    _check_queries(queries, lambda: a.total(kind=kind))


def test_ignored_calls_do_not_share_one_counter() -> None:
    # An ignored operator's value is an empty Counter; filling one must not fill the others,
    # nor those of another analysis.
    model = nn.Sequential(nn.Flatten(), nn.Linear(8, 4))
    a = FlopCountAnalysis(model, torch.randn(2, 2, 4))
    b = FlopCountAnalysis(model, torch.randn(2, 2, 4))
    empty = [v for _, v in a.per_call() if v is not None and not v]
    assert empty, "Flatten runs a free operator (a view)"
    empty[0]["relu"] = 1
    assert [v for _, v in b.per_call() if v is not None and not v] == [{}] * len(empty)
    assert b.total() == 2 * 8 * 4


def test_roofline_results_are_the_callers() -> None:
    report = roofline(_model(), torch.randn(2, 8), "h100-sxm")
    names = ("by_operator", "by_module", "by_module_and_operator", "uncalled_modules", "unsupported_ops")
    names += ("leaf_modules", "modules", "top")
    _check_queries(_queries(report, names), lambda: (report.total_time, report.module("0"), report.table()))


def test_sparsity_results_are_the_callers() -> None:
    report = sparsity_roofline(_model(), torch.randn(2, 8), "h100-sxm", sparsity="2:4")
    names = ("by_module", "module_levels", "uncalled_modules", "unsupported_ops", "rows")
    _check_queries(_queries(report, names), lambda: (report.speedup, report.module_speedup("0"), report.table()))
