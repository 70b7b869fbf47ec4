"""The dispatch tracer: every aten operator recorded as it is dispatched (a TorchDispatchMode).

Unlike jit tracing it needs no real arithmetic (it can run on meta tensors), keeps operators whose
results only steer Python control flow, sees inside custom autograd Functions and can follow
the backward pass. It emits the records the jit tracer emits, so handles, aggregation and
reports are shared:

- **Forward pass below autograd.** The model runs with autograd's dispatch keys excluded
  (grad mode untouched, so models take the same paths as under jit). There, composite
  operators such as ``linear``, ``matmul``, ``einsum``, ``batch_norm``, ``layer_norm`` and
  ``scaled_dot_product_attention`` reach the mode whole, as the jit tracer records them,
  instead of decomposed into ``t``/``addmm``/``native_batch_norm``. :mod:`.aten` binds their
  arguments as jit does and renames the few jit records differently (``conv2d`` ->
  ``_convolution``).
- **Training.** With ``mode="train"`` each forward operator is run with autograd re-enabled
  inside the mode, so autograd builds its graph of the decomposed operators; every new
  autograd node is tagged with the module scope (and custom Function) of the operator that
  made it. ``torch.autograd.grad`` then runs the backward pass under the mode, and each
  backward operator takes the scope of the node running it (``_current_autograd_node``).
- **Custom autograd Functions.** ``Function.apply`` is wrapped for the trace so that the
  operators inside ``forward`` and ``backward`` are recorded under the Function's name
  (``OpCall.within``, reported as ``"MyFn::mm"``; MXNet's custom-operator prefixes).
  ``torch.library`` custom operators are recorded whole under their qualified name, as jit
  records them: on meta tensors only their fake implementation would run inside.
- **Meta analysis.** A forward pass on the meta device runs on shape-only tensors
  (:mod:`.shapes`): each operator's outputs come from a cache keyed by its inputs' metadata.
  What they cannot follow (a value read, an in-place reshape) runs again on torch's fake
  tensors (:mod:`.meta`), which training always uses.
- **Scopes** come from ``nn.Module.__call__``, replaced for the trace, or a forward pre/post
  hook pair for a module with hooks of its own (removed in ``finally``), with the jit tracer's
  semantics. On shape-only tensors, calls of torch.nn's own leaf modules are replayed from
  their first call's records (:mod:`.replay`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn
from torch.autograd import Function
from torch.utils.weak import WeakIdKeyDictionary

from .._runtime import gc_paused
from ..errors import TraceError, failure_site, first_line
from ..ir import Const, ListSpec, OpCall, Spec, TensorSpec
from ..scopes import ROOT, ModuleTree, inner_scope
from ..torch_internals import (
    DISPATCH,
    AccumulateGrad,
    AutoDispatchBelowADInplaceOrView,
    ForceDispatchKeyGuard,
    TorchDispatchMode,
    compiled,
    current_autograd_node,
    dispatch_exclude_set,
    dispatch_include_set,
    first_global_forward_hook,
    global_hooks,
    has_hooks,
    hook_epoch,
    hooked_since,
    pytree,
    require,
)
from .aten import Record, backward_records, bind, forward_records, jit_constant, outputs_of, schema
from .jit import WRAPPERS, Recording, _warnings
from .meta import CPU, META, FakeTensorMode, TensorShape, fake_state, materialize
from .patching import exclusive, replaced
from .replay import LEAF, RUN, Replayer
from .shapes import Meta, ShapeRunner, ShapeTensor
from .state import preserved
from .structure import normalize_inputs, output_tensors

logger = logging.getLogger(__name__)

MODES = ("eval", "train")
_TAG = "opcount"  # key of the (scope, within) tag in autograd nodes' metadata
_UNSET = object()

Scope = tuple[str, ...]
Tag = tuple[Scope, tuple[str, ...]]


def trace_dispatch(
    model: nn.Module,
    inputs: Any,
    kwargs: Mapping[str, Any] | None,
    tree: ModuleTree,
    warn_mode: str = "no_tracer_warning",
    *,
    mode: str = "eval",
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    device: torch.device | str | None = None,
) -> Recording:
    """Run one forward pass (``mode="eval"``) or one training step's forward and backward
    (``mode="train"``) of ``model`` under a dispatch mode and return its operator records.

    ``mode`` sets the modules' training flags for the trace (restored afterwards). In training,
    the loss is ``loss_fn(output)`` or, by default, the sum of every output tensor that requires
    grad; gradients are taken for every parameter and input tensor that requires grad (nothing
    is written to ``.grad``). ``device="meta"`` analyzes the model on storage-less tensors
    without touching its weights: shape-only tensors (:mod:`.shapes`) for a forward pass, fake
    tensors (:mod:`.meta`) for a training step or what shape-only tensors cannot follow; a model
    already on the meta device is analyzed that way by default.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; choose 'eval' (forward) or 'train' (forward and backward)")
    require(DISPATCH)
    if loss_fn is not None and mode != "train":
        raise ValueError("loss_fn is only used with mode='train'")
    if device is not None and torch.device(device) != META:
        raise ValueError(f"device must be None (where the model is) or 'meta', got {device!r}")
    args, kw = normalize_inputs(inputs, kwargs)
    inner = model.module if isinstance(model, WRAPPERS) else model
    state = tree.state(tree.name_of(inner))
    built_on_meta = any(t.is_meta for _, t in state)
    on_meta = device is not None or built_on_meta
    claimed = CPU if built_on_meta or not state else state[0][1].device  # what meta tensors claim
    train = mode == "train"
    if on_meta and not train:
        try:
            return _trace(model, inner, tree, state, args, kw, warn_mode, _ShapeTensors(claimed), train, None)
        except TrainingError:
            raise
        except Exception as e:  # noqa: BLE001 -- what a shape-only tensor cannot follow, fake tensors may
            cause = e.__cause__ or e
            logger.debug(
                "shape-only tensors stopped at %s: %s; running on fake tensors", type(cause).__name__, first_line(cause)
            )
    tensors = _FakeTensors(claimed) if on_meta else _RealTensors(claimed)
    return _trace(model, inner, tree, state, args, kw, warn_mode, tensors, train, loss_fn if train else None)


