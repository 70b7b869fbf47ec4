"""Private torch internals: reached through opcount.torch_internals alone, and a missing one is
a clear error naming the torch version and the internal, never an AttributeError mid-trace."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import opcount
from opcount import FlopCountAnalysis, OpcountError, TorchInternalsError
from opcount import torch_internals as internals

PACKAGE = Path(opcount.__file__).parent

# nn.Module's hook dicts and OpOverload's schema: reached through opcount.torch_internals
_GUARDED_ATTRIBUTES = {
    "_schema",
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
    "_compiled_call_impl",
}


def _private_torch_uses(tree: ast.AST) -> list[str]:
    """``torch._x`` attribute chains, imports of private torch modules, and guarded attributes."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            private = any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in chain)
            if isinstance(value, ast.Name) and value.id == "torch" and private:  # torch.__version__ is public
                found.append(".".join(["torch", *reversed(chain)]))
            elif node.attr in _GUARDED_ATTRIBUTES:
                found.append(f"...{node.attr}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "torch":
            names = [*node.module.split("."), *(a.name for a in node.names)]
            if any(n.startswith("_") for n in names):
                found.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("torch.") and "._" in a.name]
    return found


def test_only_the_internals_module_touches_private_torch_apis() -> None:
    uses = {
        str(path.relative_to(PACKAGE)): found
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "torch_internals.py" and (found := _private_torch_uses(ast.parse(path.read_text())))
    }
    assert uses == {}


def test_the_checked_versions_are_named_and_the_installed_one_passes() -> None:
    assert internals.CHECKED_ON == ("2.13.0", "2.14.1")
    assert "2.13.0" in internals.__doc__ and "2.14.1" in internals.__doc__
    internals.require(internals.JIT)
    internals.require(internals.DISPATCH)


def _linear_model() -> tuple[nn.Module, torch.Tensor]:
    return nn.Sequential(nn.Linear(8, 16)), torch.randn(1, 8)


@pytest.mark.parametrize(
    ("owner", "name", "tracer"),
    [
        (torch._C, "_create_graph_by_tracing", "jit"),
        (torch._C, "_get_tracing_state", "jit"),
        (torch._C, "_current_autograd_node", "dispatch"),
        (torch._C, "_dispatch_tls_local_exclude_set", "dispatch"),
        (torch.nn.modules.module, "_global_forward_hooks", "jit"),
        (torch.nn.modules.module, "_global_forward_hooks", "dispatch"),
    ],
)
def test_a_missing_internal_is_named_with_the_torch_version(
    owner: object, name: str, tracer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model, x = _linear_model()
    monkeypatch.delattr(owner, name)
    with pytest.raises(TorchInternalsError) as raised:
        FlopCountAnalysis(model, x, tracer=tracer).total()
    message = str(raised.value)
    assert torch.__version__ in message and f".{name}" in message
    assert "2.13.0 and 2.14.1" in message
    assert isinstance(raised.value, OpcountError)


def test_a_missing_module_attribute_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(internals, "_MODULE_ATTRIBUTES", (*internals._MODULE_ATTRIBUTES, "_no_such_dict"))
    with pytest.raises(TorchInternalsError, match=r"torch\.nn\.Module\(\)\._no_such_dict"):
        internals.require(())


def test_an_internal_missing_at_import_fails_when_used() -> None:
    # What a torch without the internal gets at import: a stand-in, so `import opcount` works.
    missing = internals._bind("torch._C._no_such_internal")
    with pytest.raises(
        TorchInternalsError, match=rf"torch {re.escape(torch.__version__)} has no torch\._C\._no_such_internal"
    ):
        missing()
    with pytest.raises(TorchInternalsError, match=r"_no_such_internal\.tree_map"):
        missing.tree_map(None, ())

    class Derived(missing):  # type: ignore[misc,valid-type]  # a class deriving from it still defines
        pass

    assert not isinstance(Derived(), internals._bind("torch._C._no_such_class", internals._Absent))
