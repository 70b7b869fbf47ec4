"""A training step for the dispatch tracer, and the modules' training flags for the trace.

:class:`Step` is what the recorder runs: the forward call and, with ``mode="train"``, the loss
and the tensors to differentiate it by. ``mode="train"``'s conventions (the default loss, what
is differentiated, the error when nothing requires grad) live here, in one place; the recorder
only runs the step (docs/dispatch.md, "Training: the convention").
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

from ..errors import OpcountValueError, TraceError
from ..messages import FAILURES, first_line
from ..scopes import ModuleTree
from ..torch_internals import pytree
from .structure import output_tensors


class TrainingError(OpcountValueError):
    """``mode="train"`` cannot differentiate: no loss, or nothing that requires grad."""


class BackwardError(TraceError):
    """The backward pass of a training step failed (the forward and the loss ran)."""


class LossFnError(TrainingError):
    """``loss_fn`` raised: the caller's function failed, not the model."""


def differentiate(loss: torch.Tensor, wrt: list[torch.Tensor], model: nn.Module) -> None:
    """The backward pass: ``torch.autograd.grad``, which writes no ``.grad``. Through a
    ``torch.utils.checkpoint(..., use_reentrant=True)`` (transformers' gradient checkpointing),
    which only ``.backward()`` can run, ``.backward()``, and the ``.grad`` of what it wrote to put
    back: of ``wrt`` and of the model's own parameters, which a recomputation in the backward
    pass uses even where the forward ran on stand-ins."""
    if not _reentrant_checkpoint(loss):
        torch.autograd.grad(loss, wrt, allow_unused=True)
        return
    leaves = {id(t): t for t in (*wrt, *model.parameters()) if t.is_leaf}
    saved = [(t, t.grad) for t in leaves.values()]
    try:
        for t, _ in saved:
            t.grad = None  # as after optimizer.zero_grad(): the gradients are written, not added
        torch.autograd.backward(loss)
    finally:
        for t, grad in saved:
            t.grad = grad


def _reentrant_checkpoint(loss: torch.Tensor) -> bool:
    """Whether the graph of ``loss`` runs through a reentrant checkpoint's backward node."""
    seen: set[int] = set()
    pending = [loss.grad_fn]
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if type(node).__name__ == _REENTRANT_NODE:
            return True
        pending.extend(n for n, _ in node.next_functions)
    return False


# the backward node of torch.utils.checkpoint's reentrant Function
_REENTRANT_NODE = "CheckpointFunctionBackward"


def backward_error(e: BaseException) -> BackwardError:
    """The error of a failed backward pass: the model's autograd Functions or hooks, not its forward."""
    return BackwardError(
        f"mode='train': the backward pass failed: {type(e).__name__}: {first_line(e)}. "
        "Hint: the forward ran; check the model's custom autograd Functions and backward hooks."
    )


class Step:
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
            try:
                loss = self.loss_fn(output)
            except FAILURES as e:  # the caller's function, not the model: named as such
                raise LossFnError(f"mode='train': loss_fn raised {type(e).__name__}: {first_line(e)}") from e
            if not isinstance(loss, torch.Tensor):
                raise TrainingError(f"loss_fn must return a one-element tensor, got {type(loss).__name__}")
            if loss.numel() != 1:
                raise TrainingError(
                    f"loss_fn must return a one-element tensor, got a tensor of shape {tuple(loss.shape)}; "
                    "reduce it (.sum(), .mean())"
                )
            return loss
        own = output.get("loss") if isinstance(output, Mapping) else None  # transformers given labels=
        if isinstance(own, torch.Tensor) and own.numel() == 1 and own.requires_grad:
            return own
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


@contextlib.contextmanager
def training_flags(tree: ModuleTree, model: nn.Module, train: bool) -> Iterator[None]:
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
