"""A plan (:func:`plan`): the configurations of one pool (:mod:`.search`) and, where asked, of a prefill pool
beside a decode pool (:mod:`.disagg`), ranked together: the cheapest meeting the targets first."""

from __future__ import annotations

from collections.abc import Mapping

from ..causal_lm import CausalLM
from .disagg import pools
from .search import Plan, Search, engines, ranked, traced_once


def plan(search: Search, models: Mapping[str, CausalLM], *, disaggregate: bool = False) -> Plan:
    """Every configuration of ``models`` (one per precision, by its name) that ``search`` allows, simulated and
    ranked; with ``disaggregate``, separate prefill and decode pools too."""
    results = []
    runs = 0
    for precision, llm in models.items():
        traced = traced_once(llm)  # each phase traced once for every device searched
        for hardware in search.hardware:
            found, n = engines(search, traced, precision, hardware)
            results += found
            runs += n
    if disaggregate:
        found, n = pools(search, dict(models))
        results += found
        runs += n
    return ranked(results, search.slos, runs)
