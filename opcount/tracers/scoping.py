"""Module scopes for the dispatch tracer: which module of the model each operator runs in.

A replaced ``nn.Module.__call__`` (or, for a module with hooks of its own, a forward pre/post
hook pair) opens and closes the scope of each module call, with the jit tracer's semantics.
Kept apart from the recorder because it is the one process-wide patch of the module calls:
its installation, its thread checks and its removal on errors read best on their own.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from ..scopes import ROOT, ModuleTree, inner_scope
from ..torch_internals import compiled, first_global_forward_hook, global_hooks, has_hooks, hook_epoch, hooked_since
from .jit import WRAPPERS
from .patching import OtherThreads, exclusive, replaced
from .replay import LEAF, RUN, Replayer

_UNSET = object()

Scope = tuple[str, ...]


class Scopes:
    """Keeps the scope of the running module, with the jit tracer's semantics: a module's scope
    covers its ``forward`` (after its forward pre-hooks, before its forward hooks), so operators
    that a user's own hooks run land in the caller's scope.

    A module without hooks gets its scope from ``nn.Module.__call__``, replaced for the trace
    (as ``Function.apply`` is, see :mod:`.custom_functions`): one lookup per module call, and
    nothing set on the modules. A module with hooks gets a
    forward pre-hook after its own and a forward hook before its own, which take every call of
    it off torch's fast path; global module hooks (``register_module_forward_hook``) run before
    a module's own, so with any of those the closing hook is a global one, placed first. All are
    removed in ``finally``.
    """

    def __init__(self, tree: ModuleTree, model: nn.Module) -> None:
        self._tree = tree
        self._model = model
        self._stack: list[Scope] = [ROOT]
        self._opened: list[nn.Module | None] = [None]  # the module whose call opened each scope
        self._pushed: dict[tuple[Scope, str], Scope] = {}  # one tuple per distinct scope
        self._epoch = -1  # the number the next hook handle took when the pass began
        self._forwards: dict[int, int] = {}  # id -> depth of the modules whose forward is scoped
        self._thread = threading.get_ident()  # the tracing thread: module calls of others open no scope
        self.live: list[int | None] = [self._thread]  # the same, None once the window closed
        self.others = OtherThreads()  # the model's modules other threads called meanwhile

    @property
    def current(self) -> Scope:
        return self._stack[-1]

    def scope_of(self, name: str) -> Scope:
        """The scope of module ``name`` called now."""
        top = self._stack[-1]
        scope = self._pushed.get((top, name))
        if scope is None:
            scope = self._pushed[(top, name)] = inner_scope(top, name)
        return scope

    def enter(self, name: str, module: nn.Module | None = None) -> None:
        """Open the scope of module ``name``, called now."""
        self._stack.append(self.scope_of(name))
        self._opened.append(module)

    def exit(self) -> None:
        self._stack.pop()
        self._opened.pop()

    def hooked(self, module: nn.Module) -> bool:
        """Whether a hook registered during the pass would run around the module's forward."""
        return hooked_since(self._epoch, module)

    def run(self, module: nn.Module, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A module's call in its scope."""
        if self.hooked(module):
            return self._run_hooked(module, name, args, kwargs)
        self.enter(name)
        try:
            return module._call_impl(*args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        finally:
            self.exit()

    def _run_hooked(self, module: nn.Module, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call of a module that got a hook during the pass: its scope covers its ``forward``
        alone, as with the hooks placed at set-up, so the hooks' operators are the caller's.
        ``_call_impl`` calls ``self.forward``: an instance attribute of that name, set for the
        call (and the calls it makes of the same module), opens the scope."""
        key, depth = id(module), self._forwards.get(id(module), 0)
        if depth == 0:
            saved = module.__dict__.get("forward", _UNSET)  # a forward of the instance's own
            forward, get_ident, thread = module.forward, threading.get_ident, self._thread

            def scoped(*a: Any, **k: Any) -> Any:
                if get_ident() != thread:  # the same module called by another thread meanwhile
                    self.others.saw(name)
                    return forward(*a, **k)
                self.enter(name, module)
                try:
                    return forward(*a, **k)
                finally:
                    self.exit()

            module.__dict__["forward"] = scoped
        self._forwards[key] = depth + 1
        try:
            return module._call_impl(*args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        finally:
            self._forwards[key] = depth
            if depth == 0:
                if saved is _UNSET:
                    module.__dict__.pop("forward", None)
                else:
                    module.__dict__["forward"] = saved

    def _module_call(
        self, plain: dict[int, tuple[str, int]], original: Callable[..., Any], replayer: Replayer | None
    ) -> Callable[..., Any]:
        """``nn.Module.__call__`` for the trace: the modules in ``plain`` (id -> name, how) run
        in their scope or are replayed (:mod:`.replay`); any other
        module, or a call from another thread or after the window, runs as usual."""
        run, get_ident, thread = self.run, threading.get_ident, self.live
        replay = replayer.call if replayer is not None else run
        enter, leave, hooked, saw = self.enter, self.exit, self.hooked, self.others.saw

        def module_call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            entry = plain.get(id(module))
            if entry is None:
                return original(module, *args, **kwargs)
            if get_ident() != thread[0]:  # the analyzed model in another thread: its work escapes the trace
                if thread[0] is not None:
                    saw(entry[0])
                return original(module, *args, **kwargs)
            name, how = entry
            if how == LEAF:
                return replay(module, name, args, kwargs)
            if hooked(module):
                return run(module, name, args, kwargs)
            # run()'s body inline: three frames per nesting level, as torch's own call takes, so a
            # model nests as deep under the tracer as it does under the recursion limit without it
            enter(name)
            try:
                return module._call_impl(*args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            finally:
                leave()

        return module_call

    def _pre_hook(self, name: str) -> Callable[[nn.Module, Any], None]:
        def enter(module: nn.Module, args: Any) -> None:
            if threading.get_ident() == self._thread:
                self.enter(name, module)
            elif self.live[0] is not None:
                self.others.saw(name)

        return enter

    def _post_hook(self, module: nn.Module, args: Any, output: Any) -> None:
        # a global hook sees modules outside the tree too, and calls from other threads
        if self._opened[-1] is module and threading.get_ident() == self._thread:
            self.exit()

    @contextlib.contextmanager
    def installed(self, replayer: Replayer | None = None) -> Iterator[None]:
        """Scopes for the trace; with ``replayer``, torch.nn's leaf modules replayed (:mod:`.replay`).
        Held under :mod:`.patching`'s lock; everything is removed afterwards, also on errors."""
        with exclusive(), self._installed(replayer):
            yield

    @contextlib.contextmanager
    def _installed(self, replayer: Replayer | None) -> Iterator[None]:
        handles = []
        plain: dict[int, tuple[str, int]] = {}  # modules scoped by __call__: id -> (name, how)
        hooked = global_hooks()
        try:
            if hooked:
                handle = torch.nn.modules.module.register_module_forward_hook(self._post_hook, always_call=True)
                first_global_forward_hook(handle)  # closes the scope before the user's global hooks run
                handles.append(handle)
            modules = self._tree.modules
            for name in self._tree.names:
                module = modules[name]
                if module is not self._model and isinstance(module, WRAPPERS):
                    continue
                if not hooked and not has_hooks(module) and not compiled(module):
                    plain[id(module)] = (name, RUN if replayer is None else replayer.adopt(module, name))
                    continue
                # after the user's pre-hooks, before the user's post-hooks, also on errors
                handles.append(module.register_forward_pre_hook(self._pre_hook(name)))
                if not hooked:
                    handles.append(module.register_forward_hook(self._post_hook, prepend=True, always_call=True))
            call = replaced(nn.Module, "__call__", lambda original: self._module_call(plain, original, replayer))
            with call if plain else contextlib.nullcontext():
                self._epoch = hook_epoch()
                yield
        finally:
            self.live[0] = None  # a replaced __call__ someone kept passes every call through
            for h in handles:
                h.remove()
