"""Reports: identical text to fvcore's printers, number formatting, purity, exports that add up."""

from __future__ import annotations

import csv
import functools
import io
import json
import sys
import types
from typing import Any

import pytest
import tabulate
import torch
from hypothesis import given
from hypothesis import strategies as st

from opcount import ActivationCountAnalysis, FlopCountAnalysis
from opcount import report as R
from tests.fixtures.models import Nested, Shared
from tests.fixtures.optional import HAS_TORCHVISION, INSTALL, torchvision
from tests.fixtures.report_models import Encoder, tiny

pytestmark = pytest.mark.smoke  # also run on the oldest supported torch (scripts/smoke_torch213.sh)

fvcore_nn = pytest.importorskip("fvcore.nn")


@pytest.fixture
def fvcore_keeps_whitespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """fvcore indents its tables through tabulate.PRESERVE_WHITESPACE, which tabulate >= 0.10
    ignores (it takes a preserve_whitespace argument instead): give fvcore the layout it meant."""
    shim = types.SimpleNamespace(
        tabulate=functools.partial(tabulate.tabulate, preserve_whitespace=True),
        PRESERVE_WHITESPACE=False,
    )
    monkeypatch.setattr(sys.modules["fvcore.nn.print_model_statistics"], "tabulate", shim)
    monkeypatch.setattr(sys.modules["fvcore.nn.parameter_count"], "tabulate", shim)


def _cases() -> list[Any]:
    cases: list[Any] = [
        ("nested", Nested(), torch.randn(4, 10)),
        ("shared", Shared(), torch.randn(2, 8)),
        ("tiny", *tiny()),
        ("encoder", Encoder().eval(), torch.randn(2, 8, 16)),
    ]
    if HAS_TORCHVISION:
        cases.append(("resnet18", torchvision.models.resnet18(weights=None).eval(), torch.randn(1, 3, 64, 64)))
    else:
        cases.append(
            pytest.param(("resnet18", None, None), marks=pytest.mark.skip(reason=f"needs torchvision ({INSTALL})"))
        )
    return cases


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c[0])
def test_same_text_as_fvcore(case: tuple, fvcore_keeps_whitespace: None) -> None:
    _, model, x = case
    ours, theirs = FlopCountAnalysis(model, x, preset="fvcore"), fvcore_nn.FlopCountAnalysis(model, x)
    our_acts, their_acts = ActivationCountAnalysis(model, x), fvcore_nn.ActivationCountAnalysis(model, x)
    assert R.flop_count_table(ours) == fvcore_nn.flop_count_table(theirs)
    assert R.flop_count_table(ours, max_depth=1, show_param_shapes=False) == fvcore_nn.flop_count_table(
        theirs, max_depth=1, show_param_shapes=False
    )
    assert R.flop_count_table(ours, max_depth=5, activations=our_acts) == fvcore_nn.flop_count_table(
        theirs, max_depth=5, activations=their_acts
    )
    assert R.flop_count_str(ours) == fvcore_nn.flop_count_str(theirs)
    assert R.flop_count_str(ours, our_acts) == fvcore_nn.flop_count_str(theirs, their_acts)
    assert dict(R.parameter_count(model)) == dict(fvcore_nn.parameter_count(model))
    for depth in (1, 3, 6):
        assert R.parameter_count_table(model, depth) == fvcore_nn.parameter_count_table(model, depth)


def test_reports_leave_the_analysis_and_tabulate_alone() -> None:
    model, x = tiny()
    a = FlopCountAnalysis(model, x)
    a.total()
    before = {k: v for k, v in vars(a).items() if k != "_stats"}
    ws = tabulate.PRESERVE_WHITESPACE
    R.flop_count_table(a)
    R.flop_count_str(a)
    R.tree_str(a)
    R.to_dict(a)
    R.to_markdown(a)
    R.operator_table(a)
    assert {k: v for k, v in vars(a).items() if k != "_stats"} == before
    assert tabulate.PRESERVE_WHITESPACE == ws


