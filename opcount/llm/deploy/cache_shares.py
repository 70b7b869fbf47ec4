"""The share of each part of the cache one tensor-parallel device holds and reads, as vLLM keeps it.

The cache's tensors (``kv_cache.L.<part>`` while a phase is traced, :mod:`.cache`) are of four parts:

- attention's ``keys`` and ``values``: ``kv_heads / tp`` heads a device (one, copied, when ``tp``
  exceeds them) when the attention writing them is split, else whole;
- a multi-head latent attention's ``latent``: one head, whole on every rank (vLLM's MLA cache spec has
  ``num_kv_heads=1``; each rank attends its heads over all of it);
- DSA's ``index_keys``: the indexer is replicated, so are its keys;
- a state-space or linear-attention layer's ``conv`` and ``state`` tensors: split by heads (``1 / tp``)
  when the mixer is split (vLLM's MambaMixer2 and gated DeltaNet keep their ranks' heads), else whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...errors import OpcountError
from ...ir import OpCall
from ..attention.indexed import INDEX_BUFFER, INDEXER_KEYS
from ..cache.names import KEYS, KV_PREFIX, LATENT_KV, VALUES, state_part
from ..cache.specs import LATENT as LATENT_TYPE
from ..cache.specs import STATE as STATE_TYPE

ATTENTION, LATENT, INDEXER, STATE = "attention", "latent", "indexer", "state"
# the layer types of kv_cache_by_type (:meth:`.cache.CacheSpecs.bytes_by_type`) by part
_BY_TYPE = {LATENT_TYPE: LATENT, INDEXER_KEYS: INDEXER, STATE_TYPE: STATE}


def part_of(buffer: str) -> str:
    """The part of the cache tensor ``buffer`` (``kv_cache.L.<name>``)."""
    name = buffer.split(".", 2)[2] if buffer.count(".") >= 2 else buffer
    if name.partition("[")[0] == LATENT_KV:  # the latent, or a DSA layer's view of it (``latent[dense]``)
        return LATENT
    if name == INDEX_BUFFER:
        return INDEXER
    if state_part(name) is not None:  # a conv or recurrent state, by the names the cache gives them
        return STATE
    if name in (KEYS, VALUES):
        return ATTENTION
    raise OpcountError(f"{buffer}: a cache tensor opcount does not know how tensor parallelism splits")


def buffers(call: OpCall) -> list[str]:
    """The cache tensors ``call`` reads or writes."""
    names = (getattr(t, "param", None) for t in (*call.inputs, *call.outputs))
    return [n for n in names if isinstance(n, str) and n.startswith(KV_PREFIX + ".")]


def part_shares(
    calls: Iterable[OpCall], split: Callable[[OpCall], bool], tp: int, kv_heads_share: float
) -> dict[str, float]:
    """Each cache part's share on a device, from where the calls touching it run (``split``: in a split block)."""
    where: dict[str, set[bool]] = {}
    for call in calls:
        for buffer in buffers(call):
            where.setdefault(part_of(buffer), set()).add(split(call))
    shares: dict[str, float] = {}
    for part, inside in where.items():
        if len(inside) > 1:
            raise OpcountError(f"the {part} cache is read both inside and outside the tensor-parallel blocks")
        shares[part] = _share(part, inside == {True}, tp, kv_heads_share)
    return shares


def _share(part: str, split: bool, tp: int, kv_heads_share: float) -> float:
    if not split or part in (LATENT, INDEXER):
        return 1.0
    return kv_heads_share if part == ATTENTION else 1 / tp


def call_share(call: OpCall, shares: Mapping[str, float], names: Iterable[str] | None = None) -> float:
    """The share of its cache bytes a device moves for ``call`` (``names``: its :func:`buffers`, where known)."""
    found = {shares.get(part_of(b), 1.0) for b in (buffers(call) if names is None else names)}
    if len(found) > 1:
        raise OpcountError(f"{call.kind} in {call.scope[-1]}: touches cache parts split differently")
    return found.pop() if found else 1.0


def held(by_type: Mapping[str, Any], total: float, shares: Mapping[str, float]) -> float:
    """Bytes of the cache a device holds: each layer type of ``by_type`` at its share (attention's types
    at the attention's); ``total`` when the phase gives no breakdown."""
    if not by_type:
        if total and len(set(shares.values())) > 1:
            raise OpcountError("a cache of parts split differently, without its breakdown by layer type")
        return total * next(iter(shares.values()), 1.0)
    return float(
        sum(float(n) * shares.get(_BY_TYPE.get(layer_type, ATTENTION), 1.0) for layer_type, n in by_type.items())
    )
