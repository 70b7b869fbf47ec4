"""torch's higher-order operators (``torch.cond``, ``torch.while_loop``, ``scan``, ``flex_attention``'s
operator) met in a forward, refused by name with what opcount traces instead.

A higher-order operator takes functions (a condition's branches, a loop's body) and runs them
inside itself; torch executes one in eager mode by compiling it with torch.compile. Neither tracer
can follow that: the dispatch tracer's mode receives the operator whole, with its functions as
arguments (torch then says only that no rule is registered for the mode, naming it by its object's
address), and torch.jit tracing cannot trace the compiled call (torch's message speaks of FX and
dynamo). Both are turned into one :class:`ControlFlowError` naming the operator and the module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..errors import TraceError

_FOLDER = f"{os.sep}_higher_order_ops{os.sep}"  # where torch defines its higher-order operators
_HELPERS = ("utils.py", "_invoke_quant.py")  # torch's shared code there, not an operator's own


class ControlFlowError(TraceError):
    """A forward called a higher-order operator (``torch.cond``, ``torch.while_loop``), which
    neither tracer follows; the message names it, the module, and what to write instead."""


class UnsupportedHigherOrder(Exception):
    """Raised by the dispatch tracer's mode when a higher-order operator reaches it, inside the
    forward; the tracer adds the module path (:meth:`HigherOrder.error`)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"higher-order operator {name!r}")
        self.name = name


@dataclass(frozen=True)
class HigherOrder:
    """A higher-order operator a forward called: its name in torch (``cond``, ``while_loop``)."""

    name: str

    def error(self, path: str, tracer: str) -> ControlFlowError:
        """The error for ``path`` (``module 'x' (Cond)``), ``tracer`` the words after it."""
        public = f" (torch.{self.name})" if callable(getattr(torch, self.name, None)) else ""
        return ControlFlowError(
            f"could not trace {path}{tracer}: operator {self.name!r}{public} is a higher-order operator, control "
            "flow that takes functions and runs them inside itself, which opcount does not trace: it prices the "
            "operators one forward runs. Hint: write it as Python control flow (if, for, while): the jit tracer "
            "records the branch the given inputs take, the dispatch tracer on real tensors every operator that runs."
        )


def higher_order_on_traceback(e: BaseException) -> HigherOrder | None:
    """The higher-order operator ``e`` was raised in, if any: the dispatch mode's refusal, or the
    outermost frame of one of torch's higher-order operators on its traceback (torch.jit tracing
    fails inside the compiled call the operator makes)."""
    if isinstance(e, UnsupportedHigherOrder):
        return HigherOrder(e.name)
    if isinstance(e.__cause__, UnsupportedHigherOrder):
        return HigherOrder(e.__cause__.name)
    found = None
    tb = e.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if _FOLDER in code.co_filename and not code.co_filename.endswith(_HELPERS):
            found = HigherOrder(code.co_name)
            break  # the outermost: the operator the forward called, not one its body called
        tb = tb.tb_next
    return found
