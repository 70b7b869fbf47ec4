"""The jit tracer: torch.jit tracing with each module call marked in the traced graph.

It turns each graph node into an :class:`~opcount.ir.OpCall` of plain values; the private torch
internals it needs come from :mod:`opcount.torch_internals`.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._runtime import gc_paused
from ..errors import TraceError
from ..ir import Const, ListSpec, OpCall, Spec, TensorSpec
from ..messages import FAILURES, first_line
from ..scopes import ROOT, ModuleTree, failure_site, inner_scope, recursion_hint
from ..torch_internals import (
    JIT,
    Graph,
    TensorType,
    Value,
    compiled,
    create_graph_by_tracing,
    get_tracing_state,
    global_hooks,
    has_hooks,
    hook_epoch,
    hooked_since,
    require,
    torch_call,
)
from .control_flow import higher_order_on_traceback
from .patching import OtherThreadError, OtherThreads, exclusive, replaced
from .state import preserved
from .structure import (
    DeferredOutputError,
    FlatCall,
    normalize_inputs,
    output_tensors,
    refuse_deferred,
    refuse_sparse,
    refuse_sparse_kinds,
    tensor_description,
)

# TorchScript scalar type names -> torch dtype names.
_DTYPES = {
    "Float": "float32",
    "Double": "float64",
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Long": "int64",
    "Int": "int32",
    "Short": "int16",
    "Char": "int8",
    "Byte": "uint8",
    "Bool": "bool",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "ComplexHalf": "complex32",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2": "float8_e5m2",
    "QInt8": "qint8",
    "QUInt8": "quint8",
    "QInt32": "qint32",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
}

WRAPPERS = (nn.DataParallel, nn.parallel.DistributedDataParallel)

# The node kind of the marks that module calls leave in the graph. It counts as a side effect
# for torch's dead-code elimination, so the tracer's clean-up passes keep marks in place. A
# traced graph has no other: torch emits it only for ``with`` blocks of scripted code, which
# stay inside the prim::CallFunction / CallMethod node that calls them.
_MARK = "prim::Enter"


@dataclass(frozen=True)
class Recording:
    """What one traced forward pass produced (:class:`opcount.Trace` adds how it was traced)."""

    calls: tuple[OpCall, ...]
    called: frozenset[str]  # canonical names of the modules whose __call__ ran
    outputs: tuple[TensorSpec, ...] = ()  # the model's output tensors, as the records name them
    nodes: tuple[object, ...] = ()  # the jit tracer's node of each call, for fvcore-style handles


def _flat(model: nn.Module, call: FlatCall, marks: _Marks) -> Callable[..., tuple[torch.Tensor, ...]]:
    """Presents ``model`` to the tracer as tensors in, tensors out.

    A plain function, not a module: torch records the Python stack at every operator it
    traces, so each frame between the tracer and the operator costs time per operator.
    """

    def traced(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        marks.start(get_tracing_state().graph())
        # the model's parameters and buffers follow the inputs: traced as inputs, used in place
        args, kwargs = call.rebuild(tensors[: len(call.tensors)])
        output = model(*args, **kwargs)
        refuse_deferred(model, output)
        found = output_tensors(output)
        if not found:
            raise _NoTensorOutput("None" if output is None else f"a {type(output).__name__}")
        return found

    return traced


class _Marks:
    """Marks where each module call's ``forward`` starts and ends among the traced operators.

    Each start and end is an event, kept here in order: the module's scope index, or -1 for an
    end. A mark is a ``prim::Enter`` node placed in the graph at an event; events with no
    operator traced between them share one mark (a Sequential's child ends, the next starts),
    which the graph's last node tells: it is still the last mark. So the records can replay the
    events in graph order, at the marks.

    A module without hooks is called by ``nn.Module.__call__``, replaced for the trace (under
    :mod:`.patching`'s lock; calls from other threads pass straight through), which places the
    events around ``forward`` itself. A module with hooks (or one that gets a hook
    during the pass, or whose class has a ``_call_impl`` of its own) is called as usual; while
    tracing, ``_call_impl`` calls ``forward`` through the module's ``_slow_forward``, after the
    forward pre-hooks and before the forward hooks, and an instance attribute of that name, set
    for the trace, places the events. Both give the same graph; the first has two Python frames
    per nesting level instead of four, and torch walks the whole Python stack at every operator
    it traces.
    Torch's own alternative, ``tracing_state.push_scope``, nests every module call in a block
    that the tracer inlines again at the end: on deep models that costs as much as the tracing.
    """

    def __init__(self, tree: ModuleTree, model: nn.Module) -> None:
        self.events: list[int] = []  # each forward's start (its scope index) and end (-1), in order
        self.cuts: list[int] = []  # for each mark, in graph order: how many events precede it
        self._tree = tree
        self._model = model
        self._event: Callable[[int], None] = _not_tracing
        self._patched: list[tuple[nn.Module, Callable[..., Any]]] = []  # modules given a _slow_forward
        self._patched_index: dict[int, int] = {}  # the same: id -> scope index
        self._thread: list[int | None] = [threading.get_ident()]  # the tracing thread; None once closed
        self.others = OtherThreads()  # the model's modules other threads called meanwhile

    def start(self, graph: Graph) -> None:
        create, insert, last_node = graph.create, graph.insertNode, graph.return_node().prev
        events, cuts = self.events, self.cuts
        last = None  # the last mark: pybind returns its wrapper, held here, for the same node

        def event(what: int) -> None:
            nonlocal last
            events.append(what)
            if last is not None and last_node() is last:  # nothing traced since the last mark
                cuts[-1] = len(events)
            else:
                last = insert(create(_MARK, 0))  # type: ignore[call-arg]  # (kind, outputs)
                cuts.append(len(events))

        self._event = event

    def _slow_forward(self, module: nn.Module, index: int) -> Callable[..., Any]:
        get_ident, thread = threading.get_ident, self._thread

        def slow_forward(*args: Any, **kwargs: Any) -> Any:
            if get_ident() != thread[0]:  # another thread tracing the same module
                if thread[0] is not None:
                    self.others.saw(self._tree.names[index])
                return nn.Module._slow_forward(module, *args, **kwargs)  # type: ignore[no-untyped-call]  # torch leaves it unannotated
            self._event(index)
            try:
                return module.forward(*args, **kwargs)
            finally:
                self._event(-1)

        return slow_forward

    def _module_call(self, plain: dict[int, int], original: Callable[..., Any], epoch: int) -> Callable[..., Any]:
        """``nn.Module.__call__`` for the trace: a module of ``plain`` (id -> scope index) runs
        its ``forward`` between marks, as ``_call_impl`` would with no hook to run; any other
        module, or one that got a hook during the pass, or a call from another thread or after
        the window, runs as usual."""
        get_ident, thread, patched = threading.get_ident, self._thread, self._patched_index

        def module_call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
            index = plain.get(id(module))
            if index is None:
                # a module marked by its _slow_forward, which other threads' calls never reach
                if id(module) in patched and get_ident() != thread[0] and thread[0] is not None:
                    self.others.saw(self._tree.names[patched[id(module)]])
                return original(module, *args, **kwargs)
            if get_ident() != thread[0]:  # the analyzed model in another thread: its work escapes the trace
                if thread[0] is not None:
                    self.others.saw(self._tree.names[index])
                return original(module, *args, **kwargs)
            if hooked_since(epoch, module):  # the hooks run: marks from _slow_forward, inside them
                if "_slow_forward" not in module.__dict__:
                    self._patch(module, index)
                return original(module, *args, **kwargs)
            # slow_forward's body, inlined: a shared helper would be one more frame per level
            self._event(index)
            try:
                return module.forward(*args, **kwargs)
            finally:
                self._event(-1)

        return module_call

    def _patch(self, module: nn.Module, index: int) -> None:
        slow_forward = module.__dict__["_slow_forward"] = self._slow_forward(module, index)
        self._patched.append((module, slow_forward))
        self._patched_index[id(module)] = index

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """The marks' patches for the trace, held under :mod:`.patching`'s lock; each removed
        afterwards if it is still ours, also when the trace fails."""
        plain: dict[int, int] = {}  # modules marked by nn.Module.__call__: id -> scope index
        modules = self._tree.modules
        with exclusive():
            hooked = global_hooks()
            try:
                for index, name in enumerate(self._tree.names):
                    module = modules[name]
                    if isinstance(module, torch.jit.ScriptModule) or "_slow_forward" in module.__dict__:
                        continue  # a scripted module cannot be marked (see _trace_error); a patched one is left alone
                    if module is not self._model and isinstance(module, WRAPPERS):
                        continue
                    if hooked or has_hooks(module) or compiled(module) or not torch_call(module):
                        self._patch(module, index)
                    else:
                        plain[id(module)] = index
                # a hook registered from here on takes a higher number: see _module_call
                epoch = hook_epoch()
                call = replaced(nn.Module, "__call__", lambda original: self._module_call(plain, original, epoch))
                # with every module hooked (a global hook), the replaced __call__ only watches other threads
                with call if plain or self._patched else contextlib.nullcontext():
                    yield
            finally:
                self._thread[0] = None  # a replaced __call__ someone kept passes every call through
                for module, slow_forward in self._patched:
                    if module.__dict__.get("_slow_forward") is slow_forward:
                        del module.__dict__["_slow_forward"]


def _not_tracing(what: int) -> None:
    raise RuntimeError("module marks are placed only while tracing")


def trace_jit(
    model: nn.Module,
    inputs: Any,
    kwargs: Mapping[str, Any] | None,
    tree: ModuleTree,
    warn_mode: str = "no_tracer_warning",
) -> Recording:
    """Trace one forward pass of ``model`` and return its operator records."""
    require(JIT)
    args, kw = normalize_inputs(inputs, kwargs)
    inner = model.module if isinstance(model, WRAPPERS) else model
    marks = _Marks(tree, inner)
    call = FlatCall(args, kw)
    flat = _flat(inner, call, marks)
    named = tree.state(tree.name_of(inner), persistent_only=True)  # what torch.jit.trace takes as inputs
    state, names = [t for _, t in named], [n for n, _ in named]
    # under the patch lock throughout: the warning filters, the collector and the buffers are process state too
    with exclusive(), gc_paused(), preserved(tree, (args, kw)), _warnings(warn_mode), marks.installed():
        try:
            # What torch.jit._get_trace_graph does, less its two costs nobody here needs:
            # naming each value after the Python variable that held it, and a state_dict().
            graph, _ = create_graph_by_tracing(flat, [*call.tensors, *state], _no_name, True, False)
        except _NoTensorOutput as e:
            raise _elsewhere(marks, model, tree) or TraceError(
                f"the output of the model ({type(model).__name__}) holds no tensor (it returned {e}): jit tracing "
                "keeps only the operators an output depends on, so nothing would be counted. Return the tensors "
                "the forward computes, or use tracer='dispatch', which records every operator that runs."
            ) from None
        except DeferredOutputError:  # raised on purpose, after the forward returned
            raise
        except FAILURES as e:  # sys.exit in a forward is the model's error, not an exit of ours
            raise _elsewhere(marks, model, tree) or _trace_error(model, tree, e) from e
        found = _elsewhere(marks, model, tree)
        if found is not None:
            raise found
        converter = _Converter(graph, len(call.tensors), state, names)
        records = list(_records(graph, tree, marks, converter))
        for c, _ in records:
            refuse_sparse_kinds(c)
            if converter.sparse:
                refuse_sparse(c, converter.sparse)
        outputs = converter.outputs()
    calls = tuple(c for c, _ in records)
    called = {name for scope in {call.scope for call in calls} for name in scope} | {""}
    return Recording(calls, frozenset(called), outputs, tuple(node for _, node in records))


def _elsewhere(marks: _Marks, model: nn.Module, tree: ModuleTree) -> OtherThreadError | None:
    """The error naming the model's modules another thread ran during the trace, if any: the
    reason to give first, as a failure of the trace is often its consequence (a tensor another
    thread made is no value of the trace)."""
    return marks.others.error(model, tree.module)


class _NoTensorOutput(Exception):
    """The forward's output holds no tensor (None, a number): the traced graph would be empty."""


def _no_name(value: torch.Tensor) -> str:
    return ""


def _trace_error(model: nn.Module, tree: ModuleTree, e: BaseException) -> TraceError:
    path, first = failure_site(model, tree, e), first_line(e, type(e).__name__)
    hint = (
        "check the inputs' shapes and types; for a model whose forward is not traceable, "
        "wrap the traceable part in a module and analyze that, or use tracer='dispatch'."
    )
    higher_order = higher_order_on_traceback(e)
    if higher_order is not None:
        return higher_order.error(path, "")
    if isinstance(e, SystemExit):
        hint = "a forward returns its outputs: the model's code exited instead."
    elif isinstance(e, RecursionError):
        hint = recursion_hint(tree) + "."
    elif "not part of the active trace" in first:
        # torch.jit tracing of Python code cannot call TorchScript (the RuntimeError's wording)
        hint = (
            f"a TorchScript module (torch.jit.script or torch.jit.trace{_scripted_names(tree)}) cannot be called "
            "from code that the jit tracer traces: use tracer='dispatch', which counts the operators it runs."
        )
    elif "unordered_map::at" in first and _on_traceback(e, "vmap"):
        # torch.jit tracing cannot record torch.vmap; transformers builds attention masks with it.
        hint = (
            "torch.jit tracing cannot record torch.vmap (transformers builds its attention mask with it, "
            "e.g. with use_cache=False): pass a ready 4-D attention mask, or use tracer='dispatch'."
        )
    return TraceError(f"could not trace {path}: {type(e).__name__}: {first}. Hint: {hint}")


def _scripted_names(tree: ModuleTree) -> str:
    """``"; here: 'a', 'b.c'"``: the outermost TorchScript modules of the model, which torch's
    message names by class only (a module called through ``.forward`` is on no traceback)."""
    names = [
        name
        for name in tree.names
        if isinstance(tree.module(name), torch.jit.ScriptModule)
        and not any(isinstance(tree.module(o), torch.jit.ScriptModule) for o in tree.owners(name)[:-1])
    ]
    shown = ", ".join(f"'{n}'" if n else "the model" for n in names[:3]) + (", ..." if len(names) > 3 else "")
    return f"; here: {shown}" if names else ""


def _on_traceback(e: BaseException, name: str) -> bool:
    tb = e.__traceback__
    while tb is not None:
        if name in tb.tb_frame.f_code.co_name or name in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


@contextlib.contextmanager
def _warnings(mode: str) -> Iterator[None]:
    with warnings.catch_warnings():
        if mode == "none":
            warnings.simplefilter("ignore")
        elif mode == "no_tracer_warning":
            # torch.jit re-exports TracerWarning without marking it (no __all__ entry, no "as")
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)  # type: ignore[attr-defined]
        yield


def _records(graph: Graph, tree: ModuleTree, marks: _Marks, converter: _Converter) -> Iterator[tuple[OpCall, object]]:
    """Each operator node as a record, with the node itself (for fvcore-style handles)."""
    names, events = tree.names, marks.events
    stack = [ROOT]
    pushed: dict[tuple[tuple[str, ...], int], tuple[str, ...]] = {}  # one tuple per distinct scope
    cuts = iter(marks.cuts)
    done = 0  # events replayed
    resolve = converter.node_specs
    for node in graph.nodes():
        kind = node.kind()
        if kind == _MARK:
            end = next(cuts, None)
            if end is None:
                break  # more marks than placed: reported below
            for index in events[done:end]:  # the forwards that started or ended here
                if index < 0:
                    stack.pop()
                    continue
                top = stack[-1]
                scope = pushed.get((top, index))
                if scope is None:
                    scope = pushed[(top, index)] = inner_scope(top, names[index])
                stack.append(scope)
            done = end
        elif not kind.startswith("prim::"):
            yield OpCall(kind, *resolve(node), stack[-1]), node
        elif kind == "prim::PythonOp":
            yield OpCall(f"prim::PythonOp.{node.pyname()}", *resolve(node), stack[-1]), node  # type: ignore[attr-defined]  # stub lacks pyname
        elif kind == "prim::CallFunction":
            # A scripted function called from traced code: named by the function, e.g.
            # prim::CallFunction.torchvision.ops.boxes._batched_nms_coordinate_trick.
            name = str(node.inputsAt(0).type()).removeprefix("__torch__.")
            yield OpCall(f"prim::CallFunction.{name}", *resolve(node), stack[-1]), node
        # other prim:: nodes (constants, list construction, getattr) are structure, not operators
    if len(stack) != 1 or done != len(events):  # every mark is the tracer's: check
        raise TraceError(f"internal error: module marks do not pair up ({len(stack) - 1} left open)")


class _Converter:
    """Graph values -> specs, each value converted once (an output is the next call's input).

    Values are looked up by their Python wrapper: pybind returns the same wrapper for a value
    while one is alive, and the cache keeps them alive. A spec's ``id`` numbers the values of
    the trace. The specs of the parameters and buffers come from the tensors themselves, which
    know their names. The converter holds the graph: the records' nodes live as long as it does.
    """

    def __init__(self, graph: Graph, n_inputs: int, state: list[torch.Tensor], names: list[str]) -> None:
        self._graph = graph
        self._state = (n_inputs, state, names)
        self._cache: dict[Value, Spec] | None = None  # filled on first use: few analyses need it
        self.sparse: dict[int, str] = {}  # value id -> the sparse parameter or buffer it is

    def node_specs(self, node: object) -> tuple[tuple[Spec, ...], tuple[Spec, ...]]:
        # inputsAt/outputsAt: several times faster than iterating node.inputs() in pybind.
        n: Any = node
        cache = self._cache if self._cache is not None else self._start()
        get, convert = cache.get, self._convert
        ins = tuple([get(v) or convert(v) for v in map(n.inputsAt, range(n.inputsSize()))])
        return ins, tuple([get(v) or convert(v) for v in map(n.outputsAt, range(n.outputsSize()))])

    def outputs(self) -> tuple[TensorSpec, ...]:
        """The graph's output tensors (the model's, flattened), as the records name them."""
        cache = self._cache if self._cache is not None else self._start()
        found: list[TensorSpec] = []
        pending = list(self._graph.outputs())
        while pending:
            value = pending.pop(0)
            node = value.node()
            if node.kind() in ("prim::TupleConstruct", "prim::ListConstruct"):
                pending[:0] = list(node.inputs())
                continue
            spec = cache.get(value) or self._convert(value)
            if isinstance(spec, TensorSpec):
                found.append(spec)
        return tuple(found)

    def _start(self) -> dict[Value, Spec]:
        n_inputs, state, names = self._state
        dtypes: dict[torch.dtype, str] = {}
        cache: dict[Value, Spec] = {}
        for value, t, name in zip(list(self._graph.inputs())[n_inputs:], state, names, strict=True):
            dtype = dtypes.get(t.dtype)
            if dtype is None:
                dtype = dtypes[t.dtype] = str(t.dtype).removeprefix("torch.")
            if t.layout is not torch.strided:
                self.sparse[len(cache)] = f"{tensor_description(t)} ({name!r})"
            cache[value] = TensorSpec(tuple(t.shape), dtype, name, len(cache))
        self._cache = cache
        return cache

    def _convert(self, value: Value) -> Spec:
        cache = self._cache
        assert cache is not None
        spec = cache[value] = self._spec(value, len(cache))
        return spec

    def _spec(self, value: Value, uid: int) -> Spec:
        constant = value.toIValue()  # one call answers for most non-tensor arguments
        if constant is not None and not isinstance(constant, torch.Tensor):
            return Const(constant)
        typ = value.type()
        if isinstance(typ, TensorType):
            sizes = typ.sizes()
            if sizes is None:
                return Const(None, known=False)
            return TensorSpec(tuple(sizes), _DTYPES.get(typ.scalarType() or "Float", "float32"), None, uid)
        node = value.node()
        kind = node.kind()
        if kind == "prim::Constant":
            return Const(constant)  # None, or a constant toIValue() would not read
        if kind == "prim::ListConstruct":
            get, convert = self._cache.get, self._convert  # type: ignore[union-attr]  # _start filled the cache before any value converts
            items = tuple(get(v) or convert(v) for v in (node.inputsAt(i) for i in range(node.inputsSize())))
            values = [i.value for i in items if isinstance(i, Const) and i.known]
            if len(values) == len(items):
                return Const(tuple(values))
            return ListSpec(items)
        return Const(None, known=False)
