"""Activations saved for backward: what autograd keeps between a training step's forward and
its backward, measured, and what activation recomputation (``none``, ``selective``, ``full``)
leaves of it.

The model's forward and loss run once on torch's fake tensors (nothing of the weights' or the
activations' size is allocated, whatever device the model is on) under
``torch.autograd.graph.saved_tensors_hooks``: each tensor autograd saves is recorded by its
storage, so a tensor saved by several nodes (a layer norm's input that a residual add also keeps)
and the views of one tensor count once, at their storage's size. The storages of the model's
parameters and buffers are excluded: they are the model's state, counted as weights.

Recomputation (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
Models"):

- ``full``: each layer (the modules of the ``nn.ModuleList`` holding the most parameters, the
  decoder layers of a transformer) is checkpointed: only its input is kept, and in the backward pass one
  layer's activations are rematerialised at a time. Held at the peak (the backward pass of the
  last layer, every checkpoint still kept) = what lies outside the layers + every layer's input +
  the largest layer's saved tensors other than the layers' inputs (counted once, as checkpoints).
- ``selective``: the attention core is recomputed: the tensors of a layer that are
  ``[batch, heads, query, key]`` score matrices (``QK^T``, its softmax, the softmax's dropout
  mask), the ``5 a s^2 b`` term of the paper, are dropped; the queries, keys and values stay. A
  fused attention kernel (``scaled_dot_product_attention``'s flash path, which transformers'
  ``sdpa`` takes without attention dropout) saves no score matrix: there selective keeps what none
  keeps.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import OpcountError
from ..messages import FAILURES, first_line
from ..torch_internals import FakeTensorMode, pytree
from ..tracers.meta import CPU, META, device_of, fake_state, materialize

RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Saved:
    """One storage autograd saved: its bytes, the layer it was saved in (None: outside the
    layers) and whether it is an attention score matrix (``[..., query, key]``)."""

    nbytes: int
    layer: int | None
    scores: bool
    key: int = 0  # the storage's identity, while the measurement runs
    module: str = ""  # the innermost module running when it was first saved (inside the layers)
    width: int = 0  # the tensor's last size (a [batch, seq, hidden] tensor's hidden width), 0 for a scalar
    dims: int = 0


@dataclass
class SavedActivations:
    """The storages a training step's forward saved for backward, and each layer's input bytes."""

    saved: list[Saved]
    layer_inputs: list[int] = field(default_factory=list)
    layers_name: str | None = None
    input_keys: frozenset[int] = frozenset()  # the storages of the layers' inputs

    @property
    def total(self) -> int:
        """Bytes saved with no recomputation."""
        return sum(s.nbytes for s in self.saved)

    def kept(self, recompute: str) -> int:
        """Bytes held at the backward pass's peak under ``recompute`` (:data:`RECOMPUTE`)."""
        if recompute == "none":
            return self.total
        if recompute == "selective":
            return sum(s.nbytes for s in self.saved if not (s.scores and s.layer is not None))
        if recompute == "full":
            if self.layers_name is None:
                raise OpcountError("--recompute full: the model has no layers (an nn.ModuleList) to checkpoint")
            # a layer input saved by an operator is the checkpoint itself: counted once, with the inputs
            outside = sum(s.nbytes for s in self.saved if s.layer is None and s.key not in self.input_keys)
            per_layer = [0] * len(self.layer_inputs)
            for s in self.saved:
                if s.layer is not None and s.key not in self.input_keys:
                    per_layer[s.layer] += s.nbytes
            return outside + sum(self.layer_inputs) + max(per_layer, default=0)
        raise OpcountError(f"--recompute {recompute}: choose {', '.join(RECOMPUTE)}")


def effective(saved: SavedActivations, recompute: str) -> str:
    """``recompute``, or ``none`` where selective recomputation drops nothing (no score matrix was
    saved: a fused attention kernel), so that nothing is run again."""
    return "none" if recompute == "selective" and saved.kept("selective") == saved.total else recompute


def layers_of(model: nn.Module) -> tuple[str, nn.ModuleList] | None:
    """The model's layers: of its ``nn.ModuleList`` s, the one holding the most parameters (the
    decoder layers, not the experts' list inside one of them, however many experts it has), the
    first of equal ones; None when it has none."""
    best: tuple[str, nn.ModuleList] | None = None
    most = -1
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module):
            held = sum(p.numel() for p in module.parameters())
            if held > most:
                best, most = (name, module), held
    return best


