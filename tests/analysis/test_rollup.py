"""The module roll-up and the module tree, on hand-built trees with values chosen by hand."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from torch import nn

from opcount.hardware.lookup import Hardware
from opcount.rollup import attributed, grouped, roll_up
from opcount.roofline import Layer, speed_of_light
from opcount.scopes import ModuleTree

pytestmark = pytest.mark.smoke


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.act = nn.ReLU()


class Tree(nn.Module):
    """'' -> a -> (a.fc, a.act); '' -> b -> b.inner -> (b.inner.fc, b.inner.act); c is a again."""

    def __init__(self) -> None:
        super().__init__()
        self.a = Block()
        self.b = nn.Module()
        self.b.inner = Block()
        self.c = self.a  # shared: reported as "a"


def test_module_tree_parent_children_depth() -> None:
    tree = ModuleTree(Tree())
    assert tree.names == ["", "a", "a.fc", "a.act", "b", "b.inner", "b.inner.fc", "b.inner.act"]
    assert tree.parent("") is None
    assert tree.parent("a.fc") == "a"
    assert tree.parent("b.inner.act") == "b.inner"
    assert tree.children("") == ("a", "b")
    assert tree.children("b") == ("b.inner",)
    assert tree.children("a.fc") == ()
    assert [tree.depth(n) for n in tree.names] == [0, 1, 2, 2, 1, 2, 3, 3]
    assert tree.owners("b.inner.fc") == ("", "b", "b.inner", "b.inner.fc")


def test_module_tree_answers_for_a_shared_module_under_its_first_name() -> None:
    tree = ModuleTree(Tree())
    assert tree.canonical("c.fc") == "a.fc"
    assert tree.parent("c.fc") == "a"  # an alias answers as the module it names
    assert tree.children("c") == ("a.fc", "a.act")
    assert tree.depth("c.act") == 2
    with pytest.raises(KeyError, match="no module named 'd'"):
        tree.parent("d")


def test_module_tree_of_a_module_shared_deep_in_another_branch() -> None:
    model = Tree()
    model.b.inner.extra = model.a.fc  # first met as a.fc: its parent stays a
    tree = ModuleTree(model)
    assert tree.canonical("b.inner.extra") == "a.fc"
    assert "b.inner.extra" not in tree.children("b.inner")
    assert tree.parent("b.inner.extra") == "a"


def test_roll_up_owner_mode_sums_into_every_owner() -> None:
    tree = ModuleTree(Tree())
    items = [(("", "a", "a.fc"), {"mm": 3}), (("", "b", "b.inner", "b.inner.act"), {"relu": 5}), (("",), {"add": 1})]
    got = roll_up(tree, items, "owner")
    assert list(got) == tree.names  # every canonical module, registration order
    assert got[""] == {"mm": 3, "relu": 5, "add": 1}
    assert got["a"] == {"mm": 3}
    assert got["b"] == got["b.inner"] == got["b.inner.act"] == {"relu": 5}
    assert got["a.act"] == {} and got["b.inner.fc"] == {}


def test_roll_up_a_module_called_from_a_non_owner() -> None:
    # b.inner calls a.fc (which it does not own): the stack is '', b, b.inner, a.fc.
    tree = ModuleTree(Tree())
    items = [(("", "b", "b.inner", "a.fc"), {"mm": 7})]
    owner = roll_up(tree, items, "owner")
    assert owner["a"] == owner["a.fc"] == {"mm": 7}
    assert owner["b"] == owner["b.inner"] == {}
    caller = roll_up(tree, items, "caller")
    assert caller["b"] == caller["b.inner"] == caller["a.fc"] == {"mm": 7}
    assert caller["a"] == {}  # a owns a.fc but was not on the call stack
    assert caller[""] == owner[""] == {"mm": 7}


def test_roll_up_counts_a_call_once_per_module_under_recursion() -> None:
    tree = ModuleTree(Tree())
    items = [(("", "a", "a", "a.fc"), {"mm": 2}), (("", "a", "a", "a.fc"), {"mm": 2})]
    for mode in ("owner", "caller"):
        assert roll_up(tree, items, mode)["a"] == {"mm": 4}, mode
    assert attributed(tree, ("", "a", "a", "a.fc"), "caller") == ("", "a", "a.fc")


def test_roll_up_skips_empty_and_missing_values_and_checks_the_mode() -> None:
    tree = ModuleTree(Tree())
    got = roll_up(tree, [(("", "a"), None), (("", "a"), {})], "owner")
    assert all(not c for c in got.values())
    with pytest.raises(ValueError, match="ancestor mode 'callee'"):
        roll_up(tree, [], "callee")


def test_grouped_keeps_first_item_order_and_adds_the_model() -> None:
    got = grouped([(("b", "b.x"), 1), (("", "a"), 2), ((), 3), (("", "b"), 4)])
    assert got == {"": [1, 2, 3, 4], "b": [1, 4], "b.x": [1], "a": [2]}
    assert list(got) == ["", "b", "b.x", "a"]


HW = Hardware("toy", {"vector": {"float32": 1e9}}, 1e9)


def _layer(owners: tuple[str, ...], flops: float) -> Layer:
    return Layer(f"{owners[-1]}#0", flops, 0.0, owners=owners)


def test_roofline_modules_by_depth_with_depth_zero_the_model() -> None:
    layers = [_layer(("", "a", "a.fc"), 1e9), _layer(("", "b", "b.inner", "b.inner.fc"), 2e9)]
    report = speed_of_light(layers, HW)
    assert [s.name for s in report.modules(max_depth=0)] == [""]  # returned nothing before
    assert sorted(s.name for s in report.modules(max_depth=1)) == ["a", "b"]
    assert sorted(s.name for s in report.modules(max_depth=2)) == ["a", "a.fc", "b", "b.inner"]
    assert [s.name for s in report.modules(max_depth=3, within="b")] == ["b.inner", "b.inner.fc"]
    assert report.modules(max_depth=0)[0].time == pytest.approx(3.0)  # 3e9 flops at 1e9 flop/s
    assert "(model)" in report.table(by="module", max_depth=0)


# ------------------------------------------------------------------------------------------------
# No module finds parents, children or depth by parsing dotted names (DESIGN.md, style rule 4).
# ------------------------------------------------------------------------------------------------
PACKAGE = Path(__file__).resolve().parents[2] / "opcount"
_PARSERS = {"split", "rsplit", "partition", "rpartition", "count"}

# Dotted strings that are not module scopes: (file, function) -> what the string is.
ALLOWED = {
    ("torch_internals.py", "_resolve"): "a dotted path of a torch attribute",
    ("cli/models.py", "_factory"): "a dotted attribute path of a model factory (module.attr)",
    ("cli/args.py", "hf_overrides"): "a user's --hf-config key (sub_config.field), to point at the form that works",
    ("handles/registry.py", "decorate"): "a Python module's name (the handle family)",
    ("handles/op_keys.py", "family"): "an operator kind, prim::PythonOp.MyFn",
    ("roofline/plot.py", "_short"): "a chart label shortened for display",
    ("messages.py", "names_in_brief"): "module names grouped by their last part in a warning line",
    ("sparsity/roofline.py", "sparsity_roofline"): "a parameter name (module.param)",
    ("sparsity/pruning.py", "hit"): "a parameter name (module.param)",
    ("llm/precision/dtypes.py", "__call__"): "a buffer name under the KV cache prefix",
    ("llm/cache/names.py", "state_part"): "a buffer name under the KV cache prefix (kv_cache.L.<part>)",
    ("llm/deploy/cache_shares.py", "part_of"): "a buffer name under the KV cache prefix (kv_cache.L.<part>)",
    ("llm/deploy/cache_shares.py", "buffers"): "a buffer name under the KV cache prefix",
    (
        "llm/deploy/engine_plans/__init__.py",
        "_concrete",
    ): "a tensor-parallel plan's dotted key, as transformers' tp_plan writes it",
    (
        "llm/deploy/engine_plans/__init__.py",
        "_splits",
    ): "module names of named_modules() against a tp_plan's keys, not a trace",
    ("llm/kernels/groups.py", "_expert_key"): "a weight's name inside an experts module, less the expert's index",
    ("llm/moe/experts.py", "_parent"): "a module name of named_modules() on a model being prepared, not a trace",
    ("llm/moe/experts.py", "find_experts"): "module names of named_modules() on a model being prepared, not a trace",
    (
        "llm/moe/experts.py",
        "_looks_like_experts",
    ): "a module name's last part (experts, *Router) on a model being prepared",
    ("llm/precision/assignments.py", "_matches"): "a user's glob matched against whole components of a module path",
    ("transformers_internals.py", "_resolve"): "a dotted path of a transformers attribute",
}


def _dot_parses(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of every ``x.split(".")``-style call and ``startswith(x + ".")``."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            args = node.args
            first = args[0] if args else None
            dot = isinstance(first, ast.Constant) and first.value == "."
            joined = (
                isinstance(first, ast.BinOp)
                and isinstance(first.right, ast.Constant)
                and isinstance(first.right.value, str)
                and first.right.value.endswith(".")
            )
            if (node.func.attr in _PARSERS and dot) or (node.func.attr == "startswith" and joined):
                found.append((function, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(path.read_text()), "")
    return found


def test_no_module_parses_dotted_names_for_structure() -> None:
    offenders, allowed_seen = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for function, line in _dot_parses(path):
            if (rel, function) in ALLOWED:
                allowed_seen.add((rel, function))
            else:
                offenders.append(f"opcount/{rel}:{line} in {function}()")
    assert allowed_seen == set(ALLOWED), "stale allow-list entries: drop them"
    assert not offenders, "use ModuleTree.parent/children/depth or opcount.rollup instead:\n" + "\n".join(offenders)


def test_the_dotted_name_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("def f(n, p):\n    return n.count('.'), n.rpartition('.'), n.startswith(p + '.'), n.split(',')\n")
    assert _dot_parses(sample) == [("f", 2), ("f", 2), ("f", 2)]
