"""opcount: what a PyTorch model costs, operator by operator and module by module."""

from .analysis import FlopCountAnalysis, JitModelAnalysis
from .errors import HandleError, OpcountError, TraceError
from .handles import Handle, spec_handle
from .ir import Const, ListSpec, OpCall, TensorSpec

__all__ = [
    "Const", "FlopCountAnalysis", "Handle", "HandleError", "JitModelAnalysis", "ListSpec", "OpCall",
    "OpcountError", "TensorSpec", "TraceError", "spec_handle",
]
__version__ = "0.1.0"
