"""Errors raised by opcount, each naming what went wrong and where."""


class OpcountError(RuntimeError):
    """Base class of opcount's errors."""


class TraceError(OpcountError):
    """The model could not be traced; the message names the module path and the cause."""


class HandleError(OpcountError):
    """A cost formula failed on an operator; the message names the operator, module and shapes."""