def _trace(
    model: nn.Module,
    inner: nn.Module,
    tree: ModuleTree,
    named: list[tuple[str, torch.Tensor]],
    args: tuple[Any, ...],
    kw: dict[str, Any],
    warn_mode: str,
    tensors: _RealTensors,
    train: bool,
    loss_fn: Callable[[Any], torch.Tensor] | None,
) -> Recording:
    # under the patch lock throughout: the warning filters, the collector, the flags and buffers are process state too
    preserving = preserved(tree, (args, kw), values=not tensors.on_meta)  # stand-ins write nothing back
    with exclusive(), gc_paused(), _training_flags(tree, model, train), preserving, _warnings(warn_mode):
        args, kw = tensors.inputs((args, kw))
        state = tensors.state(inner, named)
        step = _Step(inner, state, args, kw, loss_fn, train)
        names = {id(t): name for name, t in (*named, *state.items())}  # the tensors the forward sees
        recorder = _Recorder(_Scopes(tree, inner), names, train, tensors.compute)
        with tensors.mode(), recorder.scopes.installed(tensors.replayer(recorder)), _functions_named(recorder):
            try:
                recorder.run(step)
            except TrainingError:
                raise
            except Exception as e:  # re-raised with the module path
                raise _trace_error(model, tree, e, tensors.on_meta) from e
    calls = tuple(recorder.calls)
    called = {name for scope in {call.scope for call in calls} for name in scope} | {""}
    return Recording(calls, frozenset(called | _inside_scripted(tree, called)), recorder.outputs)


