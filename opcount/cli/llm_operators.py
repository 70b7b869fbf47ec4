"""The LLM path's ``--by-operator`` report: one row per operator with the kernels it was fused into."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import tabulate

from .. import report
from ..errors import OpcountError
from ..llm.operators import operator_rows
from ..llm.phases import PhaseCost
from ..units import seconds, si, size
from .options import Layout
from .render import write_csv_meta

FIELDS = ("operator", "calls", "flops", "bytes", "time", "kernels")


def by_operator(cost: PhaseCost, layout: Layout, meta: Mapping[str, Any]) -> str:
    """The rows as a table or CSV; counts are headed by their unit (MACs or FLOPs), bytes and seconds
    are each operator's as its own kernels (eager)."""
    rows = operator_rows(cost)
    if not rows:
        raise OpcountError("--by-operator on an LLM phase needs --hardware: it says which kernel each operator ran in")
    unit = "MACs" if cost.flops.flops_per_mac == 1 else "FLOPs"
    if layout.format == "csv":
        write_csv_meta(layout.csv_meta, meta)
        names = {
            "flops": unit.lower(),
            "bytes": "bytes_eager",
            "time": "time_eager_s",
            "kernels": f"{cost.kernels}_kernels",
        }
        return report.csv_rows(FIELDS, rows, names=names).rstrip("\n")
    headers = ["operator", "calls", unit, "bytes (eager)", "time (eager)", f"{cost.kernels} kernels it ran in"]
    cells = [
        [r["operator"], str(r["calls"]), si(r["flops"]), size(r["bytes"]), seconds(r["time"]), r["kernels"]]
        for r in rows
    ]
    return str(tabulate.tabulate(cells, headers=headers, tablefmt="pipe", disable_numparse=True))
