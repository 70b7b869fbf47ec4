"""The private torch internals opcount relies on, reached through this module alone.

Checked on torch 2.13.0 and 2.14.1 (:data:`CHECKED_ON`). Private names change between torch
releases without notice, so each one the tracers and the profiler use is listed here, bound
once at import and looked up again by :func:`require` when an analysis starts: a torch that
lacks one fails there with :class:`~opcount.errors.TorchInternalsError`, which names
``torch.__version__`` and the missing internal, never with an ``AttributeError`` from inside a
trace. An internal missing at import is bound to a stand-in that raises the same error when
used, so ``import opcount`` works on any torch and only the analyses that need it fail.

The tracers bind what they call per operator to module globals or locals; nothing here adds a
Python call per operator. nn.Module's own protocol is used directly on the modules, where a
call per module would cost a frame: its container dicts (``_parameters``, ``_buffers``,
``_modules``, read where modules are walked) and its ``_call_impl`` and ``_slow_forward``
(called per module call); :func:`require` checks them too.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .errors import TorchInternalsError

CHECKED_ON = ("2.13.0", "2.14.1")


def _resolve(path: str) -> Any:
    """The object at a dotted path (``torch._C._get_tracing_state``), importing modules on the way."""
    head, *rest = path.split(".")
    found: Any = importlib.import_module(head)
    for i, part in enumerate(rest, 2):
        try:
            found = getattr(found, part)
        except AttributeError:
            try:  # a submodule not imported yet
                found = importlib.import_module(".".join(path.split(".")[:i]))
            except ImportError:
                raise _missing(path) from None
    return found


def _missing(path: str) -> TorchInternalsError:
    return TorchInternalsError(
        f"torch {torch.__version__} has no {path}, a private torch internal opcount uses "
        f"(checked on torch {' and '.join(CHECKED_ON)}); install one of those versions"
    )


class _Missing:
    """Stands in for an internal the installed torch lacks: raises when used."""

    def __init__(self, path: str) -> None:
        self._path = path

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise _missing(self._path)

    def __getattr__(self, name: str) -> Any:
        return _Missing(f"{self._path}.{name}")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)  # a class deriving from a missing one still defines; using it raises


class _Absent:
    """Stands in for a missing class that is only used in ``isinstance`` checks."""


def _bind(path: str, placeholder: Any = None) -> Any:
    try:
        return _resolve(path)
    except TorchInternalsError:
        return placeholder if placeholder is not None else _Missing(path)


# ----- the internals, by who uses them ----------------------------------------------------------

if TYPE_CHECKING:  # the real types, for mypy; "X as X" and the module alias mark them exported
    from torch._C import Graph as Graph
    from torch._C import TensorType as TensorType
    from torch._C import Value as Value
    from torch._ops import HigherOrderOperator as HigherOrderOperator
    from torch._ops import OpOverload as OpOverload
    from torch._subclasses.fake_tensor import FakeTensorMode as FakeTensorMode
    from torch.utils import _pytree
    from torch.utils._python_dispatch import TorchDispatchMode as TorchDispatchMode

    pytree = _pytree
else:
    Graph = _bind("torch._C.Graph", _Absent)
    Value = _bind("torch._C.Value", _Absent)
    TensorType = _bind("torch._C.TensorType", _Absent)
    FakeTensorMode = _bind("torch._subclasses.fake_tensor.FakeTensorMode")
    TorchDispatchMode = _bind("torch.utils._python_dispatch.TorchDispatchMode")
    pytree = _bind("torch.utils._pytree")
    OpOverload = _bind("torch._ops.OpOverload", _Absent)
    # torch.cond, torch.while_loop and the like: refused by name (opcount.tracers.control_flow)
    HigherOrderOperator = _bind("torch._ops.HigherOrderOperator", _Absent)

# the jit tracer
create_graph_by_tracing = _bind("torch._C._create_graph_by_tracing")  # torch.jit._get_trace_graph's core
get_tracing_state = _bind("torch._C._get_tracing_state")
# the dispatch tracer
dispatch_exclude_set = _bind("torch._C._dispatch_tls_local_exclude_set")
dispatch_include_set = _bind("torch._C._dispatch_tls_local_include_set")
AutoDispatchBelowADInplaceOrView = _bind("torch._C._AutoDispatchBelowADInplaceOrView")
ForceDispatchKeyGuard = _bind("torch._C._ForceDispatchKeyGuard")
current_autograd_node = _bind("torch._C._current_autograd_node")
AccumulateGrad = _bind("torch._C._functions.AccumulateGrad", _Absent)
disabled_torch_function_impl = _bind("torch._C._disabled_torch_function_impl")
make_wrapper_subclass = _bind("torch.Tensor._make_wrapper_subclass")
any_autocast_enabled = _bind("torch._C._is_any_autocast_enabled")

# What each analysis needs; require() checks them when it starts.
_MODULE_CALL = (
    "torch.nn.Module._call_impl",
    "torch.nn.Module._compiled_call_impl",
    "torch.nn.modules.module._global_forward_hooks",
    "torch.nn.modules.module._global_forward_pre_hooks",
    "torch.nn.modules.module._global_backward_hooks",
    "torch.nn.modules.module._global_backward_pre_hooks",
    "torch.utils.hooks.RemovableHandle.next_id",
    "torch.utils._pytree.tree_flatten",
)
JIT = (
    *_MODULE_CALL,
    "torch._C._create_graph_by_tracing",
    "torch._C._get_tracing_state",
    "torch._C.TensorType",
    "torch.nn.Module._slow_forward",  # what _call_impl calls while tracing
)
DISPATCH = (
    *_MODULE_CALL,
    "torch.utils._python_dispatch.TorchDispatchMode",
    "torch._subclasses.fake_tensor.FakeTensorMode",
    "torch._subclasses.fake_tensor.FakeTensorConverter.set_tensor_memo",
    "torch._C._dispatch_tls_local_exclude_set",
    "torch._C._dispatch_tls_local_include_set",
    "torch._C._AutoDispatchBelowADInplaceOrView",
    "torch._C._ForceDispatchKeyGuard",
    "torch._C._current_autograd_node",
    "torch._C._functions.AccumulateGrad",
    "torch._C._disabled_torch_function_impl",
    "torch.Tensor._make_wrapper_subclass",
    "torch._C._is_any_autocast_enabled",
    "torch.autograd.Function.apply",
    "torch.ops.aten.add.Tensor._schema",  # an OpOverload's schema
)
# nn.Module instance attributes read directly (hook dicts, containers)
_MODULE_ATTRIBUTES = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_parameters",
    "_buffers",
    "_modules",
)


def require(paths: Iterable[str]) -> None:
    """Raise :class:`~opcount.errors.TorchInternalsError` if the installed torch lacks one of
    ``paths`` (:data:`JIT`, :data:`DISPATCH`) or one of nn.Module's attributes read directly."""
    for path in paths:
        _resolve(path)
    probe = nn.Module()
    for name in _MODULE_ATTRIBUTES:
        if name not in probe.__dict__:
            raise _missing(f"torch.nn.Module().{name}")


