"""The module tree of a model, built once: canonical names, aliases and ancestors.

Names follow fvcore: the root is ``""``, descendants are ``"child.grandchild"``. A module
reachable under several names (a shared module) is reported under the first name met in
registration order; the other names are aliases of it.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import nn

ROOT: tuple[str, ...] = ("",)  # the scope of an operator that ran in the model itself


def inner_scope(scope: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The scope of module ``name`` called within ``scope``: the stack of canonical names of the
    modules running, outermost first. The model's own call (name ``""``) keeps the root scope."""
    return scope if scope == ROOT and not name else (*scope, name)


def named_modules_with_aliases(model: nn.Module, prefix: str = "") -> Iterator[tuple[str, nn.Module]]:
    """Like ``named_modules()`` but also yields every further name of a shared module."""
    yield prefix, model
    for name, child in model._modules.items():
        if child is not None:
            yield from named_modules_with_aliases(child, f"{prefix}.{name}" if prefix else name)


class ModuleTree:
    """Canonical module names of a model with their owners (parents by name) and aliases."""

    def __init__(self, model: nn.Module) -> None:
        self.modules: dict[str, nn.Module] = {}  # every name, aliases included
        self.aliases: dict[str, str] = {}  # any name -> canonical name
        self.names: list[str] = []  # canonical names in registration order
        self._by_id: dict[int, str] = {}
        for name, module in named_modules_with_aliases(model):
            canonical = self._by_id.setdefault(id(module), name)
            if canonical == name:
                self.names.append(name)
            self.modules[name] = module
            self.aliases[name] = canonical
        self._owners: dict[str, tuple[str, ...]] = {}  # filled on demand

    def _owner_chain(self, name: str) -> tuple[str, ...]:
        # The prefixes of a canonical name are canonical too: a module first met through
        # "a.b" is met before any of its children, so the children's first names extend "a.b".
        if not name:
            return ROOT
        parent = name.rpartition(".")[0]
        up = self._owners.get(parent)
        if up is None:
            up = self._owners[parent] = self._owner_chain(parent)
        return (*up, name)

    def canonical(self, name: str) -> str:
        """The canonical name of ``name``; KeyError if no module has that name."""
        if not isinstance(name, str):
            raise TypeError(f"module names are strings, got {type(name).__name__}")
        try:
            return self.aliases[name]
        except KeyError:
            raise KeyError(f"no module named {name!r} in the analyzed model") from None

    def has(self, module: nn.Module) -> bool:
        return id(module) in self._by_id

    def name_of(self, module: nn.Module) -> str:
        return self._by_id[id(module)]

    def owners(self, name: str) -> tuple[str, ...]:
        """The module and its ancestors by ownership (by name), root first."""
        found = self._owners.get(name)
        if found is None:
            if name not in self.aliases or self.aliases[name] != name:
                raise KeyError(name)
            found = self._owners[name] = self._owner_chain(name)
        return found

    def module(self, name: str) -> nn.Module:
        return self.modules[name]

    def state(self, root: str = "", *, persistent_only: bool = False) -> list[tuple[str, torch.Tensor]]:
        """The parameters and buffers of module ``root`` (default: the model) and its descendants,
        named relative to it, each tensor once under its first name: ``state_dict``'s order and
        naming (``persistent_only``: its choice of buffers too), without its per-module calls."""
        found: list[tuple[str, torch.Tensor]] = []
        seen: set[int] = set()
        prefix = root + "." if root else ""
        for name in self.names:
            if root and name != root and not name.startswith(prefix):
                continue
            module = self.modules[name]
            here = name[len(prefix) :] + "." if name != root else ""
            for key, t in module._parameters.items():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    found.append((here + key, t))
            if module._buffers:
                skip = module._non_persistent_buffers_set if persistent_only else ()
                for key, buffer in module._buffers.items():
                    if buffer is not None and key not in skip and id(buffer) not in seen:
                        seen.add(id(buffer))
                        found.append((here + key, buffer))
        return found
