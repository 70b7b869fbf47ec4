"""The jit tracer: torch.jit tracing with module scopes pushed and popped by forward hooks.

This is the only module that touches ``torch._C``. It turns each graph node into an
:class:`~opcount.ir.OpCall` of plain values.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import TraceError
from ..ir import Const, ListSpec, OpCall, Spec, TensorSpec
from ..scopes import ModuleTree
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


class _ScopeHooks:
    """Forward pre/post hooks that push and pop each module's scope while tracing."""

    def __init__(self, tree: ModuleTree) -> None:
        self.stack: list[str] = []
        self.called: set[str] = set()
        self._tree = tree

    def pre(self, name: str, index: str):  # type: ignore[no-untyped-def]
        stack, called = self.stack, self.called

        def hook(module: nn.Module, args: Any) -> None:
            state = torch._C._get_tracing_state()
            if state is not None:
                state.push_scope(index)
                stack.append(name)
                called.add(name)

        return hook

    def post(self, module: nn.Module, args: Any, output: Any) -> None:
        state = torch._C._get_tracing_state()
        if state is not None and self.stack:
            state.pop_scope()
            self.stack.pop()

    @contextlib.contextmanager
    def installed(self, model: nn.Module) -> Iterator[None]:
        handles = []
        try:
            for index, name in enumerate(self._tree.names):
                module = self._tree.module(name)
                if module is model or not isinstance(module, WRAPPERS):
                    handles.append(module.register_forward_pre_hook(self.pre(name, str(index))))
                    handles.append(module.register_forward_hook(self.post))
            yield
        finally:
            for h in handles:
                h.remove()


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
    hooks = _ScopeHooks(tree)
    flat = _Flat(inner, FlatCall(args, kw))
    with _preserved(model), _warnings(warn_mode), hooks.installed(inner):
        try:
            graph, _ = torch.jit._get_trace_graph(flat, flat._call.tensors)
        except Exception as e:  # noqa: BLE001  re-raised with the module path
            raise _trace_error(model, tree, hooks.stack, e) from e
    called = set(hooks.called) | {""}
    return Trace(calls=tuple(_records(graph, tree)), called=frozenset(called))


def _trace_error(model: nn.Module, tree: ModuleTree, stack: list[str], e: Exception) -> TraceError:
    where = stack[-1] if stack else ""
    module = tree.module(where) if where in tree.modules else model
    path = f"module '{where}' ({type(module).__name__})" if where else f"the model ({type(model).__name__})"
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    return TraceError(
        f"could not trace {path}: {type(e).__name__}: {first}. "
        "Hint: check the inputs' shapes and types; for a model whose forward is not traceable, "
        "wrap the traceable part in a module and analyze that."
    )


@contextlib.contextmanager
def _preserved(model: nn.Module) -> Iterator[None]:
    """Restore buffers that a training-mode forward changes (batch norm running statistics)."""
    saved = [(b, b.detach().clone()) for m in model.modules() if m.training for b in m.buffers(recurse=False)]
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


def _records(graph: torch._C.Graph, tree: ModuleTree) -> Iterator[OpCall]:
    scopes: dict[str, tuple[str, ...]] = {}
    names = tree.names
    for node in graph.nodes():
        kind = node.kind()
        if kind.startswith("prim::"):
            if kind == "prim::PythonOp":
                kind = f"prim::PythonOp.{node.pyname()}"
            elif kind != "prim::CallFunction":
                continue  # constants, list construction, getattr: structure, not operators
        scope_str = node.scopeName()
        scope = scopes.get(scope_str)
        if scope is None:
            # Each distinct scope string is parsed once; "" is the root even when not pushed.
            idx = [names[int(i)] for i in scope_str.split("/") if i.isdigit()]
            scope = scopes[scope_str] = tuple(idx) if idx and idx[0] == "" else ("", *idx)
        yield OpCall(
            kind=kind,
            inputs=tuple(_spec(v) for v in node.inputs()),
            outputs=tuple(_spec(v) for v in node.outputs()),
            scope=scope,
            raw=node,
        )


def _spec(value: torch._C.Value) -> Spec:
    typ = value.type()
    if isinstance(typ, torch._C.TensorType):
        sizes = typ.sizes()
        if sizes is None:
            return Const(None, known=False)
        return TensorSpec(tuple(sizes), _DTYPES.get(typ.scalarType() or "Float", "float32"))
    node = value.node()
    kind = node.kind()
    if kind == "prim::Constant":
        return Const(value.toIValue())
    if kind == "prim::ListConstruct":
        items = tuple(_spec(v) for v in node.inputs())
        if all(isinstance(i, Const) and i.known for i in items):
            return Const(tuple(i.value for i in items))  # type: ignore[union-attr]
        return ListSpec(items)
    return Const(None, known=False)
