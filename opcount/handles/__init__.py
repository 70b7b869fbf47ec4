"""Per-operator cost formulas. Importing this package fills the registries."""

from . import conv, matmul, norm, pool, resize, zero_cost  # noqa: F401  (registration side effects)
from .registry import ACTIVATIONS, FLOPS, Handle, Registry, spec_handle
from .zero_cost import FVCORE_IGNORED

__all__ = ["ACTIVATIONS", "FLOPS", "FVCORE_IGNORED", "Handle", "Registry", "spec_handle"]
