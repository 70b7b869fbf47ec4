"""The ``opcount`` command's unsupported-operator warnings, one per operator, naming the shown
columns that do not count it.

Each analysis knows which operators it has no formula for, and they differ: fvcore's activation
convention counts the outputs of convolutions and matrix products only, so its analysis reports
``batch_norm`` unsupported while the flop count has a formula for it. A warning is only about a
column the report shows, and says which one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from . import report


def unsupported_warnings(analyses: Mapping[str, Any], columns: Sequence[str]) -> list[str]:
    """``Unsupported operator aten::x encountered n time(s): not counted in flops, activations``,
    once per operator some shown column misses (``analyses``: role -> analysis or report)."""
    missed: dict[str, list[str]] = {}
    calls: Counter[str] = Counter()
    for key in columns:
        for role in report.COLUMNS[key].needs:
            analysis = analyses.get(role)
            if analysis is None:
                continue
            for op, n in analysis.unsupported_ops().items():
                if key not in missed.setdefault(op, []):
                    missed[op].append(key)
                calls[op] = max(calls[op], n)
    return [
        f"Unsupported operator {op} encountered {calls[op]} time(s): not counted in {', '.join(keys)}"
        for op, keys in sorted(missed.items())
    ]