# ----- what runs around a module's forward (hooks, a compiled call) -----------------------------

_module_globals: ModuleType = torch.nn.modules.module


def has_hooks(module: nn.Module) -> bool:
    """Whether the module has forward or backward hooks of its own."""
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
    )


def global_hooks() -> bool:
    """Whether global module hooks exist (``register_module_forward_hook`` and kin)."""
    m = _module_globals
    return bool(
        m._global_forward_hooks
        or m._global_forward_pre_hooks
        or m._global_backward_hooks
        or m._global_backward_pre_hooks
    )


def first_global_forward_hook(handle: RemovableHandle) -> None:
    """Move a global forward hook before the others, as ``register_forward_hook(prepend=True)``
    does for a module's own (the hooks are an OrderedDict by handle id)."""
    _module_globals._global_forward_hooks.move_to_end(handle.id, last=False)


def compiled(module: nn.Module) -> bool:
    """Whether ``module.compile()`` gave the module a compiled call, which runs instead of ``forward``."""
    return "_compiled_call_impl" in module.__dict__ or module._compiled_call_impl is not None


def torch_call(module: nn.Module) -> bool:
    """Whether the module's class keeps torch's ``_call_impl``, which ``__call__`` runs."""
    return type(module)._call_impl is nn.Module._call_impl


def hook_epoch() -> int:
    """The number the next hook handle takes: every registration takes the next one."""
    return RemovableHandle.next_id


def hooked_since(epoch: int, module: nn.Module) -> bool:
    """Whether a hook registered since ``epoch``, the module's own or a global one, would run
    around the module's forward. One integer compare while none was registered."""
    return RemovableHandle.next_id != epoch and (has_hooks(module) or global_hooks())


# ----- fake tensors ------------------------------------------------------------------------------


def alias_fake(fake: FakeTensorMode, meta: torch.Tensor, stand_in: Any) -> None:
    """Make ``fake`` answer ``stand_in`` wherever the meta tensor ``meta`` reaches it as an input
    (its converter's memo, which it reads before making a new fake)."""
    fake.fake_tensor_converter.set_tensor_memo(meta, stand_in)


@contextlib.contextmanager
def quiet_fake_tensors() -> Iterator[None]:
    """Fake tensors without their own error log: a meta kernel that fails logs the whole traceback
    at ERROR before raising, and the tracer reports the raised error in one line."""
    log = logging.getLogger("torch._subclasses.fake_tensor")
    disabled = log.disabled
    log.disabled = True
    try:
        yield
    finally:
        log.disabled = disabled


# ----- operators ----------------------------------------------------------------------------------


def op_schema(func: Any) -> Any:
    """An ``OpOverload``'s ``torch._C.FunctionSchema``."""
    return func._schema


op_qualified_name: Callable[[Any], str] = operator.attrgetter("_name")  # an OpOverload's "ns::op", per call


def custom_op_definitions() -> Mapping[str, Any]:
    """The ``torch.library.custom_op`` operators defined in Python, by qualified name (empty if
    this torch keeps them elsewhere: the profiler then leaves them unnamed)."""
    try:
        found = _resolve("torch._library.custom_ops.OPDEFS")
    except TorchInternalsError:
        return {}
    return found if isinstance(found, Mapping) else {}
