"""Running a handle on one operator call: its result checked and keyed, its failures named.

A handle is a :class:`~opcount.handles.Handle` (a function of :mod:`opcount.ir` specs, marked
when it counts multiply-adds) or a plain fvcore-style callable of the jit node's
``torch._C.Value`` lists. ``flops_per_mac`` scales a multiply-add handle's count (fvcore's
convention is 1); ``key`` names the result (the operator key, see :mod:`opcount.handles.op_keys`);
``traced`` returns the trace whose jit nodes an fvcore-style handle reads.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..errors import HandleError
from ..ir import OpCall
from ..messages import FAILURES, callable_name, first_line
from ..tracing import Trace
from . import Handle
from .counts import Cost, cost_flops, describe, handle_result

AnyHandle = Callable[..., Any]


def invoke_handle(
    handle: AnyHandle, call: OpCall, flops_per_mac: int, key: Callable[[str], str], traced: Callable[[], Trace]
) -> tuple[Any, int, str]:
    """Run a handle on one call: (its raw result, the mac scale, the operator key).
    Failures are re-raised naming the operator, the module and the input shapes."""
    try:
        if type(handle) is Handle or isinstance(handle, Handle):
            value = handle.fn(call.inputs, call.outputs)
            scale = flops_per_mac if handle.macs else 1
            name = handle.name or key(call.kind)
        else:
            node: Any = traced().node_of(call)
            if node is None:
                raise TypeError(
                    "this handle takes torch._C.Value lists (fvcore style), which only the jit tracer "
                    "has; wrap a function of specs with opcount.spec_handle"
                )
            value = handle(list(node.inputs()), list(node.outputs()))
            scale, name = 1, key(call.kind)
        if call.within:  # inside a custom autograd Function: "MyFn::mm" (MXNet's custom operators)
            name = "::".join((*call.within, name))
    except FAILURES as e:  # sys.exit() in a handle too: the handle's failure, never the caller's exit
        fn = handle.fn if isinstance(handle, Handle) else handle
        raise HandleError(
            f"the handle for {call.kind} ({callable_name(fn)}) failed in module '{call.scope[-1]}' "
            f"on inputs {describe(call.inputs)}: {type(e).__name__}: {first_line(e)}"
        ) from e
    return value, scale, name


def apply_handle(
    handle: AnyHandle, call: OpCall, flops_per_mac: int, key: Callable[[str], str], traced: Callable[[], Trace]
) -> Mapping[str, Any]:
    """The handle's result on one call as counts by operator key: multiply-adds scaled by
    ``flops_per_mac``, a :class:`~opcount.handles.counts.Cost` split into its parts, any other result
    checked by :func:`~opcount.handles.counts.handle_result`."""
    value, scale, name = invoke_handle(handle, call, flops_per_mac, key, traced)
    if type(value) is int and value >= 0:  # the common case, checked without the cost of ABC isinstance
        return {name: value * scale}
    if type(value) is Cost:  # multiply-adds and plain flops apart: only the former are scaled
        value, scale = cost_flops(value, call, flops_per_mac), 1
    return handle_result(value, name, call, scale)
