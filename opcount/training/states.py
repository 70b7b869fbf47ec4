"""Model states per device in training: the weights, their gradients and the optimizer's states,
by optimizer, mixed precision and ZeRO stage (Rajbhandari et al. 2020, "ZeRO: Memory
Optimizations Toward Training Trillion Parameter Models").

Conventions, per parameter (``w``: the bytes of the weight dtype, 2 for bfloat16/float16):

- the weights: ``w``; the gradients: ``w`` (computed in the weights' dtype);
- mixed precision (weights narrower than float32) keeps a float32 master copy of the weights
  with the optimizer: 4 bytes;
- the optimizer's states in float32, per optimizer (:data:`OPTIMIZERS`): Adam/AdamW the first
  and second moments (8), SGD none, SGD with momentum and Lion one buffer (4), Adafactor
  (Shazeer and Stern 2018, no first moment, its default) a factored second moment: a row and a
  column vector per matrix (``rows + cols`` per ``rows x cols``; a vector keeps a full one).

Mixed-precision Adam is therefore ``2 + 2 + 12 = 16`` bytes per parameter, the ZeRO paper's
``K = 12``. ZeRO over ``N`` data-parallel devices partitions, per stage: 1 the optimizer
states (with the master copy), 2 also the gradients, 3 also the weights: ``2 + 2 + 12/N``,
``2 + 14/N``, ``16/N`` bytes per parameter. A share that does not divide evenly is rounded up:
the device holding the most.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from torch import nn

from ..errors import OpcountValueError

# bytes of float32 state per parameter element, for optimizers whose states do not depend on shapes
_PER_ELEMENT = {"adamw": 8, "adam": 8, "sgd": 0, "sgd-momentum": 4, "lion": 4}
OPTIMIZERS = (*_PER_ELEMENT, "adafactor")
ZERO_STAGES = (0, 1, 2, 3)
MASTER_BYTES = 4  # the float32 copy of the weights mixed precision keeps


def optimizer_state_bytes(optimizer: str, shapes: Iterable[tuple[int, ...]]) -> int:
    """Bytes of the optimizer's own states (master copy excluded) for parameters of ``shapes``."""
    if optimizer in _PER_ELEMENT:
        return _PER_ELEMENT[optimizer] * sum(math.prod(s) for s in shapes)
    if optimizer == "adafactor":
        # a [..., rows, cols] tensor keeps a row and a column vector per matrix; a vector its full second moment
        return 4 * sum(math.prod(s[:-2]) * (s[-2] + s[-1]) if len(s) >= 2 else math.prod(s) for s in shapes)
    raise OpcountValueError(f"unknown optimizer {optimizer!r}; choose {', '.join(OPTIMIZERS)}")


@dataclass(frozen=True)
class ModelStates:
    """Bytes per device of the weights, the gradients and the optimizer (its states and, in mixed
    precision, the float32 master weights), under ``zero`` over ``dp`` devices."""

    weights: int
    gradients: int
    optimizer: int
    zero: int
    dp: int

    @property
    def total(self) -> int:
        return self.weights + self.gradients + self.optimizer


def model_states(
    shapes: list[tuple[int, ...]],
    weight_bytes: int,
    *,
    optimizer: str = "adamw",
    weight_itemsize: float = 2,
    zero: int = 0,
    dp: int = 1,
) -> ModelStates:
    """The model states per device. ``shapes``: the trainable parameters' shapes (shared ones
    once); ``weight_bytes``: their bytes as stored; ``weight_itemsize``: bytes per weight (below
    4: mixed precision, with a float32 master copy)."""
    if zero not in ZERO_STAGES:
        raise OpcountValueError(f"zero must be one of 0, 1, 2, 3, got {zero!r}")
    if not isinstance(dp, int) or isinstance(dp, bool) or dp < 1:
        raise OpcountValueError(f"dp must be an integer >= 1, got {dp!r}")
    if weight_itemsize not in (2, 4):
        raise OpcountValueError(
            f"training needs float32, bfloat16 or float16 weights, got {weight_itemsize} bytes each"
        )
    elements = sum(math.prod(s) for s in shapes)
    gradients = elements * int(weight_itemsize)
    master = MASTER_BYTES * elements if weight_itemsize < MASTER_BYTES else 0
    optimizer_bytes = optimizer_state_bytes(optimizer, shapes) + master

    def share(total: int, stage: int) -> int:
        return -(-total // dp) if zero >= stage else total

    return ModelStates(share(weight_bytes, 3), share(gradients, 2), share(optimizer_bytes, 1), zero, dp)


def states_of(model: nn.Module, optimizer: str = "adamw", *, zero: int = 0, dp: int = 1) -> ModelStates:
    """The model states per device of any ``model``: every parameter's bytes as stored (shared ones
    once), gradients and optimizer states for those that require grad, in their own dtype
    (float32: no master copy; bfloat16 or float16: mixed precision). Frozen parameters are
    weights only, partitioned by ZeRO-3 with the others."""
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    sizes = {p.element_size() for p in trainable if p.is_floating_point()}
    if len(sizes) > 1 or any(not p.is_floating_point() for p in trainable):
        raise OpcountValueError(
            f"the trainable parameters of {type(model).__name__} mix dtypes; convert the model to one float dtype"
        )
    itemsize = sizes.pop() if sizes else 4
    weights = sum(p.numel() * p.element_size() for p in params)
    shapes = [tuple(p.shape) for p in trainable]
    return model_states(shapes, weights, optimizer=optimizer, weight_itemsize=itemsize, zero=zero, dp=dp)
