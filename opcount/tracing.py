"""The public trace: one forward pass of a model, recorded once, analyzed any number of ways.

``trace(model, inputs)`` runs one of the tracers (:mod:`opcount.tracers`) and returns a
:class:`Trace`: the model's module tree, the frozen :class:`~opcount.ir.OpCall` records, the
modules that ran, the model's output tensors and how it was traced. Every analysis
(``FlopCountAnalysis(trace)``, ``ActivationCountAnalysis(trace)``, ``MemoryTrafficAnalysis(trace)``)
and report (``roofline(trace, hardware=...)``, ``sparsity_roofline``, ``profile(predicted=...)``)
takes it in place of a model and its inputs, and runs no forward pass of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .errors import OpcountTypeError, OpcountValueError
from .ir import OpCall, TensorSpec
from .scopes import ModuleTree
from .torch_internals import pytree
from .tracers import Recording, trace_dispatch, trace_jit
from .tracers.dispatch import MODES
from .tracers.meta import device_of, has_shapes, materialize
from .tracers.process import kept
from .tracers.structure import check_dense_inputs

TRACERS = ("jit", "dispatch")

LossFn = Callable[[Any], torch.Tensor]


@dataclass(frozen=True, eq=False)
class Trace:
    """One traced forward pass (or training step), ready for any number of analyses.

    ``calls``: every operator call in execution order, frozen records of plain values.
    ``called``: canonical names of the modules whose ``__call__`` ran. ``outputs``: the model's
    output tensors, flattened, as the records name them (an output is read after the model
    returns, so memory-traffic fusion never drops its write). ``tracer``, ``mode``, ``device``:
    how it was traced, and ``inputs`` / ``kwargs``, the model's arguments as given (export
    metadata names them). ``nodes``: the jit tracer's graph node of each call, by index (empty
    for the dispatch tracer), for fvcore-style handles, which take ``torch._C.Value`` lists.
    """

    tree: ModuleTree
    calls: tuple[OpCall, ...]
    called: frozenset[str]
    outputs: tuple[TensorSpec, ...]
    tracer: str = "jit"
    mode: str = "eval"
    device: str | None = None
    inputs: Any = field(default=(), repr=False)
    kwargs: dict[str, Any] | None = field(default=None, repr=False)
    nodes: tuple[object, ...] = field(default=(), repr=False)
    _index: dict[int, int] = field(default_factory=dict, init=False, repr=False)

    @property
    def model(self) -> nn.Module:
        """The traced model."""
        return self.tree.module("")

    def node_of(self, call: OpCall) -> object | None:
        """The jit node ``call`` (one of :attr:`calls`) was made from; None on a dispatch trace."""
        if not self.nodes:
            return None
        index = self._index
        if not index:  # built on first use: only fvcore-style handles ask
            index.update((id(c), i) for i, c in enumerate(self.calls))
        found = index.get(id(call))
        return None if found is None else self.nodes[found]

    def __repr__(self) -> str:
        return (
            f"Trace({type(self.model).__name__}, {len(self.calls)} calls, tracer={self.tracer!r}, "
            f"mode={self.mode!r}, device={self.device!r})"
        )


def trace(
    model: nn.Module,
    inputs: Any = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    tracer: str = "jit",
    device: torch.device | str | None = None,
    mode: str = "eval",
    loss_fn: LossFn | None = None,
) -> Trace:
    """Trace ``model(*inputs, **kwargs)`` once and return the :class:`Trace` every analysis takes.

    ``inputs``: a tensor, a tuple of positional arguments or any other single argument (None:
    no positional argument); ``kwargs``: keyword arguments. ``tracer="jit"`` (torch.jit tracing)
    or ``"dispatch"`` (docs/dispatch.md), which alone takes ``mode`` (``"eval"``: the forward
    pass; ``"train"``: forward and backward, loss ``loss_fn(output)``) and ``device="meta"``.
    """
    if not isinstance(model, nn.Module):
        raise OpcountTypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_options(tracer, mode, loss_fn, device)
    tree = ModuleTree(model)
    inputs = () if inputs is None else inputs
    return run(model, inputs, kwargs, tree, tracer=tracer, mode=mode, loss_fn=loss_fn, device=device)


def check_options(tracer: str, mode: str, loss_fn: LossFn | None, device: torch.device | str | None) -> None:
    """Refuse an unknown tracer or mode, and options the jit tracer cannot honour."""
    if tracer not in TRACERS:
        raise OpcountValueError(f"unknown tracer {tracer!r}; choose 'jit' or 'dispatch'")
    if mode not in MODES:
        raise OpcountValueError(f"unknown mode {mode!r}; choose 'eval' or 'train'")
    if tracer == "jit" and (mode != "eval" or loss_fn is not None or device is not None):
        raise OpcountValueError(
            "mode, loss_fn and device need tracer='dispatch'; the jit tracer runs the forward pass as is"
        )


def run(
    model: nn.Module,
    inputs: Any,
    kwargs: Mapping[str, Any] | None,
    tree: ModuleTree,
    warn_mode: str = "no_tracer_warning",
    *,
    tracer: str = "jit",
    mode: str = "eval",
    loss_fn: LossFn | None = None,
    device: torch.device | str | None = None,
) -> Trace:
    """Run the chosen tracer once (options already checked) and wrap its records."""
    state = tree.state()
    lazy = [name for name, t in state if nn.parameter.is_lazy(t)]
    if lazy:  # no shape to trace with, under either tracer: the first call of a lazy module sizes its weights
        raise OpcountValueError(
            f"parameter(s) {', '.join(map(repr, lazy))} of a lazy module are uninitialized; "
            "call the model once (model(x)) to size them, then analyze it"
        )
    check_dense_inputs(model, inputs, kwargs)
    recorded: Recording
    # autograd may save the inputs, which a tensor made under torch.inference_mode() forbids: a copy
    given, given_kwargs = inputs, kwargs
    if any(isinstance(t, torch.Tensor) and t.is_inference() for t in pytree.tree_leaves((inputs, kwargs))):
        given, given_kwargs = pytree.tree_map(_outside_inference, (inputs, kwargs))
    # under the patch lock, the process state put back afterwards: the recursion limit (raised for
    # opcount's own frames), the random number generators (a dropout draws from a fork), ...
    with kept():
        if tracer == "dispatch":
            recorded = trace_dispatch(
                model, given, given_kwargs, tree, warn_mode, mode=mode, loss_fn=loss_fn, device=device
            )
        else:
            if has_shapes((given, given_kwargs)):  # TensorShape placeholders become zeros for jit
                given, given_kwargs = materialize((given, given_kwargs), device_of(model))
                inputs, kwargs = given, given_kwargs
            recorded = trace_jit(model, given, given_kwargs, tree, warn_mode)
    return Trace(
        tree,
        recorded.calls,
        recorded.called,
        recorded.outputs,
        tracer=tracer,
        mode=mode,
        device=None if device is None else str(torch.device(device)),
        inputs=inputs,
        kwargs=None if kwargs is None else dict(kwargs),
        nodes=recorded.nodes,
    )


def _outside_inference(x: Any) -> Any:
    """A tensor made under ``torch.inference_mode()`` copied to an ordinary one; anything else as is."""
    if isinstance(x, torch.Tensor) and x.is_inference():
        with torch.inference_mode(False):
            return x.clone()
    return x
