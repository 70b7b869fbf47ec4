"""Tracers: run the model once and emit :class:`opcount.ir.OpCall` records."""

from .dispatch import trace_dispatch
from .jit import Recording, trace_jit
from .meta import TensorShape

__all__ = ["Recording", "TensorShape", "trace_dispatch", "trace_jit"]
