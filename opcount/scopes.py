"""The module tree of a model, built once: canonical names, aliases and ancestors.

Names follow fvcore: the root is ``""``, descendants are ``"child.grandchild"``. A module
reachable under several names (a shared module) is reported under the first name met in
registration order; the other names are aliases of it.
"""

from __future__ import annotations

import torch
from torch import nn

from .errors import OpcountKeyError, OpcountTypeError

ROOT: tuple[str, ...] = ("",)  # the scope of an operator that ran in the model itself


def inner_scope(scope: tuple[str, ...], name: str) -> tuple[str, ...]:
    """The scope of module ``name`` called within ``scope``: the stack of canonical names of the
    modules running, outermost first. The model's own call (name ``""``) keeps the root scope."""
    return scope if scope == ROOT and not name else (*scope, name)


class ModuleTree:
    """Canonical module names of a model with their aliases, and the tree they form: each
    module's parent, children and depth by ownership, found once while walking the model, so
    that no consumer has to parse a dotted name to learn them."""

    def __init__(self, model: nn.Module) -> None:
        self.modules: dict[str, nn.Module] = {}  # every name, aliases included
        self.aliases: dict[str, str] = {}  # any name -> canonical name
        self.names: list[str] = []  # canonical names in registration order
        self._by_id: dict[int, str] = {}
        self._parent: dict[str, str | None] = {}
        self._children: dict[str, list[str]] = {}
        self._owners: dict[str, tuple[str, ...]] = {}
        self._walk(model)

    def _walk(self, model: nn.Module) -> None:
        """Register every module of ``model`` under each name it is met by.

        Pre-order, as ``named_modules()``: a shared module keeps the first name it is met by,
        and its parent is the module it was first met in, so each owner chain extends its
        parent's (fvcore's naming). A loop over a stack, not recursion: a model nested deeper
        than Python's recursion limit is walked too, as torch runs it."""
        pending: list[tuple[nn.Module, str, str | None]] = [(model, "", None)]
        while pending:
            module, name, parent = pending.pop()
            canonical = self._by_id.setdefault(id(module), name)
            self.modules[name] = module
            self.aliases[name] = canonical
            if canonical == name:
                self.names.append(name)
                self._parent[name] = parent
                self._children[name] = []
                if parent is None:
                    self._owners[name] = ROOT
                else:
                    self._children[parent].append(name)
                    self._owners[name] = (*self._owners[parent], name)
            elif parent is not None and canonical in self._owners[parent]:
                continue  # a module inside itself: its names end here, as named_modules()' do
            # An alias's children were met before under the canonical name: these names of theirs
            # become aliases too (the string is built here, at the boundary, once). Reversed onto
            # the stack, so that the first child is walked first.
            children = [
                (c, f"{name}.{key}" if name else key, canonical) for key, c in module._modules.items() if c is not None
            ]
            pending.extend(reversed(children))

    def changes(self, model: nn.Module) -> str:
        """How ``model``'s module tree differs from this one (module names added, removed or bound
        to another module), or ``""`` when it is the same: a tree is taken when an analysis is
        made, and a model edited before its trace would mix the two."""
        now = ModuleTree(model)
        if now.modules.keys() == self.modules.keys() and all(now.modules[n] is m for n, m in self.modules.items()):
            return ""
        removed = [n for n in self.modules if n not in now.modules]
        added = [n for n in now.modules if n not in self.modules]
        replaced = [n for n, m in self.modules.items() if n in now.modules and now.modules[n] is not m]
        parts = [
            f"{what} {', '.join(repr(n) for n in names[:5])}{' and more' if len(names) > 5 else ''}"
            for what, names in (("removed", removed), ("added", added), ("replaced", replaced))
            if names
        ]
        return "; ".join(parts)

    def canonical(self, name: str) -> str:
        """The canonical name of ``name``; KeyError if no module has that name."""
        if not isinstance(name, str):
            raise OpcountTypeError(f"module names are strings, got {type(name).__name__}")
        try:
            return self.aliases[name]
        except KeyError:
            raise OpcountKeyError(f"no module named {name!r} in the analyzed model") from None

    def has(self, module: nn.Module) -> bool:
        return id(module) in self._by_id

    def name_of(self, module: nn.Module) -> str:
        return self._by_id[id(module)]

    def owners(self, name: str) -> tuple[str, ...]:
        """The module and its ancestors by ownership (by name), root first."""
        found = self._owners.get(name)
        if found is None:
            raise KeyError(name)
        return found

    def parent(self, name: str) -> str | None:
        """The canonical module that owns module ``name`` (None for the model)."""
        return self._parent[self.canonical(name)]

    def children(self, name: str) -> tuple[str, ...]:
        """The canonical modules module ``name`` owns, in registration order."""
        return tuple(self._children[self.canonical(name)])

    def depth(self, name: str) -> int:
        """Levels below the model: 0 for the model, 1 for its children, ..."""
        return len(self._owners[self.canonical(name)]) - 1

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
            if root and root not in self._owners[name]:  # not root or one of its descendants
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


def failure_site(model: nn.Module, tree: ModuleTree, e: BaseException) -> str:
    """Where a forward pass failed: the innermost module of ``model`` whose ``forward`` is on the
    exception's traceback (``module 'body.2' (Linear)``), else ``the model (ResNet)``."""
    where = None
    tb = e.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module) and tree.has(owner):
            where = tree.name_of(owner)
        tb = tb.tb_next
    if where:
        depth = tree.depth(where)
        if depth > _NAMED_LEVELS:  # a name hundreds of levels long says less than its depth
            chain = tree.owners(where)
            where = f"{chain[_NAMED_LEVELS // 2]}...{where[len(chain[-_NAMED_LEVELS // 2]) + 1 :]}"
            return f"module '{where}' ({type(tree.module(chain[-1])).__name__}, {depth} levels deep)"
        return f"module '{where}' ({type(tree.module(where)).__name__})"
    return f"the model ({type(model).__name__})"


_NAMED_LEVELS = 8  # a failing module deeper than this is named by its first and last levels


def recursion_hint(tree: ModuleTree) -> str:
    """Why a forward pass ran out of Python's recursion limit, and what to do."""
    depth = max(len(tree.owners(name)) for name in tree.names) - 1
    return (
        f"the model nests modules {depth} levels deep and its forward pass ran past Python's recursion "
        "limit (torch takes 3 or 4 frames per level): raise it with sys.setrecursionlimit(), as running "
        "the model itself needs"
    )