# ----- numbers -----------------------------------------------------------------------------------
@given(st.one_of(st.integers(-(10**18), 10**18), st.floats(-1e18, 1e18, allow_nan=False)))
def test_auto_units_match_fvcore(x: float) -> None:
    from fvcore.nn.print_model_statistics import _format_size

    assert R.format_number(x) == _format_size(x)
    assert R.format_number(x, R.FVCORE_STR) == _format_size(x, sig_figs=2)


@pytest.mark.parametrize(
    ("x", "fmt", "text"),
    [
        (4111514624, R.FVCORE_TABLE, "4.112G"),
        (4111514624, R.COMPACT, "4.11G"),
        (118013952, R.FVCORE_TABLE, "0.118G"),
        (118013952, R.COMPACT, "118M"),
        (128, R.FVCORE_TABLE, "0.128K"),
        (128, R.COMPACT, "128"),
        (999_999, R.COMPACT, "1M"),
        (60, R.FVCORE_TABLE, "60"),
        (4111514624, R.EXACT, "4111514624"),
        (4111514624, R.NumberFormat("M", 1), "4111.5M"),
        (4111514624, R.NumberFormat("T", 2, significant=True), "0.0041T"),
        (25557032, R.NumberFormat("", 0), "25557032"),
        (9408, R.NumberFormat("M", 1), "0.0M"),
        (1_600_000, R.NumberFormat("M", 3, significant=True), "1.60M"),
        (0, R.COMPACT, "0"),
        (-2_500_000, R.COMPACT, "-2.5M"),
    ],
)
def test_number_formats(x: float, fmt: R.NumberFormat, text: str) -> None:
    assert R.format_number(x, fmt) == text


def test_bad_number_formats_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown unit"):
        R.NumberFormat("X")
    with pytest.raises(ValueError, match="digits"):
        R.NumberFormat(digits=0, significant=True)


# ----- exports -----------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet18() -> FlopCountAnalysis:
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).eval()
    return FlopCountAnalysis(model, torch.randn(1, 3, 64, 64))


def _assert_rows_add_up(data: dict) -> None:
    """Every module's value is its own share plus its children's, exactly; no share is negative;
    every module's operators add up to it; the model's row is the total."""
    modules = {m["name"]: m for m in data["modules"]}
    children: dict[str, list[str]] = {}
    for m in data["modules"]:
        if m["parent"] is not None:
            children.setdefault(m["parent"], []).append(m["name"])
    for key in data["columns"]:
        assert modules["."][key] == data["total"][key]  # the model's row is named "." in exports
        for name, m in modules.items():
            assert type(m[key]) is int, (name, key)
            assert m[key] == m["self_" + key] + sum(modules[c][key] for c in children.get(name, ())), (name, key)
            assert m["self_" + key] >= 0, (name, key)
    by_module: dict[str, int] = {}
    for row in data["operators"]:
        by_module[row["module"]] = by_module.get(row["module"], 0) + row["flops"]
    assert by_module == {n: m["flops"] for n, m in modules.items() if m["flops"]}


def test_resnet_rows_add_up_to_their_parents(resnet18: FlopCountAnalysis) -> None:
    data = R.to_dict(resnet18)
    _assert_rows_add_up(data)
    assert data["total"]["flops"] == resnet18.total()
    assert data["total"]["params"] == sum(p.numel() for p in resnet18.model.parameters())
    # Each level of the tree, plus what shallower modules run themselves, is the whole model.
    depth = max(m["depth"] for m in data["modules"])
    for level in range(depth + 1):
        at = sum(m["flops"] for m in data["modules"] if m["depth"] == level)
        above = sum(m["self_flops"] for m in data["modules"] if m["depth"] < level)
        assert at + above == resnet18.total(), level


