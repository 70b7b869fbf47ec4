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

from ..errors import OpcountValueError, TraceError, first_line
from ..scopes import ModuleTree
from ..torch_internals import pytree
from .structure import output_tensors


class TrainingError(OpcountValueError):
    """``mode="train"`` cannot differentiate: no loss, or nothing that requires grad."""


class BackwardError(TraceError):
    """The backward pass of a training step failed (the forward and the loss ran)."""


class LossFnError(TrainingError):
    """``loss_fn`` raised: the caller's function failed, not the model."""


# torch.autograd.grad, which computes the gradients without writing .grad, cannot run through them
_REENTRANT = "use_reentrant=True"


def backward_error(e: Exception) -> BackwardError:
    """The error of a failed backward pass, with the way out where one is known."""
    hint = (
        "torch.utils.checkpoint(..., use_reentrant=True) cannot be differentiated without writing .grad; "
        "use use_reentrant=False"
        if _REENTRANT in str(e)
        else "the model's autograd Functions or backward hooks failed"
    )
    return BackwardError(f"mode='train': the backward pass failed: {type(e).__name__}: {first_line(e)}. Hint: {hint}.")


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
            except Exception as e:  # the caller's function, not the model: named as such
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
