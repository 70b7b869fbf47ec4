"""What an engine plan is made of: a :class:`Supplement` (one block of one family, its children's
tensor-parallel styles, the vLLM source that shards it so) and the style names it uses.

The styles are transformers' (``transformers.distributed.tensor_parallel``) but one: ``rowwise_unreduced``,
a row-wise split whose partial output is summed into another row-wise module's before that one's
all-reduce, as vLLM's ``RowParallelLinear(reduce_results=False)`` leaves it (Falcon's parallel attention
and MLP share one all-reduce a layer). transformers has no such style: its plans reduce every row-wise module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

COL, ROW, WHOLE = "colwise", "rowwise", "replicate"
# q, k and v (or gate and up) packed one after the other in one weight: each part split by heads (or
# channels), as vLLM's QKVParallelLinear and MergedColumnParallelLinear load them
PACKED = "packed_colwise"
GATHER = "colwise_gather_output"  # split by output columns, the output gathered whole
EXPERTS = "moe_tp_experts"
VOCAB_ROWS = "embedding_rowwise"  # an embedding split by vocabulary rows, its output all-reduced
UNREDUCED = "rowwise_unreduced"  # split by input rows, its partial output reduced with a later row-wise module's


@dataclass(frozen=True)
class Supplement:
    """One block's split as vLLM runs it: ``styles`` by child (a module or a parameter, relative to the
    block; ``""`` the block itself), ``source`` the vLLM file and class that shards it so."""

    block: str  # the block's name under the base model, ``*`` for a layer index
    styles: Mapping[str, str]
    source: str


def vocabulary(embedding: str, source: str, lm_head: bool = True) -> tuple[Supplement, ...]:
    """The token embedding ``embedding`` split by vocabulary rows (VocabParallelEmbedding) and, with
    ``lm_head``, the output projection by vocabulary columns, its logits gathered (ParallelLMHead, or the
    embedding itself where the two are tied), as every vLLM decoder splits them."""
    embed = Supplement(embedding, {"": VOCAB_ROWS}, f"{source} (VocabParallelEmbedding)")
    return (embed, Supplement("lm_head", {"": GATHER}, f"{source} (ParallelLMHead)")) if lm_head else (embed,)
