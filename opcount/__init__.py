"""opcount: what a PyTorch model costs, operator by operator and module by module."""

from .analysis import ActivationCountAnalysis, FlopCountAnalysis, JitModelAnalysis
from .counts import Cost
from .errors import (
    HandleError,
    OpcountError,
    OpcountKeyError,
    OpcountTypeError,
    OpcountValueError,
    TorchInternalsError,
    TraceError,
)
from .functions import activation_count, flop_count
from .handles import Handle, spec_handle
from .hardware import Hardware, UnknownHardwareError, hardware
from .ir import Const, ListSpec, OpCall, TensorSpec
from .memory import Access, MemoryTrafficAnalysis, Traffic, arithmetic_intensity, module_intensity
from .profile import ProfileError, ProfileReport, ProfileRow, profile
from .report import flop_count_str, flop_count_table, parameter_count, parameter_count_table
from .roofline import Layer, RooflineReport, mac_array_scale, nvdla_scale_ops, roofline, speed_of_light
from .sparsity import SparseSupport, Sparsity, SparsityReport, prune, sparsity_roofline
from .tracers.meta import TensorShape
from .tracing import Trace, trace

__all__ = [
    # analyses and their building blocks
    "ActivationCountAnalysis",
    "Const",
    "Cost",
    "FlopCountAnalysis",
    "Handle",
    "HandleError",
    "JitModelAnalysis",
    "ListSpec",
    "MemoryTrafficAnalysis",
    "OpCall",
    "OpcountError",
    "OpcountKeyError",
    "OpcountTypeError",
    "OpcountValueError",
    "TensorShape",
    "TensorSpec",
    "TorchInternalsError",
    "TraceError",
    "spec_handle",
    # one trace, analyzed any number of ways
    "Trace",
    "trace",
    # fvcore's one-call functions
    "activation_count",
    "flop_count",
    # reports (fvcore-compatible printers; opcount.report has the rest)
    "flop_count_str",
    "flop_count_table",
    "parameter_count",
    "parameter_count_table",
    # bytes and arithmetic intensity
    "Access",
    "Traffic",
    "arithmetic_intensity",
    "module_intensity",
    # roofline (opcount.plot holds the charts; it imports matplotlib on use)
    "Hardware",
    "Layer",
    "RooflineReport",
    "UnknownHardwareError",
    "hardware",
    "mac_array_scale",
    "nvdla_scale_ops",
    "roofline",
    "speed_of_light",
    # measured beside predicted
    "ProfileError",
    "ProfileReport",
    "ProfileRow",
    "profile",
    # sparsity roofline (opcount.sparsity.plot holds its charts)
    "SparseSupport",
    "Sparsity",
    "SparsityReport",
    "prune",
    "sparsity_roofline",
]
__version__ = "0.1.0"
