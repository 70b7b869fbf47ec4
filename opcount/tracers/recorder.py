"""The dispatch tracer's recorder: a TorchDispatchMode that turns each operator into records.

:class:`Recorder` runs the step (:mod:`.training`) below autograd, sees every aten operator
dispatched, and appends its :class:`~opcount.ir.OpCall` records, the jit tracer's kinds and
argument layout (:mod:`.aten`), in the current module scope (:mod:`.scoping`). It converts
tensors and constants to specs once, here, so that handles never see torch values. In
training it tags each new autograd node with its scope, and each backward operator takes the
tag of the node running it. This is the per-operator hot path (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.weak import WeakIdKeyDictionary

from ..ir import Const, ListSpec, OpCall, Spec, TensorSpec
from ..messages import FAILURES
from ..scopes import ROOT
from ..torch_internals import (
    AccumulateGrad,
    AutoDispatchBelowADInplaceOrView,
    ForceDispatchKeyGuard,
    HigherOrderOperator,
    TorchDispatchMode,
    current_autograd_node,
    dispatch_exclude_set,
    dispatch_include_set,
    pytree,
)
from .aten import Record, backward_records, bind, forward_records, jit_constant, outputs_of, schema
from .control_flow import UnsupportedHigherOrder
from .scoping import Scope, Scopes
from .shapes import Meta, ShapeTensor
from .structure import output_tensors, refuse_deferred, refuse_sparse, tensor_description
from .training import Step, TrainingError, backward_error, differentiate

_TAG = "opcount"  # key of the (scope, within) tag in autograd nodes' metadata

Tag = tuple[Scope, tuple[str, ...]]


class Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]  # its __init_subclass__ is unannotated
    """Records each dispatched operator as :class:`~opcount.ir.OpCall` records."""

    # torch.cond and the other higher-order operators reach __torch_dispatch__, to be refused by
    # name there, instead of torch's NotImplementedError naming the mode by its address
    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # torch wraps a mode's __torch_dispatch__ to keep torch.compile out of it: two more
        # Python calls per operator, for a mode that nothing compiles.
        return False

    def __init__(
        self,
        scopes: Scopes,
        names: dict[int, str],
        train: bool,
        compute: Callable[[Any, tuple[Any, ...], dict[str, Any], int], Any] | None = None,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        self.scopes = scopes
        self._compute = compute  # how an operator's outputs are made; None: its kernel runs
        self.calls: list[OpCall] = []
        self.outputs: tuple[TensorSpec, ...] = ()  # the model's output tensors, set by run()
        self.within: tuple[str, ...] = ()  # custom autograd Functions running, outermost first
        self._names = names
        self._train = train
        self._backward = False
        self._autograd = dispatch_exclude_set()  # set by run()
        self._ids: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> value id, while it lives
        self.next_id = 0  # the id of the next value recorded
        self._dtypes: dict[torch.dtype, str] = {}
        self._state_specs: dict[int, TensorSpec] = {}  # id of a parameter or buffer -> its spec
        self._consts: dict[tuple[type, Any], Const] = {}  # the constants seen, made once
        self._sparse: dict[int, str] = {}  # value id -> the sparse tensor it is, described

    def run(self, step: Step) -> None:
        before = dispatch_exclude_set()
        # a training step needs grad mode even when called under torch.no_grad()
        with self, torch.enable_grad() if step.train else contextlib.nullcontext():
            # Below autograd and ADInplaceOrView, as in inference mode but with grad mode on.
            # Training re-enables both per operator, so in-place operators bump versions once.
            with AutoDispatchBelowADInplaceOrView():
                # the keys this guard excludes: re-enabled per operator when training
                self._autograd = dispatch_exclude_set() - before
                output = step.forward()
                refuse_deferred(step.model, output)
                # the specs of tensors already recorded; one made by no operator gets a new id
                self.outputs = tuple(map(self.spec_of, output_tensors(output)))
                # what to differentiate by first: with nothing, no loss can require grad
                wrt = step.differentiable() if step.train else []
                loss = step.loss(output) if step.train else None
            if loss is not None:
                if not loss.requires_grad:
                    raise TrainingError("mode='train': the loss does not require grad; check requires_grad")
                self._backward = True
                try:
                    differentiate(loss, wrt, step.model)
                except FAILURES as e:
                    raise backward_error(e) from e

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        if isinstance(func, HigherOrderOperator):
            raise UnsupportedHigherOrder(func.name())  # type: ignore[no-untyped-call]  # torch leaves it unannotated
        kwargs = kwargs or {}
        if self._backward:
            out = func(*args, **kwargs)
            # a module's forward run again by the backward pass (torch.utils.checkpoint) is priced
            # in that module; any other backward operator in the scope of its node
            scope, within = (self.scopes.current, self.within) if self.scopes.current != ROOT else _running_node_tag()
            self._record(backward_records, func, args, kwargs, out, scope, within)
            return out
        scope, within = self.scopes.current, self.within
        if self._train:
            exclude = dispatch_exclude_set() - self._autograd
            with ForceDispatchKeyGuard(dispatch_include_set(), exclude):
                out = func(*args, **kwargs)
            self.tag(out, (scope, within))
        elif self._compute is not None:
            out = self._compute(func, args, kwargs, schema(func).number)
        else:
            out = func(*args, **kwargs)
        self._record(forward_records, func, args, kwargs, out, scope, within)
        return out

    def _record(
        self,
        normalize: Callable[[str, list[Any], list[Any]], list[Record]],
        func: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        out: Any,
        scope: Scope,
        within: tuple[str, ...],
    ) -> None:
        s = schema(func)
        records = normalize(s.name, bind(s, args, kwargs), outputs_of(s, out))
        spec = self._spec
        for kind, ins, outs in records:
            call = OpCall(kind, tuple(map(spec, ins)), tuple(map(spec, outs)), scope, within=within)
            if self._sparse:  # no cost on a model of dense tensors
                refuse_sparse(call, self._sparse)
            self.calls.append(call)

    def tag(self, out: Any, tag: Tag) -> None:
        """Tag the autograd nodes that made ``out`` and are not tagged yet: those just created
        (earlier nodes were tagged by the operators that made them)."""
        pending = [t.grad_fn for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.grad_fn is not None]
        while pending:
            node = pending.pop()
            metadata: dict[str, Any] = node.metadata  # type: ignore[assignment]  # torch's stub makes Node.metadata a method; it is a dict
            if _TAG in metadata:
                continue
            metadata[_TAG] = tag
            pending.extend(n for n, _ in node.next_functions if n is not None and not isinstance(n, AccumulateGrad))

    def _spec(self, value: Any) -> Spec:
        if isinstance(value, torch.Tensor):
            return self.spec_of(value)
        kind = type(value)
        if kind is int or kind is bool or kind is float or value is None:
            found = self._consts.get((kind, value))
            if found is None:
                found = self._consts[(kind, value)] = Const(value)
            return found
        if isinstance(value, (TensorSpec, Const, ListSpec)):
            return value
        if isinstance(value, (list, tuple)):
            items = tuple(map(self._spec, value))
            values = [i.value for i in items if isinstance(i, Const)]
            if len(values) == len(items):
                return Const(tuple(values))
            return ListSpec(items)
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return Const(None, known=False)  # a size only known at run time, as jit records it
        return Const(jit_constant(value))

    def _new_id(self) -> int:
        uid = self.next_id
        self.next_id += 1
        return uid

    def _shape_spec(self, t: ShapeTensor) -> TensorSpec:
        spec = t.spec = self.meta_spec(t.meta)
        return spec

    def meta_spec(self, meta: Meta) -> TensorSpec:
        """The spec of a new shape-only value."""
        return self.fresh_spec(meta.shape, self._dtype(meta.dtype))

    def fresh_spec(self, shape: tuple[int, ...], dtype: str) -> TensorSpec:
        """The spec of a new value (one a replayed module call made)."""
        return TensorSpec(shape, dtype, None, self._new_id())

    def known_spec(self, t: torch.Tensor) -> TensorSpec | None:
        """``t``'s spec if it was recorded already, without recording it."""
        if type(t) is ShapeTensor:
            return t.spec
        found = self._state_specs.get(id(t))
        if found is not None or id(t) in self._names:
            return found
        uid = self._ids.get(t)  # type: ignore[no-untyped-call]  # torch leaves WeakIdKeyDictionary unannotated
        return None if uid is None else TensorSpec(tuple(t.shape), self._dtype(t.dtype), None, uid)

    def spec_of(self, t: torch.Tensor) -> TensorSpec:
        """``t``'s spec, recording it the first time."""
        if type(t) is ShapeTensor:
            return t.spec if t.spec is not None else self._shape_spec(t)
        name = self._names.get(id(t))
        if name is not None:  # a parameter or buffer: alive all along, so its id is its own
            spec = self._state_specs.get(id(t))
            if spec is None:
                spec = self._state_specs[id(t)] = TensorSpec(tuple(t.shape), self._dtype(t.dtype), name, self._new_id())
                if t.layout is not torch.strided:
                    self._sparse[spec.id] = f"{tensor_description(t)} ({name!r})"  # type: ignore[index]
            return spec
        uid = self._ids.get(t)  # type: ignore[no-untyped-call]  # torch leaves WeakIdKeyDictionary unannotated
        if uid is None:
            uid = self._ids[t] = self._new_id()
            if t.layout is not torch.strided:  # looked at once per tensor
                self._sparse[uid] = tensor_description(t)
        return TensorSpec(tuple(t.shape), self._dtype(t.dtype), None, uid)

    def _dtype(self, dtype: torch.dtype) -> str:
        name = self._dtypes.get(dtype)
        if name is None:
            name = self._dtypes[dtype] = str(dtype).removeprefix("torch.")
        return name


def _running_node_tag() -> Tag:
    """The tag of the autograd node the backward pass is running (the root scope outside one)."""
    node = current_autograd_node()
    if node is None:
        return ROOT, ()
    metadata: dict[str, Any] = node.metadata
    tag: Tag | None = metadata.get(_TAG)
    return tag if tag is not None else (ROOT, ())