def measure(
    model: nn.Module,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loss_fn: Callable[[Any], torch.Tensor] | None = None,
    seq_len: int | None = None,
) -> SavedActivations:
    """The storages one training forward of ``model`` (and its loss: ``loss_fn`` of the output,
    the output's ``loss`` when it has one, or the sum of its outputs) saves for backward, on fake
    tensors. ``seq_len``: the sequence length, which tells an attention score matrix
    (``[..., seq_len, seq_len]``); None: no score matrix is recognised."""
    fake = FakeTensorMode(allow_non_fake_inputs=True)
    device = device_of(model)
    if device == META:  # as the dispatch tracer: code that asks a tensor for its device takes the CPU's path
        device = CPU
    state = fake_state(model, device, fake)
    fake_args, fake_kwargs = materialize((args, kwargs), device, fake)
    found = layers_of(model)
    recorder = _Recorder(seq_len)
    with contextlib.ExitStack() as stack:
        stack.enter_context(_training(model))
        if found is not None:
            stack.enter_context(recorder.layers(found[1], found[0]))
        stack.enter_context(fake)
        stack.enter_context(torch.enable_grad())
        stack.enter_context(torch.autograd.graph.saved_tensors_hooks(recorder.pack, _unpack))
        recorder.exclude(state.values())
        try:
            output = torch.func.functional_call(model, state, fake_args, fake_kwargs, tie_weights=True, strict=False)
            _loss(output, loss_fn)
        except FAILURES as e:  # a model that reads a value (data-dependent control flow) cannot run on fake tensors
            raise OpcountError(
                f"{type(model).__name__}: the activations saved for backward are measured on fake tensors, and the "
                f"forward failed there: {type(e).__name__}: {first_line(e)}"
            ) from e
    return SavedActivations(
        list(recorder.saved.values()),
        recorder.inputs,
        None if found is None else found[0] or type(model).__name__,
        frozenset(recorder.input_keys),
    )


def _loss(output: Any, loss_fn: Callable[[Any], torch.Tensor] | None) -> None:
    """The loss as the training trace computes it (opcount.tracers.training.Step.loss): ``loss_fn``,
    the output's own ``loss``, or the sum of the outputs that require grad."""
    if loss_fn is not None:
        loss_fn(output)
        return
    own = output.get("loss") if isinstance(output, Mapping) else None
    if own is None:
        for t in pytree.tree_leaves(output):
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.sum()


def _unpack(t: torch.Tensor) -> torch.Tensor:
    return t


class _Recorder:
    """The pack hook: each saved storage once, with the layer running when it was first saved."""

    def __init__(self, seq_len: int | None) -> None:
        self.seq_len = seq_len
        self.saved: dict[int, Saved] = {}
        self.inputs: list[int] = []
        self.input_keys: set[int] = set()
        self._excluded: set[int] = set()
        self._keep: list[torch.Tensor] = []  # alive until the end: a storage's key is never reused
        self._layer: int | None = None
        self._modules: list[str] = []  # the modules running inside a layer, innermost last

    def exclude(self, tensors: Any) -> None:
        for t in tensors:
            self._excluded.add(_key(t))
            self._keep.append(t)

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        key = _key(t)
        if key not in self._excluded and key not in self.saved:
            self._keep.append(t)
            s = self.seq_len
            # [batch, heads, query, key]: four dimensions at least, so that a [batch, seq, hidden] tensor
            # whose hidden size equals the sequence length is not taken for one
            scores = s is not None and t.dim() >= 4 and tuple(t.shape[-2:]) == (s, s)
            module = self._modules[-1] if self._modules else ""
            width = int(t.shape[-1]) if t.dim() else 0
            self.saved[key] = Saved(t.untyped_storage().nbytes(), self._layer, scores, key, module, width, t.dim())
        return t

    @contextlib.contextmanager
    def layers(self, layers: nn.ModuleList, prefix: str = "") -> Iterator[None]:
        handles = []
        for i, layer in enumerate(layers):
            self.inputs.append(0)
            handles.append(layer.register_forward_pre_hook(self._enter(i), with_kwargs=True))
            handles.append(layer.register_forward_hook(self._leave, with_kwargs=True))
            # which module saves each tensor: tensor parallelism splits a row-parallel projection's input
            for name, sub in layer.named_modules():
                full = ".".join(p for p in (prefix, str(i), name) if p)
                handles.append(sub.register_forward_pre_hook(self._push(full)))
                handles.append(sub.register_forward_hook(self._pop))
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def _enter(self, index: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            self._layer = index
            first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
            # a checkpointed layer keeps its input (the hidden states) for the recomputation
            if first is not None:
                self.inputs[index] = first.untyped_storage().nbytes()
                self.input_keys.add(_key(first))
                self._keep.append(first)

        return hook

    def _push(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            self._modules.append(name)

        return hook

    def _pop(self, module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
        if self._modules:
            self._modules.pop()

    def _leave(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        self._layer = None


def _key(t: torch.Tensor) -> int:
    return int(t.untyped_storage()._cdata)


@contextlib.contextmanager
def _training(model: nn.Module) -> Iterator[None]:
    """``model.train()`` for the measurement, every module's own flag put back."""
    saved = [(m, m.training) for m in model.modules()]
    try:
        model.train()
        yield
    finally:
        for module, flag in saved:
            module.training = flag
