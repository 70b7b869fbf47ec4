"""The analyses: lazy, cached, with fvcore's query surface.

``JitModelAnalysis`` traces the model once (on the first query), applies the operator
handles to every recorded operator and rolls the results up by module and operator.
Changing handles re-aggregates without tracing again.
"""

from __future__ import annotations

import copy as _copy
import logging
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, TypeVar

import torch
from torch import nn

from ._runtime import gc_paused
from .errors import OpcountTypeError, OpcountValueError
from .handles import ACTIVATIONS, FVCORE_IGNORED, Handle
from .handles.attention import sdpa_handle
from .handles.backward import unmasked_attention_backward
from .handles.invoke import apply_handle, invoke_handle
from .handles.op_keys import family, fvcore_kind, fvcore_op_key, op_key
from .handles.presets import flop_preset, macs_only
from .ir import OpCall
from .messages import brief_list
from .rollup import MODES as ANCESTOR_MODES
from .rollup import copied, roll_up
from .scopes import ModuleTree
from .tracing import Trace, check_options, run

logger = logging.getLogger(__name__)

T = TypeVar("T", bound="JitModelAnalysis")
AnyHandle = Callable[..., Any]
K = TypeVar("K", bound=Hashable)

WARN_MODES = ("all", "no_tracer_warning", "none")

_NOTHING: Counter[str] = Counter()  # an ignored call's value; never mutated
NO_INPUTS: Any = object()  # the default of ``inputs``: not given (an analysis of a Trace)

# Modules that never run arithmetic of their own: not worth an "uncalled" warning.
_NO_FORWARD = (nn.ModuleList, nn.ModuleDict, nn.Module, nn.Identity)


@dataclass
class Statistics:
    counts: dict[str, Counter[str]]
    unsupported_ops: dict[str, Counter[str]]
    uncalled_mods: set[str]


