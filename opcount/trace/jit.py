"""The jit tracer: torch.jit tracing with a tracing scope pushed and popped around each module call.

This is the only module that touches ``torch._C``. It turns each graph node into an
:class:`~opcount.ir.OpCall` of plain values.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .._runtime import gc_paused
from ..errors import TraceError, failure_site, first_line
from ..ir import Const, ListSpec, OpCall, Spec, TensorSpec
from ..scopes import ModuleTree, named_modules_with_aliases
from .structure import FlatCall, normalize_inputs, output_tensors

# TorchScript scalar type names -> torch dtype names.
_DTYPES = {
    "Float": "float32", "Double": "float64", "Half": "float16", "BFloat16": "bfloat16",
    "Long": "int64", "Int": "int32", "Short": "int16", "Char": "int8", "Byte": "uint8", "Bool": "bool",
    "ComplexFloat": "complex64", "ComplexDouble": "complex128", "ComplexHalf": "complex32",
    "Float8_e4m3fn": "float8_e4m3fn", "Float8_e5m2": "float8_e5m2", "QInt8": "qint8", "QUInt8": "quint8",
    "QInt32": "qint32", "UInt16": "uint16", "UInt32": "uint32", "UInt64": "uint64",
}

WRAPPERS = (nn.DataParallel, nn.parallel.DistributedDataParallel)


@dataclass(frozen=True)
class Trace:
    """What one traced forward pass produced."""

    calls: tuple[OpCall, ...]
    called: frozenset[str]  # canonical names of the modules whose __call__ ran


class _Flat(nn.Module):
    """Presents ``model`` to the tracer as tensors in, tensors out."""

    def __init__(self, model: nn.Module, call: FlatCall) -> None:
        super().__init__()
        self.model = model
        self._call = call

    def forward(self, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args, kwargs = self._call.rebuild(tensors)
        return output_tensors(self.model(*args, **kwargs))


@contextlib.contextmanager
def _scopes_recorded(tree: ModuleTree, model: nn.Module) -> Iterator[None]:
    """Make every module call push its scope (its index in ``tree.names``) while tracing.

    ``Module.__call__`` already pushes and pops a tracing scope for each module found in
    ``torch.jit._trace._trace_module_map`` (the mechanism behind ``torch.jit.trace_module``).
    Using it instead of a forward pre/post hook pair per module keeps ``__call__`` on its fast
    path: hooks cost 25-50% of the tracing time on torchvision models. Operators a user's own
    forward hooks run land in the caller's scope, as they run outside ``forward``.
    """
    scope_map: dict[nn.Module, str] = {}
    for index, name in enumerate(tree.names):
        module = tree.module(name)
        if module is model or not isinstance(module, WRAPPERS):
            scope_map[module] = str(index)
    previous = torch.jit._trace._trace_module_map
    torch.jit._trace._trace_module_map = scope_map
    try:
        yield
    finally:
        torch.jit._trace._trace_module_map = previous


def trace_jit(
    model: nn.Module,
    inputs: Any,
    kwargs: Mapping[str, Any] | None,
    tree: ModuleTree,
    warn_mode: str = "no_tracer_warning",
) -> Trace:
    """Trace one forward pass of ``model`` and return its operator records."""
    args, kw = normalize_inputs(inputs, kwargs)
    inner = model.module if isinstance(model, WRAPPERS) else model
    flat = _Flat(inner, FlatCall(args, kw))
    with gc_paused(), _preserved(tree), _warnings(warn_mode), _scopes_recorded(tree, inner):
        try:
            graph, _ = torch.jit._get_trace_graph(flat, flat._call.tensors)
        except Exception as e:
            raise _trace_error(model, tree, e) from e
        calls = tuple(_records(graph, tree, lambda: _param_names(inner, graph, len(flat._call.tensors))))
    called = {name for scope in {call.scope for call in calls} for name in scope} | {""}
    return Trace(calls=calls, called=frozenset(called))


def _param_names(inner: nn.Module, graph: torch._C.Graph, n_inputs: int) -> dict[int, str]:
    """Graph value id -> qualified parameter/buffer name.

    The tracer appends the module state to the graph inputs after the traced tensors, in
    ``state_dict`` order without duplicates; walking the modules directly gives the same order
    at a fraction of ``state_dict``'s cost on models with thousands of modules.
    """
    names: list[str] = []
    seen: set[int] = set()
    for prefix, module in named_modules_with_aliases(inner):
        skip = module._non_persistent_buffers_set
        for key, value in (*module._parameters.items(), *((k, b) for k, b in module._buffers.items() if k not in skip)):
            if value is not None and id(value) not in seen:
                seen.add(id(value))
                names.append(f"{prefix}.{key}" if prefix else key)
    inputs = list(graph.inputs())[n_inputs:]
    return {v.unique(): name for v, name in zip(inputs, names)}


def _trace_error(model: nn.Module, tree: ModuleTree, e: Exception) -> TraceError:
    path, first = failure_site(model, tree, e), first_line(e, type(e).__name__)
    hint = (
        "check the inputs' shapes and types; for a model whose forward is not traceable, "
        "wrap the traceable part in a module and analyze that, or use tracer='dispatch'."
    )
    if "unordered_map::at" in first and _on_traceback(e, "vmap"):
        # torch.jit tracing cannot record torch.vmap; transformers builds attention masks with it.
        hint = (
            "torch.jit tracing cannot record torch.vmap (transformers builds its attention mask with it, "
            "e.g. with use_cache=False): pass a ready 4-D attention mask, or use tracer='dispatch'."
        )
    return TraceError(f"could not trace {path}: {type(e).__name__}: {first}. Hint: {hint}")


def _on_traceback(e: BaseException, name: str) -> bool:
    tb = e.__traceback__
    while tb is not None:
        if name in tb.tb_frame.f_code.co_name or name in tb.tb_frame.f_code.co_filename:
            return True
        tb = tb.tb_next
    return False


@contextlib.contextmanager
def _preserved(tree: ModuleTree) -> Iterator[None]:
    """Restore buffers that a training-mode forward changes (batch norm running statistics)."""
    modules = (tree.module(name) for name in tree.names)
    saved = [(b, b.detach().clone()) for m in modules if m.training for b in m._buffers.values() if b is not None]
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, value in saved:
                buf.copy_(value)


@contextlib.contextmanager
def _warnings(mode: str) -> Iterator[None]:
    with warnings.catch_warnings():
        if mode == "none":
            warnings.simplefilter("ignore")
        elif mode == "no_tracer_warning":
            warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        yield


def _records(
    graph: torch._C.Graph, tree: ModuleTree, params: Callable[[], dict[int, str]]
) -> Iterator[OpCall]:
    scopes: dict[str, tuple[str, ...]] = {}
    names = tree.names
    resolve = _Converter(params).node_specs
    for node in graph.nodes():
        kind = node.kind()
        if kind.startswith("prim::"):
            if kind == "prim::PythonOp":
                kind = f"prim::PythonOp.{node.pyname()}"
            elif kind == "prim::CallFunction":
                # A scripted function called from traced code: named by the function, e.g.
                # prim::CallFunction.torchvision.ops.boxes._batched_nms_coordinate_trick.
                kind = f"prim::CallFunction.{str(node.inputsAt(0).type()).removeprefix('__torch__.')}"
            else:
                continue  # constants, list construction, getattr: structure, not operators
        scope_str = node.scopeName()
        scope = scopes.get(scope_str)
        if scope is None:
            # Each distinct scope string is parsed once; "" is the root even when not pushed.
            idx = [names[int(i)] for i in scope_str.split("/") if i.isdigit()]
            scope = scopes[scope_str] = tuple(idx) if idx and idx[0] == "" else ("", *idx)
        yield OpCall(kind, None, None, scope, raw=node, resolve=resolve)


class _Converter:
    """Graph values -> specs, each value converted once (an output is the next call's input)."""

    def __init__(self, params: Callable[[], dict[int, str]]) -> None:
        self._param_names = params
        self._params: dict[int, str] | None = None  # found on first use: few analyses need it
        self._cache: dict[int, Spec] = {}

    def node_specs(self, node: object) -> tuple[tuple[Spec, ...], tuple[Spec, ...]]:
        # inputsAt/outputsAt: several times faster than iterating node.inputs() in pybind.
        n: Any = node
        spec = self.spec
        ins = tuple(spec(n.inputsAt(i)) for i in range(n.inputsSize()))
        return ins, tuple(spec(n.outputsAt(i)) for i in range(n.outputsSize()))

    def spec(self, value: torch._C.Value) -> Spec:
        uid = value.unique()
        found = self._cache.get(uid)
        if found is None:
            found = self._cache[uid] = self._convert(value, uid)
        return found

    def _convert(self, value: torch._C.Value, uid: int) -> Spec:
        typ = value.type()
        if isinstance(typ, torch._C.TensorType):
            sizes = typ.sizes()
            if sizes is None:
                return Const(None, known=False)
            if self._params is None:
                self._params = self._param_names()
            dtype = _DTYPES.get(typ.scalarType() or "Float", "float32")
            return TensorSpec(tuple(sizes), dtype, self._params.get(uid), uid)
        node = value.node()
        kind = node.kind()
        if kind == "prim::Constant":
            return Const(value.toIValue())
        if kind == "prim::ListConstruct":
            items = tuple(self.spec(node.inputsAt(i)) for i in range(node.inputsSize()))
            if all(isinstance(i, Const) and i.known for i in items):
                return Const(tuple(i.value for i in items))  # type: ignore[union-attr]
            return ListSpec(items)
        return Const(None, known=False)
