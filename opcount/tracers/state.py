"""What a forward pass may change in the model and the caller's inputs, saved and put back.

Tracing runs the model's ``forward`` for real, and a forward may write to what it is given: an
in-place operator on an input (``x.mul_(2)``), a buffer updated in place (batch norm's running
statistics in training, a step counter in eval) or rebound (``self.ema = self.ema * 0.9 + y``
puts a new tensor in ``module._buffers``), a buffer registered or deleted, a parameter rebound
(``p.data = ...``, as momentum encoders do), ``requires_grad`` or ``.grad`` changed, a module's
training flag switched. :func:`preserved` puts all of it back when the trace ends, failed or not.

What it costs: a reference to every parameter, buffer and flag (no copy), and a copy of the
values of every buffer and input tensor, which are small next to the weights and to a trace.
The values of the parameters are not copied: that would take twice the model's memory and, on
resnet50, a fifth of the time of tracing it. A write to a parameter's values is reported with a
warning where torch's version counter shows it; one through ``.data`` leaves no trace to see.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch import nn

from ..scopes import ModuleTree
from ..torch_internals import pytree

logger = logging.getLogger(__name__)


class _Values:
    """Tensors whose values are copied before the pass and written back where they changed."""

    def __init__(self, tensors: Iterable[torch.Tensor]) -> None:
        self._saved: list[tuple[torch.Tensor, torch.Tensor, int | None, torch.Tensor]] = []
        seen: set[int] = set()
        for t in tensors:
            # a meta tensor has no values; a subclass (a fake tensor) may not copy as a tensor does
            if id(t) not in seen and _plain(t) and not t.is_meta:
                seen.add(id(t))
                self._saved.append((t, t.data, _version(t), t.detach().clone()))

    def restore(self) -> None:
        with torch.no_grad():
            for t, data, version, value in self._saved:
                if not _bound_to(t, data):  # ``t.data = ...`` or ``t.resize_()``
                    _rebind(t, data)
                # The version counter shows most writes; one below autograd (the dispatch
                # tracer's) or through ``.data`` does not, so the values are compared too.
                if _version(t) != version or not torch.equal(t, value):
                    # an inference tensor is written in inference mode only
                    with torch.inference_mode() if t.is_inference() else contextlib.nullcontext():
                        t.copy_(value)


def _version(t: torch.Tensor) -> int | None:
    """``t._version``; None for an inference tensor (made under ``torch.inference_mode()``),
    which has no version counter: its values alone tell a write."""
    return None if t.is_inference() else t._version


_PLAIN = (torch.Tensor, nn.Parameter)


def _bound_to(t: torch.Tensor, data: torch.Tensor) -> bool:
    """Whether ``t`` still views the memory that ``data`` (``t.data`` before the pass) views."""
    if not _plain(data):
        return True  # a subclass, a sparse or quantized tensor: its binding is its own affair
    if data.is_meta:  # no memory: the layout is all there is (is_set_to has no meta kernel)
        layout = (data.shape, data.stride(), data.storage_offset(), data.dtype)
        return t.is_meta and (t.shape, t.stride(), t.storage_offset(), t.dtype) == layout
    return t.is_set_to(data)


def _plain(t: torch.Tensor) -> bool:
    """A tensor or parameter holding its own strided values (not a fake, sparse or quantized one)."""
    return type(t) in _PLAIN and t.layout == torch.strided and not t.is_quantized


def _rebind(t: torch.Tensor, data: torch.Tensor) -> None:
    """``t.data = data``; where ``t`` now holds a tensor of another kind (a shape-only stand-in
    put there during a meta analysis), which ``.data`` cannot replace, the whole tensor is
    swapped for one on ``data``, the Python object kept."""
    try:
        t.data = data
    except RuntimeError:
        again = type(t)(data, t.requires_grad) if isinstance(t, nn.Parameter) else data.detach()
        torch.utils.swap_tensors(t, again)  # type: ignore[no-untyped-call]  # torch leaves swap_tensors unannotated


class _Modules:
    """Each module's parameter and buffer bindings, buffer kinds and training flag, by reference."""

    def __init__(self, named: list[tuple[str, nn.Module]]) -> None:
        # TorchScript modules keep their bindings in C++ (no Python code of theirs can rebind one)
        named = [(name, m) for name, m in named if not isinstance(m, torch.jit.ScriptModule)]
        self._saved = [
            (m, dict(m._parameters), dict(m._buffers), set(m._non_persistent_buffers_set), m.training) for _, m in named
        ]
        params: dict[int, tuple[str, torch.Tensor]] = {}  # each parameter once, under its first name
        for name, m in named:
            for key, p in m._parameters.items():
                if p is not None and id(p) not in params:
                    params[id(p)] = (f"{name}.{key}" if name else key, p)
        self._params = [(name, p, p.data, _version(p), p.requires_grad, p.grad) for name, p in params.values()]

    def restore(self) -> list[str]:
        """Put everything back; the names of the parameters whose values were written in place."""
        for m, params, buffers, non_persistent, training in self._saved:
            _put_back(m._parameters, params)
            _put_back(m._buffers, buffers)
            if m._non_persistent_buffers_set != non_persistent:
                m._non_persistent_buffers_set = non_persistent
            if m.training != training:
                m.training = training
        written = []
        for name, p, data, version, requires_grad, grad in self._params:
            if not _bound_to(p, data):
                _rebind(p, data)
            elif _version(p) != version:
                written.append(name)
            if p.requires_grad != requires_grad:
                p.requires_grad_(requires_grad)
            if p.grad is not grad:
                p.grad = grad
        return written


def _put_back(current: dict[str, Any], saved: dict[str, Any]) -> None:
    """Make ``current`` hold exactly ``saved`` again, in order, without replacing the dict."""
    if len(current) == len(saved) and all(current.get(k, _MISSING) is v for k, v in saved.items()):
        return  # unchanged: the common case
    current.clear()
    current.update(saved)


_MISSING = object()


@contextlib.contextmanager
def preserved(tree: ModuleTree, inputs: Any, *, values: bool = True) -> Iterator[None]:
    """Leave the model of ``tree`` and the tensors in ``inputs`` (nested args and kwargs) as they
    were before the block. ``values=False``: the forward runs on stand-ins (meta analysis) and
    cannot write to the model's or the inputs' values; only bindings and flags are saved."""
    named = [(name, tree.module(name)) for name in tree.names]
    bindings = _Modules(named)
    copies = None
    if values:
        buffers = [b for _, m in named for b in m._buffers.values() if b is not None]
        leaves = [t for t in pytree.tree_leaves(inputs) if isinstance(t, torch.Tensor)]
        copies = _Values([*buffers, *leaves])
    try:
        yield
    finally:
        written = bindings.restore()
        if copies is not None:
            copies.restore()
        if written:
            logger.warning(
                "The forward pass wrote to the values of parameter(s) %s in place; they are left as written "
                "(opcount copies buffers and inputs before tracing, not the weights).",
                ", ".join(written),
            )
