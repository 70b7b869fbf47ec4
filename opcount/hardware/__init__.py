"""The hardware model: devices by name (:mod:`~opcount.hardware.lookup`), the record
(:mod:`~opcount.hardware.spec`), datasheet figures (:mod:`~opcount.hardware.presets`), this machine
measured (:mod:`~opcount.hardware.calibrate`) and the sparse patterns a unit runs
(:mod:`~opcount.hardware.sparse_support`).

``opcount.hardware("h100-sxm")`` calls :func:`~opcount.hardware.lookup.hardware`.
"""

from .._callable_module import make_callable
from .lookup import LOCAL, PRESETS, UnknownHardwareError, hardware
from .sparse_support import SparseSupport
from .spec import TENSOR, VECTOR, DType, Hardware, dtype_name

__all__ = [
    "LOCAL",
    "PRESETS",
    "TENSOR",
    "VECTOR",
    "DType",
    "Hardware",
    "SparseSupport",
    "UnknownHardwareError",
    "dtype_name",
    "hardware",
]

make_callable(__name__, hardware)
