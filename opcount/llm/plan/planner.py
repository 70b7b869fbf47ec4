"""A plan (:func:`plan`): the configurations of one pool (:mod:`.search`) and, where asked, of a prefill pool
beside a decode pool (:mod:`.disagg`), ranked together: the cheapest meeting the targets first. Several
concurrencies (a closed loop's clients) search each alike over one trace of the model, for the frontier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from ...errors import OpcountValueError
from ..causal_lm import CausalLM
from .disagg import pools
from .search import Plan, Search, engines, ranked, traced_once


def plan(
    search: Search, models: Mapping[str, CausalLM], *, disaggregate: bool = False, concurrencies: Sequence[int] = ()
) -> Plan:
    """Every configuration of ``models`` (one per precision, by its name) that ``search`` allows, simulated and
    ranked; with ``disaggregate``, separate prefill and decode pools too; with ``concurrencies``, the search
    repeated at each count of clients (``search.workload`` a closed loop), all ranked together."""
    if concurrencies and search.workload.concurrency is None:
        raise OpcountValueError("concurrencies: a list of clients searches a closed loop, not a rate")
    results = []
    runs = 0
    traced = {precision: traced_once(llm) for precision, llm in models.items()}  # one trace for every search
    listed: Sequence[int | None] = concurrencies or [search.workload.concurrency]
    for clients in listed:
        at = search if clients is None else replace(search, workload=replace(search.workload, concurrency=clients))
        for precision, llm in traced.items():
            for hardware in search.hardware:
                found, n = engines(at, llm, precision, hardware)
                results += found
                runs += n
    if disaggregate:
        found, n = pools(search, traced)  # the pools price the phases the search traced
        results += found
        runs += n
    return ranked(results, search.slos, runs)
