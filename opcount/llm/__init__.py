"""LLM inference cost: prefill and decode with a KV cache, memory footprint, dtypes per role, MoE.

The package itself holds only constants the command line's parser reads, imported without torch; the
simulation of served traffic (``opcount.llm.simulate``, :func:`opcount.llm.serve.simulate.simulate`) and its
workload (``opcount.llm.Workload``) load on first use."""

from __future__ import annotations

from typing import Any

PHASES = ("prefill", "decode")  # the inference phases a step is priced for: the prompt, one step of generation

# a name -> its module: imported when first read (PEP 562), so `import opcount.llm` stays light
_LAZY = {
    "simulate": "opcount.llm.serve.simulate",
    "Simulation": "opcount.llm.serve.simulate",
    "Workload": "opcount.llm.serve.workload",
    "Slo": "opcount.llm.serve.slo",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(_LAZY[name]), name)