def _inside_scripted(tree: ModuleTree, called: set[str]) -> set[str]:
    """The submodules of the TorchScript modules that ran: they ran inside them, as one call
    whose cost is the scripted module's (no Python ``__call__`` of theirs to scope)."""
    scripted = {name for name in called if isinstance(tree.module(name), torch.jit.ScriptModule)}
    if not scripted:
        return set()
    return {name for name in tree.names if not scripted.isdisjoint(tree.owners(name))}


class _RealTensors:
    """What the model runs on: how inputs and weights are made, and how an operator computes.

    This one: the model's own tensors, kernels run as usual; inputs given by shape become zeros
    on the model's device.
    """

    on_meta = False

    def __init__(self, claimed: torch.device) -> None:
        self.claimed = claimed
        # how an operator's outputs are made, from (func, args, kwargs, operator number); None: its kernel
        self.compute: Callable[[Any, tuple[Any, ...], dict[str, Any], int], Any] | None = None

    def inputs(self, tree: Any) -> Any:
        return materialize(tree, self.claimed)

    def state(self, model: nn.Module, named: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        """Stand-ins for the model's parameters and buffers during the call, by name."""
        return {}  # none: the model's own

    def mode(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def replayer(self, recorder: _Recorder) -> Replayer | None:
        """What replays leaf module calls from their records (:mod:`.replay`); None: they all run."""
        return None


class _FakeTensors(_RealTensors):
    """torch's fake tensors (:mod:`.meta`): the weights swapped for fake stand-ins for the call."""

    on_meta = True

    def __init__(self, claimed: torch.device) -> None:
        super().__init__(claimed)
        self._fake = FakeTensorMode(allow_non_fake_inputs=True)

    def inputs(self, tree: Any) -> Any:
        return materialize(tree, self.claimed, self._fake)

    def state(self, model: nn.Module, named: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return fake_state(model, self.claimed, self._fake)

    def mode(self) -> contextlib.AbstractContextManager[Any]:
        return self._fake


class _ShapeTensors(_RealTensors):
    """Shape-only tensors (:mod:`.shapes`): inputs become shape-only, the weights stay as they are
    (no kernel ever reads them), and each operator's outputs come from its inputs' metadata."""

    on_meta = True

    def __init__(self, claimed: torch.device) -> None:
        super().__init__(claimed)
        self._runner = ShapeRunner(claimed)
        self.compute = self._runner.run

    def inputs(self, tree: Any) -> Any:
        runner = self._runner

        def leaf(x: Any) -> Any:
            if isinstance(x, TensorShape):
                return runner.empty(x.shape, x.dtype)
            return runner.wrap(x) if isinstance(x, torch.Tensor) else x

        return pytree.tree_map(leaf, tree)

    def state(self, model: nn.Module, named: list[tuple[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
        self._runner.remember(t for _, t in named)
        return {}

    def replayer(self, recorder: _Recorder) -> Replayer | None:
        return Replayer(recorder, recorder.scopes, self.claimed, self._runner.freeze, self._runner.metas)


class TrainingError(ValueError):
    """``mode="train"`` cannot differentiate: no loss, or nothing that requires grad."""


class _Step:
    """What the recorder runs: the forward call and, when training, the loss and what to
    differentiate it by."""

    def __init__(
        self,
        model: nn.Module,
        state: dict[str, torch.Tensor],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        loss_fn: Callable[[Any], torch.Tensor] | None,
        train: bool,
    ) -> None:
        self.model, self.state, self.args, self.kwargs = model, state, args, kwargs
        self.loss_fn = loss_fn
        self.train = train

    def forward(self) -> Any:
        if self.state:  # fake stand-ins for the weights, for this call only
            return torch.func.functional_call(
                self.model, self.state, self.args, self.kwargs, tie_weights=True, strict=False
            )
        return self.model(*self.args, **self.kwargs)

    def loss(self, output: Any) -> torch.Tensor:
        if self.loss_fn is not None:
            loss = self.loss_fn(output)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TrainingError(f"loss_fn must return a one-element tensor, got {type(loss).__name__}")
            return loss
        outs = [t for t in output_tensors(output) if t.requires_grad]
        if not outs:
            raise TrainingError("mode='train': no output tensor requires grad; pass loss_fn, or check requires_grad")
        return functools.reduce(torch.add, (t.sum() for t in outs))

    def differentiable(self) -> list[torch.Tensor]:
        """Every parameter (as the forward saw it) and input tensor that requires grad."""
        params = dict(self.model.named_parameters()) | self.state
        inputs = [t for t in pytree.tree_leaves((self.args, self.kwargs)) if isinstance(t, torch.Tensor)]
        wrt = [t for t in (*params.values(), *inputs) if t.requires_grad]
        if not wrt:
            raise TrainingError("mode='train': no parameter or input requires grad, nothing to differentiate")
        return wrt


class _Scopes:
    """Keeps the scope of the running module, with the jit tracer's semantics: a module's scope
    covers its ``forward`` (after its forward pre-hooks, before its forward hooks), so operators
    that a user's own hooks run land in the caller's scope.

    A module without hooks gets its scope from ``nn.Module.__call__``, replaced for the trace
    (as ``Function.apply`` is, see :func:`_functions_named`): one lookup per module call, and
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
            return module._call_impl(*args, **kwargs)
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
                    return forward(*a, **k)
                self.enter(name, module)
                try:
                    return forward(*a, **k)
                finally:
                    self.exit()

            module.__dict__["forward"] = scoped
        self._forwards[key] = depth + 1
        try:
            return module._call_impl(*args, **kwargs)
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

        def module_call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            entry = plain.get(id(module))
            if entry is None or get_ident() != thread[0]:
                return original(module, *args, **kwargs)
            name, how = entry
            if how == LEAF:
                return replay(module, name, args, kwargs)
            return run(module, name, args, kwargs)

        return module_call

    def _pre_hook(self, name: str) -> Callable[[nn.Module, Any], None]:
        def enter(module: nn.Module, args: Any) -> None:
            if threading.get_ident() == self._thread:
                self.enter(name, module)

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


class _Recorder(TorchDispatchMode):
    """Records each dispatched operator as :class:`~opcount.ir.OpCall` records."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ to keep torch.compile out of it: two more
        # Python calls per operator, for a mode that nothing compiles.
        return False

    def __init__(
        self,
        scopes: _Scopes,
        names: dict[int, str],
        train: bool,
        compute: Callable[[Any, tuple[Any, ...], dict[str, Any], int], Any] | None = None,
    ) -> None:
        super().__init__()
        self.scopes = scopes
        self._compute = compute  # how an operator's outputs are made; None: its kernel runs
        self.calls: list[OpCall] = []
        self.outputs: tuple[TensorSpec, ...] = ()  # the model's output tensors, set by run()
        self.within: tuple[str, ...] = ()  # custom autograd Functions running, outermost first
        self._names = names
        self._train = train
        self._backward = False
        self._autograd = dispatch_exclude_set()  # set by run()
        self._ids: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> value id, while it lives
        self.next_id = 0  # the id of the next value recorded
        self._dtypes: dict[torch.dtype, str] = {}
        self._state_specs: dict[int, TensorSpec] = {}  # id of a parameter or buffer -> its spec
        self._consts: dict[tuple[type, Any], Const] = {}  # the constants seen, made once

    def run(self, step: _Step) -> None:
        before = dispatch_exclude_set()
        # a training step needs grad mode even when called under torch.no_grad()
        with self, torch.enable_grad() if step.train else contextlib.nullcontext():
            # Below autograd and ADInplaceOrView, as in inference mode but with grad mode on.
            # Training re-enables both per operator, so in-place operators bump versions once.
            with AutoDispatchBelowADInplaceOrView():
                # the keys this guard excludes: re-enabled per operator when training
                self._autograd = dispatch_exclude_set() - before
                output = step.forward()
                # the specs of tensors already recorded; one made by no operator gets a new id
                self.outputs = tuple(map(self.spec_of, output_tensors(output)))
                loss = step.loss(output) if step.train else None
            if loss is not None:
                if not loss.requires_grad:
                    raise TrainingError("mode='train': the loss does not require grad; check requires_grad")
                wrt = step.differentiable()
                self._backward = True
                torch.autograd.grad(loss, wrt, allow_unused=True)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if self._backward:
            out = func(*args, **kwargs)
            scope, within = _running_node_tag()
            self._record(backward_records, func, args, kwargs, out, scope, within)
            return out
        scope, within = self.scopes.current, self.within
        if self._train:
            exclude = dispatch_exclude_set() - self._autograd
            with ForceDispatchKeyGuard(dispatch_include_set(), exclude):
                out = func(*args, **kwargs)
            self.tag(out, (scope, within))
        elif self._compute is not None:
            out = self._compute(func, args, kwargs, schema(func).number)
        else:
            out = func(*args, **kwargs)
        self._record(forward_records, func, args, kwargs, out, scope, within)
        return out

    def _record(
        self,
        normalize: Callable[[str, list[Any], list[Any]], list[Record]],
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        scope: Scope,
        within: tuple[str, ...],
    ) -> None:
        s = schema(func)
        records = normalize(s.name, bind(s, args, kwargs), outputs_of(s, out))
        spec = self._spec
        for kind, ins, outs in records:
            self.calls.append(OpCall(kind, tuple(map(spec, ins)), tuple(map(spec, outs)), scope, within=within))

    def tag(self, out: Any, tag: Tag) -> None:
        """Tag the autograd nodes that made ``out`` and are not tagged yet: those just created
        (earlier nodes were tagged by the operators that made them)."""
        pending = [t.grad_fn for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while pending:
            node = pending.pop()
            metadata: dict[str, Any] = node.metadata  # type: ignore[assignment]
            if _TAG in metadata:
                continue
            metadata[_TAG] = tag
            pending.extend(n for n, _ in node.next_functions if n is not None and not isinstance(n, AccumulateGrad))

    def _spec(self, value: Any) -> Spec:
        if isinstance(value, torch.Tensor):
            return self.spec_of(value)
        kind = type(value)
        if kind is int or kind is bool or kind is float or value is None:
            found = self._consts.get((kind, value))
            if found is None:
                found = self._consts[(kind, value)] = Const(value)
            return found
        if isinstance(value, (TensorSpec, Const, ListSpec)):
            return value
        if isinstance(value, (list, tuple)):
            items = tuple(map(self._spec, value))
            if all(isinstance(i, Const) for i in items):
                return Const(tuple(i.value for i in items))  # type: ignore[union-attr]
            return ListSpec(items)
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return Const(None, known=False)  # a size only known at run time, as jit records it
        return Const(jit_constant(value))

    def _new_id(self) -> int:
        uid = self.next_id
        self.next_id += 1
        return uid

    def _shape_spec(self, t: ShapeTensor) -> TensorSpec:
        spec = t.spec = self.meta_spec(t.meta)
        return spec

    def meta_spec(self, meta: Meta) -> TensorSpec:
        """The spec of a new shape-only value."""
        return self.fresh_spec(meta.shape, self._dtype(meta.dtype))

    def fresh_spec(self, shape: tuple[int, ...], dtype: str) -> TensorSpec:
        """The spec of a new value (one a replayed module call made)."""
        return TensorSpec(shape, dtype, None, self._new_id())

    def known_spec(self, t: torch.Tensor) -> TensorSpec | None:
        """``t``'s spec if it was recorded already, without recording it."""
        if type(t) is ShapeTensor:
            return t.spec
        found = self._state_specs.get(id(t))
        if found is not None or id(t) in self._names:
            return found
        uid = self._ids.get(t)
        return None if uid is None else TensorSpec(tuple(t.shape), self._dtype(t.dtype), None, uid)

    def spec_of(self, t: torch.Tensor) -> TensorSpec:
        """``t``'s spec, recording it the first time."""
        if type(t) is ShapeTensor:
            return t.spec if t.spec is not None else self._shape_spec(t)
        name = self._names.get(id(t))
        if name is not None:  # a parameter or buffer: alive all along, so its id is its own
            spec = self._state_specs.get(id(t))
            if spec is None:
                spec = self._state_specs[id(t)] = TensorSpec(tuple(t.shape), self._dtype(t.dtype), name, self._new_id())
            return spec
        uid = self._ids.get(t)
        if uid is None:
            uid = self._ids[t] = self._new_id()
        return TensorSpec(tuple(t.shape), self._dtype(t.dtype), None, uid)

    def _dtype(self, dtype: torch.dtype) -> str:
        name = self._dtypes.get(dtype)
        if name is None:
            name = self._dtypes[dtype] = str(dtype).removeprefix("torch.")
        return name


def _running_node_tag() -> Tag:
    """The tag of the autograd node the backward pass is running (the root scope outside one)."""
    node = current_autograd_node()
    if node is None:
        return ROOT, ()
    metadata: dict[str, Any] = node.metadata  # type: ignore[assignment]
    tag: Tag | None = metadata.get(_TAG)
    return tag if tag is not None else (ROOT, ())


@contextlib.contextmanager
def _training_flags(tree: ModuleTree, model: nn.Module, train: bool) -> Iterator[None]:
    """``model.train(train)`` for the trace; every module's own flag restored afterwards."""
    saved = [(m, m.training) for m in map(tree.module, tree.names)]
    if all(flag == train for _, flag in saved):
        yield  # the common case: an eval model analyzed in eval mode
        return
    try:
        model.train(train)
        yield
    finally:
        for module, flag in saved:
            module.training = flag


@contextlib.contextmanager
def _functions_named(recorder: _Recorder) -> Iterator[None]:
    """Wrap ``torch.autograd.Function.apply`` for the trace: the operators a custom Function
    runs are recorded under its name, and its backward node is tagged for the backward pass.

    ``apply`` is a class attribute shared by every Function, so this is process-wide while the
    trace runs: held under :mod:`.patching`'s lock, calls from other threads pass straight
    through, and it is restored afterwards if it is still ours.
    """
    live = recorder.scopes.live

    def named(original: Any) -> Any:
        def apply(cls: type[Function], *args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() != live[0]:
                return original.__get__(None, cls)(*args, **kwargs)
            return _apply_named(recorder, original, cls, args, kwargs)

        return classmethod(apply)

    with replaced(Function, "apply", named):
        yield


def _apply_named(recorder: _Recorder, original: Any, cls: type[Function], args: Any, kwargs: Any) -> Any:
    """A custom Function's call during the trace: its operators and backward node named by it."""
    outer = recorder.within
    recorder.within = (*outer, cls.__name__)
    try:
        out = original.__get__(None, cls)(*args, **kwargs)
    finally:
        recorder.within = outer
    recorder.tag(out, (recorder.scopes.current, (*outer, cls.__name__)))
    return out


def _trace_error(model: nn.Module, tree: ModuleTree, e: Exception, on_meta: bool) -> TraceError:
    path, first = failure_site(model, tree, e), first_line(e, type(e).__name__)
    hint = (
        "on the meta device tensors have no values, so a forward that reads them (.item(), "
        "data-dependent shapes or branches) cannot run: analyze real tensors (device=None)"
        if on_meta
        else "check the inputs' shapes and types"
    )
    return TraceError(f"could not trace {path} with the dispatch tracer: {type(e).__name__}: {first}. Hint: {hint}.")
