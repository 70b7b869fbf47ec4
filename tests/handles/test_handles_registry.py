"""The registries: one outcome per operator, whatever order the handle families are imported in."""

import importlib.util
import itertools
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

import opcount.handles
from opcount.handles import registry
from opcount.handles.registry import Registry

FAMILIES = sorted(
    p.stem
    for p in Path(opcount.handles.__file__).parent.glob("*.py")
    if p.stem not in ("__init__", "registry", "_shapes")
)


def _load(name: str) -> ModuleType:
    """A fresh copy of the family module ``name`` (not put in sys.modules): its decorators run again."""
    spec = importlib.util.spec_from_file_location(
        f"opcount.handles.{name}", Path(opcount.handles.__file__).parent / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _registries_after(order: list[str], monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    fresh = {metric: Registry(metric.lower()) for metric in ("FLOPS", "ACTIVATIONS", "MEMORY")}
    with monkeypatch.context() as patch:
        for metric, r in fresh.items():
            patch.setattr(registry, metric, r)
        for name in order:
            _load(name)
    return [
        (
            sorted(r.zero_families().items()),
            sorted((op, h.family, h.macs, h.fvcore, h.name) for op, h in r.handles.items()),
        )
        for r in fresh.values()
    ]


def test_import_order_does_not_change_the_registries(monkeypatch: pytest.MonkeyPatch) -> None:
    assert "dispatch_ops" in FAMILIES and "zero_cost" in FAMILIES
    installed = [
        (
            sorted(r.zero_families().items()),
            sorted((op, h.family, h.macs, h.fvcore, h.name) for op, h in r.handles.items()),
        )
        for r in (registry.FLOPS, registry.ACTIVATIONS, registry.MEMORY)
    ]
    first = ["dispatch_ops", *(f for f in FAMILIES if f != "dispatch_ops")]
    for order in (FAMILIES, list(reversed(FAMILIES)), first):
        assert _registries_after(order, monkeypatch) == installed, order


def _claims(r: Registry) -> list[Callable[[], object]]:
    """A fallback zero-cost claim, then a handle and a family's zero-cost claim of the same ops."""
    return [
        lambda: r.zero_cost("aten::copy", "aten::alias", family="catch_all", fallback=True),
        lambda: r.register("aten::copy")(lambda i, o: 1),
        lambda: r.zero_cost("aten::alias", family="views"),
    ]


def test_a_fallback_zero_cost_yields_to_any_claim_before_or_after() -> None:
    for fallback_first in (True, False):
        r = Registry("flops")
        steps = _claims(r)
        for step in steps if fallback_first else [*steps[1:], steps[0]]:
            step()
        assert set(r.handles) == {"aten::copy"}
        assert r.zero_families() == {"aten::alias": "views"}
        assert "aten::copy" in r and "aten::alias" in r


def test_a_fallback_leaves_duplicate_claims_refused() -> None:
    r = Registry("flops")
    r.zero_cost("aten::copy", fallback=True)
    r.zero_cost("aten::copy", family="copies")
    with pytest.raises(ValueError, match="registered twice"):
        r.zero_cost("aten::copy", family="copies")
    with pytest.raises(ValueError, match="qualified"):
        r.zero_cost("copy", fallback=True)


def test_permutations_of_a_few_families_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    # the families that declare overlapping operators: copies and views in several of them
    few = ["dispatch_ops", "embedding", "memory", "zero_cost"]
    results = [_registries_after(list(p), monkeypatch) for p in itertools.permutations(few)]
    assert all(r == results[0] for r in results)
