"""What would run around a module's forward (hooks, a compiled call): the tracers scope and
replay by it."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle


def has_hooks(module: nn.Module) -> bool:
    """Whether the module has forward or backward hooks of its own."""
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
    )


def global_hooks() -> bool:
    """Whether global module hooks exist (``register_module_forward_hook`` and kin)."""
    m = torch.nn.modules.module
    return bool(
        m._global_forward_hooks
        or m._global_forward_pre_hooks
        or m._global_backward_hooks
        or m._global_backward_pre_hooks
    )


def compiled(module: nn.Module) -> bool:
    """Whether ``module.compile()`` gave the module a compiled call, which runs instead of ``forward``."""
    return "_compiled_call_impl" in module.__dict__ or module._compiled_call_impl is not None


def hook_epoch() -> int:
    """The number the next hook handle takes: every registration takes the next one."""
    return RemovableHandle.next_id


def hooked_since(epoch: int, module: nn.Module) -> bool:
    """Whether a hook registered since ``epoch``, the module's own or a global one, would run
    around the module's forward. One integer compare while none was registered."""
    return RemovableHandle.next_id != epoch and (has_hooks(module) or global_hooks())
