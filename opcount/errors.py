"""Errors raised by opcount, each naming what went wrong and where.

The hierarchy (classes marked * are defined beside the code that raises them)::

    RuntimeError
    └── OpcountError                     every error opcount raises on purpose
        ├── OpcountValueError (ValueError)   a wrong value: the argument and the value
        │   ├── SparseTensorError*           a sparse tensor where formulas price dense ones (opcount.tracers.structure)
        │   ├── WeightAssignmentError*       a weight format or PATTERN=FORMAT no weight takes (opcount.llm.precision.assignments)
        │   └── TrainingError*               a training step that cannot run (opcount.tracers.training)
        │       └── LossFnError*             the loss function failed or returned no scalar
        ├── OpcountTypeError (TypeError)     a wrong type: the argument and the type
        ├── OpcountKeyError (KeyError)       a name that is not there: a module, a peak
        ├── TraceError                       the model could not be traced: module path and cause
        │   ├── BackwardError*               the backward pass failed (opcount.tracers.training)
        │   ├── OtherThreadError*            the model ran in another thread, or a wait with no end (opcount.tracers.patching)
        │   ├── ControlFlowError*            torch.cond, torch.while_loop: higher-order operators (opcount.tracers.control_flow)
        │   └── DeferredOutputError*         a forward returned a generator or coroutine (opcount.tracers.structure)
        ├── HandleError                      a cost formula failed: operator, module and shapes
        ├── TorchInternalsError              the installed torch lacks a private internal opcount uses
        ├── UnknownHardwareError* (LookupError)  no preset or file of that name (opcount.hardware.lookup)
        ├── CalibrationError*                measuring this machine failed (opcount.hardware.calibrate)
        └── ProfileError*                    measuring the model failed (opcount.profiling.runner)

The command line turns each into one line and exit status 2.
"""

from __future__ import annotations


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
