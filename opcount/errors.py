"""Errors raised by opcount, each naming what went wrong and where."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:
    from .scopes import ModuleTree


class OpcountError(RuntimeError):
    """Base class of opcount's errors."""


class OpcountValueError(OpcountError, ValueError):
    """An argument of the right type has a wrong value (an unknown mode, a negative depth, a
    malformed pattern); the message names the argument and the value. A ``ValueError`` too, so
    ``except ValueError`` keeps working."""


class OpcountTypeError(OpcountError, TypeError):
    """An argument has the wrong type (a model that is not a module, a handle that is not
    callable); the message names the argument and the type. A ``TypeError`` too, so ``except
    TypeError`` keeps working."""


class OpcountKeyError(OpcountError, KeyError):
    """A name that is not there: a module the analyzed model lacks, a peak the hardware lacks.
    A ``KeyError`` too, as the lookups of fvcore's analyses raise."""

    def __str__(self) -> str:  # KeyError's own would print the message in quotes
        return str(self.args[0]) if self.args else ""


class TraceError(OpcountError):
    """The model could not be traced; the message names the module path and the cause."""


class TorchInternalsError(OpcountError):
    """The installed torch lacks a private internal opcount uses; the message names the torch
    version and the internal (see :mod:`opcount.torch_internals`)."""


class HandleError(OpcountError):
    """A cost formula failed on an operator; the message names the operator, module and shapes."""


def failure_site(model: nn.Module, tree: ModuleTree, e: BaseException) -> str:
    """Where a forward pass failed: the innermost module of ``model`` whose ``forward`` is on the
    exception's traceback (``module 'body.2' (Linear)``), else ``the model (ResNet)``."""
    where = None
    tb = e.__traceback__
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module) and tree.has(owner):
            where = tree.name_of(owner)
        tb = tb.tb_next
    if where:
        return f"module '{where}' ({type(tree.module(where)).__name__})"
    return f"the model ({type(model).__name__})"


def one_line(e: BaseException) -> str:
    """An exception as one line, its type first: ``ValueError: bad size``."""
    text = str(e).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(e).__name__}: {first}" if first else type(e).__name__


def first_line(e: BaseException, default: str = "") -> str:
    """The first line of an exception's message, or ``default`` when it has none."""
    text = str(e).strip()
    return text.splitlines()[0] if text else default
