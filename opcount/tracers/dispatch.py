"""The dispatch tracer: every aten operator recorded as it is dispatched (a TorchDispatchMode).

Unlike jit tracing it needs no real arithmetic (it can run on meta tensors), keeps operators whose
results only steer Python control flow, sees inside custom autograd Functions and can follow
the backward pass. It emits the records the jit tracer emits, so handles, aggregation and
reports are shared. This module runs the trace; each step lives in a module of its own:

- **Forward pass below autograd** (:mod:`.recorder`). The model runs with autograd's dispatch
  keys excluded (grad mode untouched, so models take the same paths as under jit). There,
  composite operators such as ``linear``, ``matmul``, ``einsum``, ``batch_norm``,
  ``layer_norm`` and ``scaled_dot_product_attention`` reach the mode whole, as the jit tracer
  records them, instead of decomposed into ``t``/``addmm``/``native_batch_norm``. :mod:`.aten`
  binds their arguments as jit does and renames the few jit records differently (``conv2d`` ->
  ``_convolution``, or ``_convolution_mode`` for ``padding="same"``).
- **Training** (:mod:`.training`: the loss and what it is differentiated by; the node tags in
  :mod:`.recorder`). With ``mode="train"`` each forward operator is run with autograd
  re-enabled inside the mode, so autograd builds its graph of the decomposed operators; every
  new autograd node is tagged with the module scope (and custom Function) of the operator that
  made it. ``torch.autograd.grad`` then runs the backward pass under the mode, and each
  backward operator takes the scope of the node running it (``_current_autograd_node``).
- **Custom autograd Functions** (:mod:`.custom_functions`). ``Function.apply`` is wrapped for
  the trace so that the operators inside ``forward`` and ``backward`` are recorded under the
  Function's name (``OpCall.within``, reported as ``"MyFn::mm"``; MXNet's custom-operator
  prefixes). ``torch.library`` custom operators are recorded whole under their qualified name,
  as jit records them: on meta tensors only their fake implementation would run inside.
- **Meta analysis** (:mod:`.tensor_kinds`: real, fake or shape-only tensors). A forward pass on
  the meta device runs on shape-only tensors (:mod:`.shapes`): each operator's outputs come
  from a cache keyed by its inputs' metadata. What they cannot follow (a value read, an
  in-place reshape) runs again on torch's fake tensors (:mod:`.meta`), which training always
  uses.
- **Scopes** (:mod:`.scoping`) come from ``nn.Module.__call__``, replaced for the trace, or a
  forward pre/post hook pair for a module with hooks of its own (removed in ``finally``), with
  the jit tracer's semantics. On shape-only tensors, calls of torch.nn's own leaf modules are
  replayed from their first call's records (:mod:`.replay`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from .._runtime import gc_paused
from ..errors import OpcountError, OpcountTypeError, OpcountValueError, TraceError
from ..messages import FAILURES, first_failure, first_line
from ..scopes import ModuleTree, failure_site, recursion_hint
from ..torch_internals import DISPATCH, require
from .control_flow import ControlFlowError, higher_order_on_traceback
from .custom_functions import functions_named
from .jit import WRAPPERS, Recording, _warnings
from .meta import CLAIMED_ON_META, META
from .patching import OtherThreadError, exclusive
from .recorder import Recorder
from .scoping import Scopes
from .shapes import ShapeUnsupported
from .state import preserved
from .structure import DeferredOutputError, SparseTensorError, normalize_inputs
from .tensor_kinds import FakeTensors, RealTensors, ShapeTensors
from .training import BackwardError, LossFnError, Step, TrainingError, training_flags

logger = logging.getLogger(__name__)

MODES = ("eval", "train")


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
    the loss is ``loss_fn(output)`` or, by default, the output's ``"loss"`` entry where it has
    one, else the sum of every output tensor that requires grad; gradients are taken for every parameter and input tensor that requires grad (nothing
    is written to ``.grad``). ``device="meta"`` analyzes the model on storage-less tensors
    without touching its weights: shape-only tensors (:mod:`.shapes`) for a forward pass, fake
    tensors (:mod:`.meta`) for a training step or what shape-only tensors cannot follow; a model
    already on the meta device is analyzed that way by default.
    """
    if mode not in MODES:
        raise OpcountValueError(f"unknown mode {mode!r}; choose 'eval' (forward) or 'train' (forward and backward)")
    require(DISPATCH)
    if loss_fn is not None and mode != "train":
        raise OpcountValueError("loss_fn is only used with mode='train'")
    if loss_fn is not None and not callable(loss_fn):
        raise OpcountTypeError(f"loss_fn must be callable, got {type(loss_fn).__name__}")
    if device is not None and torch.device(device) != META:
        raise OpcountValueError(f"device must be None (where the model is) or 'meta', got {device!r}")
    args, kw = normalize_inputs(inputs, kwargs)
    inner = model.module if isinstance(model, WRAPPERS) else model
    state = tree.state(tree.name_of(inner))
    built_on_meta = any(t.is_meta for _, t in state)
    on_meta = device is not None or built_on_meta
    claimed = CLAIMED_ON_META if built_on_meta or not state else state[0][1].device  # what meta tensors claim
    train = mode == "train"
    first: Exception | None = None
    if on_meta and not train:
        try:
            return _trace(model, inner, tree, state, args, kw, warn_mode, ShapeTensors(claimed), train, None)
        except _FINAL:
            raise
        except Exception as e:  # what a shape-only tensor cannot follow, fake tensors may
            cause = e.__cause__ or e
            logger.debug(
                "shape-only tensors stopped at %s: %s; running on fake tensors", type(cause).__name__, first_line(cause)
            )
            first = e
    tensors = FakeTensors(claimed) if on_meta else RealTensors(claimed)
    try:
        return _trace(model, inner, tree, state, args, kw, warn_mode, tensors, train, loss_fn if train else None)
    except Exception as e:
        if first is None or _second_says_more(first, e):
            raise
        # Both failed: the first error is the model's (a wrong config, a bad shape); the fake
        # tensors' is often an artefact of the second run (a meta cache beside CPU indices)
        raise first_failure(first, e) from first.__cause__


