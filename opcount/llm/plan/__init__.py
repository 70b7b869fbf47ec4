"""Deployment planning over served traffic: the configurations searched (their layouts, hardware and pools),
each simulated (:mod:`opcount.llm.serve`), priced and ranked, and the throughput-interactivity frontier
(docs/plan.md). ``from opcount.llm.plan import plan, Search`` is the Python entry (``opcount plan``'s)."""

from __future__ import annotations

from typing import Any

# a name -> its module, imported when first read (PEP 562): the command line's parser reads the frontier's
# file kinds from here without importing torch
_LAZY = {
    "plan": "opcount.llm.plan.planner",
    "Search": "opcount.llm.plan.search",
    "Plan": "opcount.llm.plan.search",
    "Point": "opcount.llm.plan.points",
    "pareto": "opcount.llm.plan.frontier",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
