"""Which module hooks would run around a forward: the tracers scope and replay by them."""

from __future__ import annotations

import torch
from torch import nn


def has_hooks(module: nn.Module) -> bool:
    """Whether the module has forward or backward hooks of its own."""
    return bool(module._forward_hooks or module._forward_pre_hooks or module._backward_hooks
                or module._backward_pre_hooks)


def global_hooks() -> bool:
    """Whether global module hooks exist (``register_module_forward_hook`` and kin)."""
    m = torch.nn.modules.module
    return bool(m._global_forward_hooks or m._global_forward_pre_hooks or m._global_backward_hooks
                or m._global_backward_pre_hooks)