# Errors that a second run on other tensors would only repeat: the model's own, not what
# shape-only tensors cannot follow.
_FINAL = (TrainingError, SparseTensorError, DeferredOutputError, ControlFlowError, OtherThreadError)


def _second_says_more(first: Exception, second: Exception) -> bool:
    """Whether the fake-tensor run's error is the one to report: one of opcount's own on purpose
    (a sparse layout refused), or the first was only what shape-only tensors cannot follow (an
    operator without a meta kernel, an in-place reshape)."""
    if isinstance(second, OpcountError) and not isinstance(second, TraceError):
        return True
    return isinstance(first.__cause__, (ShapeUnsupported, NotImplementedError))


def _trace(
    model: nn.Module,
    inner: nn.Module,
    tree: ModuleTree,
    named: list[tuple[str, torch.Tensor]],
    args: tuple[Any, ...],
    kw: dict[str, Any],
    warn_mode: str,
    tensors: RealTensors,
    train: bool,
    loss_fn: Callable[[Any], torch.Tensor] | None,
) -> Recording:
    # under the patch lock throughout: the warning filters, the collector, the flags and buffers are process state too
    preserving = preserved(tree, (args, kw), values=not tensors.on_meta)  # stand-ins write nothing back
    # autograd, and the stand-ins that require grad, even when called under torch.inference_mode()
    autograd = torch.inference_mode(False) if train else contextlib.nullcontext()
    with exclusive(), gc_paused(), training_flags(tree, model, train), preserving, _warnings(warn_mode), autograd:
        args, kw = tensors.inputs((args, kw))
        state = tensors.state(inner, named)
        step = Step(inner, state, args, kw, loss_fn, train)
        names = {id(t): name for name, t in (*named, *state.items())}  # the tensors the forward sees
        recorder = Recorder(Scopes(tree, inner), names, train, tensors.compute)
        with tensors.mode(), recorder.scopes.installed(tensors.replayer(recorder)), functions_named(recorder):
            others = recorder.scopes.others
            try:
                recorder.run(step)
            except LossFnError as e:
                if tensors.on_meta:  # most likely the loss read a value, which meta tensors lack
                    raise LossFnError(f"{e}. Hint: {META_HINT}") from e.__cause__
                raise
            except (TrainingError, BackwardError, SparseTensorError, DeferredOutputError):
                raise
            except FAILURES as e:  # re-raised with the module path; sys.exit in a forward too
                # another thread's share of the work first: this failure is often its consequence
                raise others.error(model, tree.module) or _trace_error(model, tree, e, tensors.on_meta) from e
            found = others.error(model, tree.module)
            if found is not None:
                raise found
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


EXIT_HINT = "a forward returns its outputs: the model's code exited instead"
META_HINT = (
    "on the meta device tensors have no values, so a forward that reads them (.item(), "
    "data-dependent shapes or branches) cannot run: analyze real tensors (device=None)"
)


def _trace_error(model: nn.Module, tree: ModuleTree, e: BaseException, on_meta: bool) -> TraceError:
    path, first = failure_site(model, tree, e), first_line(e, type(e).__name__)
    higher_order = higher_order_on_traceback(e)
    if higher_order is not None:
        return higher_order.error(path, " with the dispatch tracer")
    hint = META_HINT if on_meta else "check the inputs' shapes and types"
    if isinstance(e, SystemExit):
        hint = EXIT_HINT
    elif isinstance(e, RecursionError):  # not a value the meta tensors lack: the model's depth
        hint = recursion_hint(tree)
    return TraceError(f"could not trace {path} with the dispatch tracer: {type(e).__name__}: {first}. Hint: {hint}.")
