"""What an engine plan is made of: a :class:`Supplement` (one block of one family, its children's
tensor-parallel styles, the vLLM source that shards it so) and the style names it uses.

The styles are transformers' (``transformers.distributed.tensor_parallel``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

COL, ROW, WHOLE = "colwise", "rowwise", "replicate"
GATHER = "colwise_gather_output"  # split by output columns, the output gathered whole
EXPERTS = "moe_tp_experts"


@dataclass(frozen=True)
class Supplement:
    """One block's split as vLLM runs it: ``styles`` by child (a module or a parameter, relative to the
    block; ``""`` the block itself), ``source`` the vLLM file and class that shards it so."""

    block: str  # the block's name under the base model, ``*`` for a layer index
    styles: Mapping[str, str]
    source: str
