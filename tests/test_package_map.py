"""The package map (DESIGN.md, docs/architecture.md): every module on the map with one job said in its
docstring and at most 500 lines, at most 15 modules at the top, no import cycle, nothing below the command line
importing from it, and the public names importing from where users import them."""

from __future__ import annotations

import ast
import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import opcount

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "opcount"
PAGE = (ROOT / "docs" / "architecture.md").read_text()
MODULES = sorted(p.relative_to(ROOT).as_posix() for p in PACKAGE.rglob("*.py"))
MAX_LINES = 500
MAX_TOP_LEVEL = 15


def _module_name(path: str) -> str:
    name = path.removesuffix(".py").replace("/", ".")
    return name.removesuffix(".__init__")


NAMES = {_module_name(p): p for p in MODULES}


def _named(module: str) -> bool:
    """A module is named by its path, by its package folder (a family of modules, described together), or,
    inside a package whose modules the page lists by file name, by its file name."""
    folder, name = module.rsplit("/", 1)
    if f"`{module}`" in PAGE or (f"`{folder}/`" in PAGE and folder != "opcount"):
        return True
    return name != "__init__.py" and f"`{name}`" in PAGE


@pytest.mark.parametrize("module", MODULES)
def test_every_module_is_on_the_map_says_its_job_and_is_short(module: str) -> None:
    text = (ROOT / module).read_text()
    assert _named(module), f"{module} is not named in docs/architecture.md"
    assert ast.get_docstring(ast.parse(text)), f"{module} has no docstring saying its job"
    assert len(text.splitlines()) <= MAX_LINES, f"{module}: {len(text.splitlines())} lines"


def test_every_path_on_the_map_exists() -> None:
    paths = set(re.findall(r"`(opcount/[\w/]+(?:\.py|/))`", PAGE))
    assert paths, "the page names no path"
    assert sorted(p for p in paths if not (ROOT / p).exists()) == []


def test_at_most_fifteen_modules_at_the_top() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(top) <= MAX_TOP_LEVEL, top


def _imports(path: str) -> Iterator[tuple[str, int]]:
    """Every opcount module ``path`` imports (TYPE_CHECKING and function-level imports included), with its line."""
    name = _module_name(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    for node in ast.walk(ast.parse((ROOT / path).read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in NAMES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                target = f"{base}.{node.module}" if node.module else base
            else:
                target = node.module or ""
            if target not in NAMES:
                continue
            submodules = [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in NAMES]
            yield from ((m, node.lineno) for m in submodules)
            if len(submodules) < len(node.names):
                yield target, node.lineno


GRAPH = {name: sorted({m for m, _ in _imports(path)} - {name}) for name, path in NAMES.items()}


def _cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, []):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle() -> None:
    # A package importing its own submodules is no cycle unless one of them imports the package back.
    assert _cycles(GRAPH) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


def test_nothing_below_the_command_line_imports_it() -> None:
    below = [
        f"{NAMES[name]}:{line}"
        for name in NAMES
        if not name.startswith("opcount.cli") and name != "opcount.__main__"
        for target, line in _imports(NAMES[name])
        if target.startswith("opcount.cli")
    ]
    assert below == []


def _private_imports(path: Path) -> list[str]:
    """``from .x import _y`` and ``x._y`` on a module imported from opcount, as ``line: text``."""
    tree = ast.parse(path.read_text())
    found: list[str] = []
    modules: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level > 0 or (node.module or "").startswith("opcount")):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{node.lineno}: from {'.' * node.level}{node.module or ''} import {alias.name}")
                modules.add(alias.asname or alias.name)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "cli").rglob("*.py")), ids=lambda p: p.relative_to(PACKAGE).as_posix()
)
def test_the_command_line_imports_no_private_name(path: Path) -> None:
    assert _private_imports(path) == []


def test_the_private_import_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from . import cli, report\n"
        "from .cli import _number_format, main\n"
        "from opcount.cli.models import _random\n"
        "from os import _exit\n"  # not opcount's
        "cli._captured_warnings(True)\n"
        "report.COLUMNS, cli.__name__\n"
    )
    assert _private_imports(sample) == [
        "2: from .cli import _number_format",
        "3: from opcount.cli.models import _random",
        "5: cli._captured_warnings",
    ]


@pytest.mark.parametrize(("package", "function"), [("roofline", "build"), ("hardware", "lookup")])
def test_a_package_named_like_its_function_stays_the_package_and_calls_it(package: str, function: str) -> None:
    """``import opcount.roofline as r`` gives the package; ``opcount.roofline(...)`` still runs the roofline."""
    module = importlib.import_module(f"opcount.{package}")
    assert getattr(opcount, package) is module is sys.modules[f"opcount.{package}"]
    assert getattr(module, package) is getattr(importlib.import_module(f"opcount.{package}.{function}"), package)
    assert callable(module) and module.__doc__


