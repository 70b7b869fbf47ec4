"""Parameter counts: per parameter, per module holding any, and for the model (``""``), as
fvcore.nn.parameter_count gives them. A parameter shared by modules counts once, under the
first name it is reachable by."""

from __future__ import annotations

from collections import Counter

from torch import nn

from ..rollup import roll_up
from ..scopes import ModuleTree

__all__ = ["parameter_count", "parameter_counts", "parameters_once"]


def parameters_once(tree: ModuleTree) -> list[tuple[str, str, nn.Parameter]]:
    """(qualified name, module name, parameter) in ``named_parameters()`` order: modules in
    registration order, each parameter under the first name it is reachable by."""
    seen: set[int] = set()
    found = []
    for module_name in tree.names:
        for local, p in tree.module(module_name).named_parameters(recurse=False):
            if id(p) not in seen:
                seen.add(id(p))
                found.append((f"{module_name}.{local}" if module_name else local, module_name, p))
    return found


def parameter_counts(tree: ModuleTree) -> Counter[str]:
    """:func:`parameter_count` of a module tree already built."""
    params = parameters_once(tree)
    totals = roll_up(tree, (((module_name,), {"": p.numel()}) for _, module_name, p in params))
    counts = Counter({name: c[""] for name, c in totals.items() if c})  # modules holding parameters
    for name, _, p in params:  # and a row per parameter
        counts[name] += p.numel()
    return counts


def parameter_count(model: nn.Module) -> Counter[str]:
    """Parameters of the model (key ``""``), of every module holding any, and of every
    parameter by its qualified name (fvcore.nn.parameter_count)."""
    return parameter_counts(ModuleTree(model))
