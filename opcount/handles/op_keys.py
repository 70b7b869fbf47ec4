"""Operator keys: the names results use for an operator kind, opcount's and fvcore's.

opcount drops the namespace (``aten::addmm`` -> ``addmm``) and names a custom autograd Function
by its class (``prim::PythonOp.MyFn`` -> ``MyFn``); fvcore keeps ``PythonOp.MyFn`` and reports
every scripted function call as plain ``CallFunction``. A custom Function's or scripted
function's kind also answers to its family's name, where a handle may be set for all of them.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=4096)
def op_key(kind: str) -> str:
    """Result key of an operator kind: namespace dropped, custom Functions by class name."""
    if kind.startswith("prim::PythonOp."):
        return kind[len("prim::PythonOp.") :]
    return kind.split("::", 1)[-1]


# The jit tracer names a custom autograd Function ``prim::PythonOp.MyFn`` and a scripted function
# call ``prim::CallFunction.<qualified name>``; each kind also answers to its family's name.
_FAMILIES = ("prim::PythonOp", "prim::CallFunction")


def family(kind: str) -> str:
    """The family of a custom Function or scripted-function kind (``prim::PythonOp``,
    ``prim::CallFunction``), else ``""``."""
    head = kind.split(".", 1)[0]
    return head if head in _FAMILIES and head != kind else ""


def fvcore_kind(kind: str) -> str:
    """fvcore's name for an operator kind: a scripted function call is plain ``prim::CallFunction``
    (fvcore keeps ``prim::PythonOp.MyFn``)."""
    return "prim::CallFunction" if family(kind) == "prim::CallFunction" else kind


@functools.lru_cache(maxsize=4096)
def fvcore_op_key(kind: str) -> str:
    """fvcore's result key: its kind without the namespace (``PythonOp.MyFn``, ``CallFunction``)."""
    return fvcore_kind(kind).split("::", 1)[-1]
