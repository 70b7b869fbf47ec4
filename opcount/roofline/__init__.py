"""Speed-of-light latency: the roofline per operator call, operator, module and model (AMAIX).

Each operator call is a *layer* (AMAIX's task): it does ``flops`` operations and moves ``bytes``
to and from main memory on one compute unit, so it takes at least

    time = max(flops / peak(unit, dtype), bytes / bandwidth)

and the model takes the sum over its layers (no overlap between layers, no launch overhead).

Conventions
-----------
- **2 FLOPs per multiply-add.** Hardware peaks are quoted that way (a tensor core's "989 TFLOPS"
  counts the multiply and the add), so the roofline always counts a multiply-add as 2 flops,
  whatever ``FlopCountAnalysis``' default (1) is. Other operators count as their flop handles
  say (an add or a ReLU: 1 per element).
- **Handles.** The flops come from a :class:`~opcount.analysis.FlopCountAnalysis`: the one
  passed as ``model`` (its preset and ``set_op_handle`` overrides price the compute), else the
  default preset's. A handle marked ``macs`` counts multiply-adds (its result, whatever the
  analysis' ``flops_per_mac``, is doubled); any other handle, a plain callable or a
  ``spec_handle`` included, is taken as plain flops, as it returns them
  (``spec_handle(fn, macs=True)`` marks a user's formula as multiply-adds).
- **Bytes** come from :class:`~opcount.memory.MemoryTrafficAnalysis` (read once, write once,
  views free); ``fuse=True`` and ``resident_params=True`` are its options.
- **dtype.** The model is traced in its own dtype (usually float32). ``dtype=`` says what it
  would run in: floating-point tensors' bytes are scaled by ``itemsize(dtype) / itemsize(traced)``
  (integer tensors such as indices keep their size) and the peaks of that dtype are used. An 8-bit
  float runs in the device's own FP8 encoding (``float8_e4m3fn`` as ``float8_e4m3fnuz`` on an
  MI300X); ``mxfp4`` and ``nvfp4`` (block-scaled, scales in the bytes) run their multiply-adds on a
  tensor unit that lists them, and are refused on a device that does not.
- **Units.** Multiply-add operators (conv, matmul family, einsum, attention: the handles marked
  ``macs``) run on ``"tensor"`` when the hardware lists a tensor peak for the dtype (float32 may
  run as TF32 with ``allow_tf32=True``); everything else, and multiply-adds without a tensor peak,
  run on ``"vector"``. A dtype the vector unit does not list runs at its float32 rate.
  ``unit=callable(OpCall) -> name | None`` overrides the mapping (AMAIX's ``map``).

AMAIX refinements
-----------------
- ``scale_ops``, ``scale_ifmap``, ``scale_weight``, ``scale_ofmap``: multiply a layer's flops, its
  activation reads (ifmap), its parameter reads (weight) and its writes (ofmap). Each is a
  number, a ``callable(OpCall) -> float``, or a mapping from operator (``"conv"``,
  ``"aten::addmm"``, or ``"*"`` for the rest) to either. :func:`nvdla_scale_ops` is AMAIX's
  utilization factor ceil(c/Tc) ceil(k/Tk) Tc Tk / (c k) (dark operations of a Tc x Tk MAC array);
  a training step's ``convolution_backward`` gets the mean over its two gradient products.
- ``pipeline=[["conv1", "bn1", "relu"], ...]``: each group of modules runs as a layer pipeline;
  its time is the largest member time (fill and drain ignored). The dominant member keeps its
  layers' times; the others are hidden (effective time 0), so module times still sum to the total.
- ``fuse=[["conv1", "bn1", "relu"], ...]``: within each group, a tensor produced by one member is
  not read back from memory by the others, and is not written at all when nobody outside the
  group reads it. ``fuse=True`` fuses every elementwise epilogue into its producer instead.

Modules
-------
:mod:`~opcount.roofline.report` holds the results (:class:`Layer`, :class:`LayerTime`,
:class:`Summary`, :class:`RooflineReport` and its tables); :mod:`~opcount.roofline.model` the
AMAIX model (:func:`speed_of_light`, pipelining, the scaling factors);
:mod:`~opcount.roofline.build` the layers of a traced model (:func:`roofline`,
:func:`fuse_modules`); :mod:`~opcount.roofline.split` the call priced as two layers
(``convolution_backward``'s bias gradient); :mod:`~opcount.roofline.columns` the report columns
it registers.
"""

from .._callable_module import make_callable

# Importing the columns module registers the time, time_share, bound and unit report columns.
from . import columns as columns
from .build import Source as Source
from .build import fuse_modules as fuse_modules
from .build import roofline
from .model import CONV_TRANSPOSED as CONV_TRANSPOSED
from .model import FLOPS_PER_MAC, mac_array_scale, nvdla_scale_ops, speed_of_light
from .model import Groups as Groups
from .model import Scale as Scale
from .model import ScaleFn as ScaleFn
from .model import conv_backward_channels as conv_backward_channels
from .model import gemm_channels as gemm_channels
from .report import BOUNDS as BOUNDS
from .report import Layer, LayerTime, RooflineReport, Summary

__all__ = [
    "FLOPS_PER_MAC",
    "Layer",
    "LayerTime",
    "RooflineReport",
    "Summary",
    "mac_array_scale",
    "nvdla_scale_ops",
    "roofline",
    "speed_of_light",
]

make_callable(__name__, roofline)
