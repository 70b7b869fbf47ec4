"""Tracers: run the model once and emit :class:`opcount.ir.OpCall` records."""

from .dispatch import trace_dispatch
from .jit import Trace, trace_jit
from .meta import TensorShape

__all__ = ["TensorShape", "Trace", "trace_dispatch", "trace_jit"]
