"""Per-operator cost formulas. Importing this package fills the registries."""

from . import (  # noqa: F401  (registration side effects)
    activations,
    attention,
    backward,
    conv,
    dispatch_ops,
    einsum,
    elementwise,
    embedding,
    fast_paths,
    fold,
    loss,
    matmul,
    memory,
    nonlinearity,
    norm,
    pool,
    reduction,
    resize,
    rnn,
    softmax,
    tv_ops,
    zero_cost,
)
from .backward import FVCORE_IGNORED_BACKWARD
from .registry import ACTIVATIONS, FLOPS, MEMORY, Handle, Registry, spec_handle
from .zero_cost import FVCORE_IGNORED

__all__ = [
    "ACTIVATIONS",
    "FLOPS",
    "FVCORE_IGNORED",
    "FVCORE_IGNORED_BACKWARD",
    "MEMORY",
    "Handle",
    "Registry",
    "spec_handle",
]