def test_opcount_hardware_called_is_the_lookup() -> None:
    assert opcount.hardware("h100-sxm") is opcount.hardware.hardware("h100-sxm")


@pytest.mark.parametrize("name", opcount.__all__)
def test_every_public_name_imports_from_opcount(name: str) -> None:
    assert getattr(opcount, name) is not None


def test_the_formula_modules_cite_the_amaix_paper() -> None:
    for module in ("opcount.roofline", "opcount.roofline.model", "opcount.roofline.build"):
        assert "AMAIX" in (importlib.import_module(module).__doc__ or ""), module


def test_importing_the_roofline_registers_its_report_columns() -> None:
    from opcount.report import COLUMNS

    assert {"time", "time_share", "bound", "unit"} <= set(COLUMNS)


def test_the_errors_module_holds_only_the_hierarchy() -> None:
    from opcount import errors

    defined = [n for n, v in vars(errors).items() if getattr(v, "__module__", None) == "opcount.errors"]
    assert all(isinstance(getattr(errors, n), type) and issubclass(getattr(errors, n), Exception) for n in defined)
    for name in defined:
        assert name in (errors.__doc__ or ""), f"{name} is not drawn in the hierarchy"


# The LLM package's folders in the order they may import one another: a module imports only from its own
# layer, from layers before it, and from the rest of opcount (docs/architecture.md).
LLM_LAYERS: tuple[tuple[str, ...], ...] = (
    ("patching",),
    ("models",),
    ("attention",),
    ("moe",),
    ("cache",),
    ("precision",),
    ("decoder",),
    ("kernels",),
    ("phases",),
    ("engines",),
    ("deploy",),
    ("causal_lm",),
    ("generation",),
    ("serve",),
    ("sweep",),
    ("plan",),
    ("report",),
    ("training", "validation"),
    ("calibration",),
)


def _llm_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["opcount", "llm"] or len(parts) < 3:
        return None
    return next(i for i, names in enumerate(LLM_LAYERS) if parts[2] in names)


def test_every_llm_module_has_a_layer() -> None:
    for name in NAMES:
        if name.startswith("opcount.llm."):
            assert _llm_layer(name) is not None, f"{name} is in no layer of LLM_LAYERS"


def test_llm_folders_import_only_layers_before_them() -> None:
    upward = []
    for name, targets in GRAPH.items():
        here = _llm_layer(name)
        if here is None:
            continue
        for target in targets:
            there = _llm_layer(target)
            if there is not None and there > here:
                upward.append(f"{name} -> {target}")
    assert upward == []


def test_training_imports_nothing_from_the_llm_package() -> None:
    found = [f"{n} -> {t}" for n, ts in GRAPH.items() if n.startswith("opcount.training") for t in ts]
    assert [f for f in found if ".llm" in f] == []


# The command line's parsing half: the parser, the typed options, the checks and the flag groups.
PARSING = ("opcount.cli.parser", "opcount.cli.options", "opcount.cli.args", "opcount.cli.flags")
# What runs a command, besides the command's own other modules (which build, trace, price and render): the
# tracers and the analyses on a trace, the LLM phases and what prices them, the model catalogue.
RUNNING = (
    "opcount.tracing",
    "opcount.tracers.dispatch",
    "opcount.tracers.jit",
    "opcount.analysis",
    "opcount.memory",
    "opcount.roofline.build",
    "opcount.profiling",
    "opcount.llm.phases",
    "opcount.llm.training",
    "opcount.llm.sweep",
    "opcount.llm.report",
    "opcount.llm.kernels.estimate",
    "opcount.llm.deploy.deployment",
    "opcount.llm.models.catalogue",
)


def _within(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def _reached(start: list[str], graph: dict[str, list[str]]) -> set[str]:
    """Every module ``start`` imports, and what those import, and so on. A package's ``__init__`` counts where
    it is imported by name, not as the parent of a submodule imported (``import opcount`` loads the public
    API whatever is imported: what is held here is what the parser's own code depends on)."""
    seen: set[str] = set()
    todo = list(start)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, [])
    return seen


def test_the_parser_imports_no_module_that_runs() -> None:
    # A flag is read and refused without the code that builds, traces or prices: the parser cannot break
    # when that code changes, and a mistake costs no import of it.
    parsing = [name for name in NAMES if _within(name, PARSING)]
    assert "opcount.cli.flags.llm" in parsing and "opcount.cli.flags.deploy" in parsing
    reached = _reached(parsing, GRAPH)
    running = sorted(
        m for m in reached if (m.startswith("opcount.cli") and not _within(m, PARSING)) or _within(m, RUNNING)
    )
    assert running == []


def test_the_walk_finds_a_module_reached_through_others() -> None:
    graph = {"p": ["a"], "a": ["b"], "b": ["opcount.llm.phases"], "c": ["opcount.cli.llm"]}
    assert _reached(["p"], graph) == {"p", "a", "b", "opcount.llm.phases"}