def test_rows_add_up_with_every_statistic() -> None:
    from opcount.memory import MemoryTrafficAnalysis

    model, x = tiny()
    data = R.to_dict(
        FlopCountAnalysis(model, x),
        activations=ActivationCountAnalysis(model, x),
        memory=MemoryTrafficAnalysis(model, x),
    )
    assert data["columns"] == ["params", "flops", "activations", "bytes_read", "bytes_written"]
    _assert_rows_add_up(data)
    blocks = next(m for m in data["modules"] if m["name"] == "blocks")
    assert (
        blocks["flops"] == 2 * (8 * 16 + 16 * 4) and blocks["called"]
    )  # its members ran (fvcore: owners of a called module are called)


def test_json_and_csv_carry_exact_integers(resnet18: FlopCountAnalysis) -> None:
    data = json.loads(R.to_json(resnet18))
    assert data == R.to_dict(resnet18)
    rows = list(csv.DictReader(io.StringIO(R.to_csv(resnet18))))
    assert [r["name"] for r in rows] == [n or "." for n in resnet18.module_tree.names]  # the model: "."
    assert int(rows[0]["macs"]) == resnet18.total()  # 1 flop per multiply-add: the header says macs
    assert {r["name"]: int(r["macs"]) for r in rows} == {n or ".": v for n, v in resnet18.by_module().items()}
    ops = list(csv.DictReader(io.StringIO(R.to_csv(resnet18, level="operators", max_depth=0))))
    assert {r["operator"]: int(r["macs"]) for r in ops} == dict(resnet18.by_operator())


def test_operator_table_and_markdown(resnet18: FlopCountAnalysis) -> None:
    text = R.operator_table(resnet18, max_depth=0, number_format=R.EXACT)
    assert text.splitlines()[1].endswith("-:|")  # exact numbers are right-aligned
    assert f"| model    | conv                | {resnet18.by_operator()['conv']} |" in text
    assert R.to_markdown(resnet18, level="operators", max_depth=0) == R.operator_table(
        resnet18, columns=("flops",), max_depth=0, number_format=R.COMPACT, root_label="."
    )
    md = R.to_markdown(resnet18, max_depth=1)
    assert md.splitlines()[2].startswith("| `.` ") and "`layer1`" in md  # the model: "." as in every export
    assert md.splitlines()[1].endswith("--:|")  # numbers right-aligned


def test_columns_need_their_analysis(resnet18: FlopCountAnalysis) -> None:
    with pytest.raises(ValueError, match="needs the memory analysis"):
        R.module_table(resnet18, columns=("flops", "bytes"))
    with pytest.raises(ValueError, match="unknown column"):
        R.tree_str(resnet18, columns=("flop",))
    with pytest.raises(ValueError, match="no per-operator breakdown"):
        R.operator_table(resnet18, columns=("params",))


def test_registered_columns_extend_every_report(resnet18: FlopCountAnalysis) -> None:
    column = R.Column(
        "mflops",
        "MFLOPs (x2)",
        ("double",),
        lambda s: {k: 2 * v / 1e6 for k, v in s.get("double").by_module().items()},
        additive=False,
    )
    R.register_column(column)
    try:
        text = R.tree_str(resnet18, columns=("flops", "mflops"), extra={"double": resnet18}, max_depth=0)
        assert text.splitlines()[1].split()[-1] == R.format_number(2 * resnet18.total() / 1e6, R.COMPACT)
        with pytest.raises(ValueError, match="already registered"):
            R.register_column(column)
    finally:
        del R.COLUMNS["mflops"]


def test_tree_marks_uncalled_modules_but_keeps_container_values() -> None:
    model, x = tiny()
    text = R.tree_str(FlopCountAnalysis(model, x))
    assert "└─ unused (Linear)                    20    N/A" in text  # under "#MACs", 5 wide
    assert "├─ blocks (ModuleList)               212    384" in text
    assert text.endswith("its cost is in its caller's.")
