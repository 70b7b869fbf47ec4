"""Tracers: run the model once and emit :class:`opcount.ir.OpCall` records."""

from .jit import Trace, trace_jit

__all__ = ["Trace", "trace_jit"]
