"""transformers' names beyond building a model: reached through opcount.transformers_internals
alone, each version difference settled there, and a missing one a clear error naming the version."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import opcount
from opcount import OpcountError
from opcount import transformers_internals as internals

pytest.importorskip("transformers")
pytestmark = pytest.mark.smoke

PACKAGE = Path(opcount.__file__).parent
# reached only through opcount.transformers_internals: submodules, the mappings, the attention slot
_GUARDED = {"MODEL_FOR_CAUSAL_LM_MAPPING", "MODEL_FOR_MASKED_LM_MAPPING", "_attn_implementation_internal"}


def _private_uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformers."):
            found.append(f"from {node.module} import")
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("transformers.")]
        elif isinstance(node, ast.ImportFrom) and node.module == "transformers":
            found += [a.name for a in node.names if a.name in _GUARDED or a.name.startswith("Static")]
        elif isinstance(node, ast.Attribute) and node.attr in _GUARDED:
            found.append(node.attr)
    return found


def test_only_the_internals_module_reaches_transformers_internals() -> None:
    offenders = {
        str(path.relative_to(PACKAGE)): uses
        for path in PACKAGE.rglob("*.py")
        if path.name != "transformers_internals.py" and (uses := _private_uses(ast.parse(path.read_text())))
    }
    assert offenders == {}


def test_a_name_transformers_lacks_is_one_line_naming_the_version(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(internals._NAMES, "Gone", "transformers.cache_utils.NoSuchLayer")
    import transformers

    with pytest.raises(OpcountError, match=rf"transformers {transformers.__version__} has no .*NoSuchLayer"):
        internals.Gone  # noqa: B018  # the lookup is the test


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError):
        internals.NoSuchName  # noqa: B018