class JitModelAnalysis:
    """Per-module statistics from one traced forward pass (fvcore.nn.JitModelAnalysis compatible).

    ``model`` is a module, traced on the first query, or a ready :class:`~opcount.Trace`
    (:func:`opcount.trace`), analyzed without running the model; a Trace carries its inputs and
    tracer options, so none of them may be given with it.
    ``inputs`` is a tensor, a tuple of positional arguments, or any other single argument
    (e.g. a list of images); ``kwargs`` holds keyword arguments. Both may nest lists, tuples
    and dicts of tensors, :class:`~opcount.TensorShape` placeholders and non-tensor constants.

    ``tracer``: ``"jit"`` (default, torch.jit tracing) or ``"dispatch"`` (a dispatch mode, see
    docs/dispatch.md), which alone takes ``mode`` (``"eval"``: the forward pass; ``"train"``:
    forward and backward, loss ``loss_fn(output)``, the output's ``"loss"`` or the sum of the outputs) and ``device``
    (``"meta"``: no weights touched, no arithmetic run).
    """

    def __init__(
        self,
        model: nn.Module | Trace,
        inputs: Any = NO_INPUTS,
        kwargs: Mapping[str, Any] | None = None,
        *,
        tracer: str | None = None,
        mode: str | None = None,
        loss_fn: Callable[[Any], torch.Tensor] | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        self._trace: Trace | None = None
        self._device: torch.device | str | None
        if isinstance(model, Trace):
            given = {"inputs": inputs is not NO_INPUTS, "kwargs": kwargs is not None, "tracer": tracer is not None}
            given |= {"mode": mode is not None, "loss_fn": loss_fn is not None, "device": device is not None}
            if any(given.values()):
                raise OpcountTypeError(
                    f"{type(self).__name__} of a Trace takes no {', '.join(k for k, v in given.items() if v)}: "
                    "the Trace was made with them; pass them to opcount.trace()"
                )
            self._trace = model
            self._tracer, self._mode, self._loss_fn, self._device = model.tracer, model.mode, None, model.device
            self._model, self._tree = model.model, model.tree
            self._inputs, self._kwargs = model.inputs, model.kwargs
        elif isinstance(model, nn.Module):
            if inputs is NO_INPUTS:
                raise OpcountTypeError(
                    f"{type(self).__name__} needs the model's inputs (or an opcount.Trace instead of a model)"
                )
            tracer, mode = tracer or "jit", mode or "eval"
            check_options(tracer, mode, loss_fn, device)
            self._tracer, self._mode, self._loss_fn, self._device = tracer, mode, loss_fn, device
            self._model = model
            self._inputs = inputs
            if kwargs is not None and not isinstance(kwargs, Mapping):
                raise OpcountTypeError(
                    f"kwargs must be a mapping of argument names to values, got {type(kwargs).__name__}"
                )
            self._kwargs = dict(kwargs) if kwargs is not None else None
            self._tree = ModuleTree(model)
        else:
            raise OpcountTypeError(f"model must be a torch.nn.Module or an opcount.Trace, got {type(model).__name__}")
        self._handles: dict[str, AnyHandle] = {}
        self._base_ignored: frozenset[str] = FVCORE_IGNORED  # fvcore's JitModelAnalysis ignores these
        self._ignored: set[str] = set(self._base_ignored)
        self._fvcore_names = False  # result keys: opcount's (MyFn, CallFunction.fn) or fvcore's
        self._flops_per_mac = 1
        self._stats: Statistics | None = None
        self._warn_unsupported = True
        self._warn_uncalled = True
        self._warn_trace = "no_tracer_warning"
        self._ancestor_mode = "owner"

    @property
    def model(self) -> nn.Module:
        """The analyzed model."""
        return self._model

    @property
    def module_tree(self) -> ModuleTree:
        """The model's module tree: canonical names, owners and aliases."""
        return self._tree

    @property
    def inputs(self) -> Any:
        """The positional inputs the model is traced on, as given."""
        return self._inputs

    @property
    def kwargs(self) -> dict[str, Any] | None:
        """The keyword arguments the model is traced with, as given."""
        return self._kwargs

    @property
    def tracer(self) -> str:
        """``"jit"`` or ``"dispatch"``."""
        return self._tracer

    @property
    def mode(self) -> str:
        """``"eval"`` (the forward pass) or ``"train"`` (forward and backward)."""
        return self._mode

    @property
    def device(self) -> torch.device | str | None:
        """The dispatch tracer's device (``"meta"``: no weights touched), or None."""
        return self._device

    def trace(self) -> Trace:
        """The :class:`~opcount.Trace` analyzed (the model is traced on the first call): another
        analysis of it runs no forward pass of its own."""
        return self._traced()

    # ----- queries -------------------------------------------------------------------------
    # Every query hands out a new container: the caller may change it without changing the
    # analysis (fvcore's return the same types, which callers pop from and add to).
    def total(self, module_name: str = "") -> int:
        """The statistic summed over all operators of ``module_name`` (default: the model)."""
        return sum(self._analyze().counts[self.canonical_module_name(module_name)].values())

    def by_operator(self, module_name: str = "") -> Counter[str]:
        """The statistic of ``module_name`` per operator (a new Counter)."""
        return copied(self._analyze().counts[self.canonical_module_name(module_name)])

    def by_module(self) -> Counter[str]:
        """The statistic of every module (canonical names), summed over operators (a new Counter)."""
        return Counter({name: sum(c.values()) for name, c in self._analyze().counts.items()})

    def by_module_and_operator(self) -> dict[str, Counter[str]]:
        """The statistic of every module per operator (new containers)."""
        return {name: copied(c) for name, c in self._analyze().counts.items()}

    def per_call(self) -> list[tuple[OpCall, Mapping[str, Any] | None]]:
        """Every recorded call in execution order with its statistic (empty when the operator is
        ignored, None when unsupported): the per-layer data a roofline needs."""
        values = ((call, self._value(call)) for call in self._traced().calls)
        return [(call, Counter() if value is _NOTHING else value) for call, value in values]

    def unsupported_ops(self, module_name: str = "") -> Counter[str]:
        """How often each operator without a handle (and not declared free) ran in ``module_name``."""
        return copied(self._analyze().unsupported_ops[self.canonical_module_name(module_name)])

    def uncalled_modules(self) -> set[str]:
        """Modules whose ``__call__`` never ran (unused, or reached through ``.forward()``)."""
        return set(self._analyze().uncalled_mods)

    def canonical_module_name(self, name: str) -> str:
        """The name results use for the module called ``name`` (differs for shared modules)."""
        return self._tree.canonical(name)

    # ----- settings ------------------------------------------------------------------------
    def set_op_handle(self, *args: Any, **kwargs: AnyHandle | None) -> Self:
        """Set or replace handles: ``set_op_handle("aten::mm", fn, "aten::bmm", None)`` or
        ``set_op_handle(**{"aten::mm": fn})``. ``None`` ignores the operator.

        A plain callable is an fvcore handle, called with the node's ``torch._C.Value`` lists;
        wrap a function of :mod:`opcount.ir` specs with :func:`opcount.spec_handle` instead.
        """
        if len(args) % 2:
            raise OpcountTypeError("set_op_handle takes pairs of operator names and handles")
        pairs = {**dict(zip(args[::2], args[1::2], strict=True)), **kwargs}
        for name, handle in pairs.items():
            if not isinstance(name, str) or "::" not in name:
                raise OpcountValueError(f"operator names are qualified like 'aten::mm', got {name!r}")
            if handle is None:
                self._handles.pop(name, None)
                self._ignored.add(name)
            elif callable(handle):
                self._handles[name] = handle
                self._ignored.discard(name)
            else:
                raise OpcountTypeError(f"handle for {name} must be callable or None, got {type(handle).__name__}")
        self._stats = None
        return self

    def clear_op_handles(self) -> Self:
        """Remove every handle; only the explicitly free operators stay ignored."""
        self._handles = {}
        self._ignored = set(self._base_ignored)
        self._stats = None
        return self

    def ancestor_mode(self, mode: str) -> Self:
        """``"owner"``: an operator belongs to the module that ran it and that module's owners by
        name. ``"caller"``: to every module on the call stack when it ran."""
        if mode not in ANCESTOR_MODES:
            raise OpcountValueError(f"unknown ancestor mode {mode!r}; choose 'owner' or 'caller'")
        self._ancestor_mode = mode
        self._stats = None
        return self

    def tracer_warnings(self, mode: str) -> Self:
        """Which warnings tracing may show: ``"all"``, ``"no_tracer_warning"`` (default), ``"none"``."""
        if mode not in WARN_MODES:
            raise OpcountValueError(f"unknown tracer warning mode {mode!r}; choose one of {WARN_MODES}")
        self._warn_trace = mode
        return self

    def unsupported_ops_warnings(self, enabled: bool) -> Self:
        self._warn_unsupported = bool(enabled)
        return self

    def uncalled_modules_warnings(self, enabled: bool) -> Self:
        self._warn_uncalled = bool(enabled)
        return self

    def copy(self, new_model: nn.Module | Trace | None = None, new_inputs: Any = None) -> Self:
        """The same analysis (class and every setting) on a new model and/or new inputs (traced
        as before: an analysis of a Trace traces them as its Trace was), or on another
        :class:`~opcount.Trace` (``new_model``)."""
        new = _copy.copy(self)
        new._handles = dict(self._handles)
        new._ignored = set(self._ignored)
        new._stats = None
        if isinstance(new_model, Trace):
            if new_inputs is not None:
                raise OpcountTypeError("copy() of a Trace takes no new_inputs: the Trace was made with its own")
            new._trace, new._model, new._tree = new_model, new_model.model, new_model.tree
            new._tracer, new._mode, new._loss_fn, new._device = new_model.tracer, new_model.mode, None, new_model.device
            new._inputs, new._kwargs = new_model.inputs, new_model.kwargs
            return new
        if new_model is not None or new_inputs is not None:
            new._trace = None
        if new_model is not None:
            if not isinstance(new_model, nn.Module):
                raise OpcountTypeError(f"new_model must be a torch.nn.Module, got {type(new_model).__name__}")
            new._model = new_model
            new._tree = ModuleTree(new_model)
        if new_inputs is not None:
            new._inputs = new_inputs
        return new

    # ----- the work ------------------------------------------------------------------------
    def _traced(self) -> Trace:
        if self._trace is None:
            # The tree was taken when the analysis was made; the trace runs the model as it is now.
            with gc_paused():  # 17 ms on 4000 modules, 80 ms while the collector runs
                changed = self._tree.changes(self._model)
            if changed:
                raise OpcountValueError(
                    f"the model ({type(self._model).__name__}) changed after this {type(self).__name__} was made "
                    f"and before its first result (modules {changed}): make the analysis after changing the "
                    "model, or call .copy(new_model=model)"
                )
            self._trace = run(
                self._model,
                self._inputs,
                self._kwargs,
                self._tree,
                self._warn_trace,
                tracer=self._tracer,
                mode=self._mode,
                loss_fn=self._loss_fn,
                device=self._device,
            )
        return self._trace

    def _analyze(self) -> Statistics:
        if self._stats is not None:
            return self._stats
        trace = self._traced()
        with gc_paused():
            counts, unsupported = self._aggregate(trace.calls, map(self._value, trace.calls))
        uncalled = set(self._tree.names) - self._called(trace)
        self._stats = Statistics(counts, unsupported, uncalled)
        self._warn(unsupported[""], uncalled)
        return self._stats

    def _called(self, trace: Trace) -> set[str]:
        """Modules an operator ran in; in owner mode also their owners (fvcore's definition,
        so that a ModuleList whose members ran is not reported as uncalled)."""
        if self._ancestor_mode == "caller":
            return set(trace.called)
        return {owner for name in trace.called for owner in self._tree.owners(name)}

    def _value(self, call: OpCall) -> Mapping[str, Any] | None:
        """One call's statistic: None when unsupported, empty when ignored."""
        handle = self._handles.get(call.kind)
        if handle is None:
            if self._is_ignored(call.kind):
                return _NOTHING
            handle = self._family_handle(call.kind)
            if handle is None:
                return None
        return self._apply(handle, call)

    def handle_of(self, kind: str) -> AnyHandle | None:
        """The handle that prices operator ``kind`` here (its own, or its family's), or None
        when the operator is ignored or has no handle."""
        handle = self._handles.get(kind)
        if handle is None and not self._is_ignored(kind):
            handle = self._family_handle(kind)
        return handle

    def _family_handle(self, kind: str) -> AnyHandle | None:
        """The handle set under a custom Function's or scripted function's family name
        (fvcore's ``prim::CallFunction``; ``prim::PythonOp`` for every Function), for a kind
        with no handle of its own and not ignored by name."""
        name = family(kind)
        return self._handles.get(name) if name else None

    def _aggregate(
        self, calls: Sequence[OpCall], values: Iterable[Mapping[K, Any] | None]
    ) -> tuple[dict[str, Counter[K]], dict[str, Counter[str]]]:
        """Roll each call's value (None: unsupported) up to every module it belongs to.

        Subclasses that measure several quantities per call pass composite keys (e.g.
        ``(operator, "read")``) and split the counters afterwards: one walk over the calls.
        """
        pairs = [(call.scope, value) for call, value in zip(calls, values, strict=True)]
        missing = [
            (c.scope, {self._unsupported_key(c): 1}) for c, (_, v) in zip(calls, pairs, strict=True) if v is None
        ]
        counts = roll_up(self._tree, pairs, self._ancestor_mode)
        unsupported = roll_up(self._tree, missing, self._ancestor_mode)
        for counter in counts.values():  # fvcore's Counter arithmetic keeps positive counts only
            for op in [op for op, v in counter.items() if v <= 0]:
                del counter[op]
        return counts, unsupported

    def _unsupported_key(self, call: OpCall) -> str:
        kind = fvcore_kind(call.kind) if self._fvcore_names else call.kind
        return "::".join((*call.within, kind)) if call.within else kind

    def _is_ignored(self, kind: str) -> bool:
        if kind in self._ignored:
            return True
        if not kind.startswith("prim::"):
            return False
        # Other prim:: nodes are graph structure; PythonOp and CallFunction run user code, unless
        # their family is ignored (fvcore ignores ``prim::PythonOp`` for every Function).
        name = family(kind)
        return not name or (name in self._ignored and name not in self._handles)

    def _invoke(self, handle: AnyHandle, call: OpCall) -> tuple[Any, int, str]:
        """Run a handle on one call: (its raw result, the mac scale, the operator key)."""
        return invoke_handle(handle, call, self._flops_per_mac, self._op_key, self._traced)

    def _apply(self, handle: AnyHandle, call: OpCall) -> Mapping[str, Any]:
        return apply_handle(handle, call, self._flops_per_mac, self._op_key, self._traced)

    def _op_key(self, kind: str) -> str:
        return fvcore_op_key(kind) if self._fvcore_names else op_key(kind)

    def _warn(self, unsupported: Counter[str], uncalled: set[str]) -> None:
        if self._warn_unsupported:
            for op, n in sorted(unsupported.items()):
                logger.warning("Unsupported operator %s encountered %d time(s)", op, n)
        if self._warn_uncalled:
            shown = sorted(n for n in uncalled if _own_forward(self._tree.module(n)))
            if shown:  # vit_h_14's 32 out_proj grouped by name; the command reads the names from `extra`
                logger.warning(
                    "These submodules were never called during the trace: %s. They are unused, were reached through "
                    ".forward() or another method, or ran inside their parent's fused call (torch's eval fast paths: "
                    "MultiheadAttention's out_proj, TransformerEncoderLayer's layers); their cost, if any, is in their caller.",
                    brief_list(shown, 200, "uncalled_modules() names them"),
                    extra={"opcount_uncalled": tuple(shown)},
                )


def _own_forward(module: nn.Module) -> bool:  # getattr: a TorchScript module's class raises AttributeError
    return getattr(type(module), "forward", None) not in {m.forward for m in _NO_FORWARD}


class FlopCountAnalysis(JitModelAnalysis):
    """FLOPs per operator and module; a drop-in for ``fvcore.nn.FlopCountAnalysis``.

    ``preset``: ``"default"`` (every formula), ``"fvcore"`` (exactly fvcore's default set, so
    totals equal fvcore's) or ``"macs"`` (multiply-add kinds only).
    ``flops_per_mac``: 1 (fvcore's convention) or 2; scales every multiply-add formula.
    ``causal_attention``: ``"full"`` counts attention as the full query x key product whatever
    the mask, as published tables do; ``"unmasked"`` counts only the pairs a causal
    ``scaled_dot_product_attention`` call keeps.
    ``tracer``, ``mode``, ``loss_fn``, ``device``: how the model is traced (:class:`JitModelAnalysis`).
    """

    def __init__(
        self,
        model: nn.Module | Trace,
        inputs: Any = NO_INPUTS,
        kwargs: Mapping[str, Any] | None = None,
        *,
        preset: str = "default",
        flops_per_mac: int = 1,
        causal_attention: str = "full",
        **trace_options: Any,
    ) -> None:
        super().__init__(model, inputs, kwargs, **trace_options)
        if flops_per_mac not in (1, 2):
            raise OpcountValueError(f"flops_per_mac must be 1 or 2, got {flops_per_mac!r}")
        if causal_attention not in ("full", "unmasked"):
            raise OpcountValueError(f"causal_attention must be 'full' or 'unmasked', got {causal_attention!r}")
        chosen = flop_preset(preset)
        self._preset = preset
        self._flops_per_mac = flops_per_mac
        self._base_ignored = chosen.ignored
        self._ignored = set(chosen.ignored)
        self._handles = dict(chosen.handles)
        self._fvcore_names = preset == "fvcore"
        if causal_attention == "unmasked" and SDPA in self._handles:
            # Published model tables count the full q.k^T product; this counts only the pairs an
            # is_causal=True call keeps, L*(L+1)/2 of L*L.
            causal = Handle(sdpa_handle(causal_unmasked_only=True), ops=(SDPA,), macs=True)
            for op, handle in {SDPA: causal, **unmasked_attention_backward()}.items():
                self._handles[op] = macs_only(handle) if preset == "macs" else handle

    @property
    def flops_per_mac(self) -> int:
        return self._flops_per_mac

    def per_call_at(self, flops_per_mac: int) -> list[tuple[OpCall, Mapping[str, Any] | None]]:
        """:meth:`per_call` with a multiply-add counted ``flops_per_mac`` flops, whatever this
        analysis' own convention (the roofline takes 2); the same trace and handles."""
        if flops_per_mac not in (1, 2):
            raise OpcountValueError(f"flops_per_mac must be 1 or 2, got {flops_per_mac!r}")
        other = self.copy()
        other._flops_per_mac = flops_per_mac
        return other.per_call()

    @property
    def preset(self) -> str:
        """The flop formulas: ``"default"``, ``"fvcore"`` or ``"macs"``."""
        return self._preset


SDPA = "aten::scaled_dot_product_attention"


class ActivationCountAnalysis(JitModelAnalysis):
    """Activations per operator and module; a drop-in for ``fvcore.nn.ActivationCountAnalysis``.

    fvcore's convention: the output elements of convolutions (key ``"conv"``), ``addmm``,
    ``bmm``, ``einsum``, ``matmul`` and ``linear``; fvcore's ignore list is free and any other
    operator is reported as unsupported.
    """

    def __init__(
        self,
        model: nn.Module | Trace,
        inputs: Any = NO_INPUTS,
        kwargs: Mapping[str, Any] | None = None,
        **trace_options: Any,
    ) -> None:
        super().__init__(model, inputs, kwargs, **trace_options)
        self._base_ignored = ACTIVATIONS.zero
        self._ignored = set(ACTIVATIONS.zero)
        self._handles = dict(ACTIVATIONS.handles)
