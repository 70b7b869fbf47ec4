"""The module roll-up: per-call values summed into every module a call belongs to.

One function serves every analysis and report (the analyses' ``by_module``, the roofline's and
the sparsity roofline's module rows, the parameter column of the report tables). Which modules
a call belongs to follows fvcore's two ancestor modes:

- ``"owner"``: the module that ran the call and the modules that own it by name, up to the model
  (``layer1.0.conv1`` -> ``""``, ``layer1``, ``layer1.0``, ``layer1.0.conv1``);
- ``"caller"``: the modules on the call stack when it ran, which differ from the owners when a
  module calls one it does not own (a shared block, a sibling's layer).

In both modes a call counts at most once per module, even when a module calls itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from .errors import OpcountValueError
from .scopes import ModuleTree

MODES = ("owner", "caller")

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
Scope = tuple[str, ...]  # canonical names of the modules running, outermost first (see scopes.py)


def attributed(tree: ModuleTree, scope: Scope, mode: str = "owner") -> tuple[str, ...]:
    """The modules a call that ran in ``scope`` belongs to, each once, the model first."""
    if mode == "caller":
        return tuple(dict.fromkeys(("", *scope)))
    if mode == "owner":
        return tree.owners(scope[-1])
    raise OpcountValueError(f"unknown ancestor mode {mode!r}; choose 'owner' or 'caller'")


def roll_up(
    tree: ModuleTree, items: Iterable[tuple[Scope, Mapping[K, Any] | None]], mode: str = "owner"
) -> dict[str, Counter[K]]:
    """Every canonical module of ``tree`` (registration order) -> the sum of the values of the
    calls that belong to it, per key. ``items``: (scope of a call, its values by key); a call
    whose values are None or empty adds nothing."""
    if mode not in MODES:
        raise OpcountValueError(f"unknown ancestor mode {mode!r}; choose 'owner' or 'caller'")
    totals: dict[str, Counter[K]] = {name: _counter() for name in tree.names}
    into: dict[Scope, list[Counter[K]]] = {}  # scope -> the counters of its modules: resolved once
    for scope, values in items:
        if not values:
            continue
        counters = into.get(scope)
        if counters is None:
            counters = into[scope] = [totals[name] for name in attributed(tree, scope, mode)]
        for counter in counters:
            for key, value in values.items():
                counter[key] += value
    return totals


def grouped(items: Iterable[tuple[Sequence[str], T]]) -> dict[str, list[T]]:
    """Module -> the items that belong to it, for modules holding any, in order of first item.

    For reports whose rows are not sums (a roofline row's time, a weight level): each item
    comes with the modules it belongs to, as :func:`attributed` gives them; the model (``""``)
    is added where they leave it out, and each module takes an item once."""
    groups: dict[str, list[T]] = {}
    for modules, item in items:
        for name in dict.fromkeys(("", *modules)):
            groups.setdefault(name, []).append(item)
    return groups


def _counter() -> Counter[Any]:
    # An empty Counter without Counter.__init__, which only adds its arguments: 4x cheaper,
    # and a model of thousands of modules needs two per module.
    return Counter.__new__(Counter)


def copied(counter: Counter[K]) -> Counter[K]:
    """A new Counter holding ``counter``'s items, for a query to hand out: ``Counter(counter)``
    without ``Counter.update``'s per-item path, which a ``by_module_and_operator()`` of thousands
    of modules feels."""
    new: Counter[K] = Counter.__new__(Counter)
    dict.update(new, counter)
    return new
