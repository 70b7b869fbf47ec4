"""opcount: what a PyTorch model costs, operator by operator and module by module."""

from typing import TYPE_CHECKING

from ._version import __version__ as __version__
from .analysis import ActivationCountAnalysis, FlopCountAnalysis, JitModelAnalysis
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
from .handles.counts import Cost
from .hardware import Hardware, UnknownHardwareError
from .ir import Const, ListSpec, OpCall, TensorSpec
from .memory import Access, MemoryTrafficAnalysis, Traffic, arithmetic_intensity, module_intensity
from .profiling import ProfileError, ProfileReport, ProfileRow, profile
from .report import flop_count_str, flop_count_table, parameter_count, parameter_count_table
from .roofline import Layer, RooflineReport, mac_array_scale, nvdla_scale_ops, speed_of_light
from .sparsity import SparseSupport, Sparsity, SparsityReport, prune, sparsity_roofline
from .tracers.meta import TensorShape
from .tracing import Trace, trace

if TYPE_CHECKING:
    # At run time ``opcount.hardware`` and ``opcount.roofline`` are the packages, which call these when called.
    from .hardware.lookup import hardware as hardware
    from .roofline.build import roofline as roofline

__all__ = [  # noqa: RUF022 -- grouped by topic, each group under its comment
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
    # roofline (opcount.roofline.plot holds the charts; it imports matplotlib on use)
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
