"""The share of its key and value projections a tensor-parallel device holds and runs where ``tp`` exceeds
a layer's KV heads.

vLLM's ``QKVParallelLinear`` (``vllm/model_executor/layers/linear.py``) splits the query heads ``tp`` ways,
but when ``tp`` is at least the KV heads it gives each rank one KV head (``num_kv_heads = 1``,
``num_kv_head_replicas = divide(tp_size, total_num_kv_heads)``): the key and value projections' weights are
copied on ``tp / kv_heads`` ranks, as the cache they write is (:func:`.layout.kv_heads_per_device`). A device
then holds, reads and multiplies by ``max(1, kv_heads / tp) / kv_heads`` of each key and value projection,
not ``1 / tp`` of it. In a fused projection (GPT-2's and GPT-BigCode's ``c_attn``, Falcon's, BLOOM's and
GPT-NeoX's ``query_key_value``, Phi-3's and CodeGen's ``qkv_proj``, MPT's ``Wqkv``) the query's columns are
split and the key's and value's copied: its share is ``(q / tp + kv x copied) / (q + kv)`` of its columns,
whatever their order.

The projections are recognised by the names the plans give them (:data:`KEY_VALUE`, :data:`FUSED`) in a
layer whose cache probe (:mod:`.cache.probe`) found keys and values, and their widths checked against the
probed heads: a projection of another width is an error naming it, not a guess at its columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from torch import nn

from ...errors import OpcountError
from ..cache.probe import KVShape
from .layout import ROW_SPLIT, SPLIT, Sharding, kv_heads_per_device

# a layer's separate key and value projections (the plans' names), by the part of the cache each writes
KEY_VALUE = {"k_proj": "key", "v_proj": "value"}
# q, k and v in one weight
FUSED = frozenset({"c_attn", "query_key_value", "qkv_proj", "Wqkv"})


def kv_projection_shares(
    model: nn.Module,
    sharding: Sharding,
    kv_shapes: Sequence[KVShape | None],
    tp: int,
    layers: Callable[[], list[str]],
) -> dict[str, float]:
    """Module -> the share of its weights and work a device holds, for each split key, value or fused
    projection of a layer whose KV heads ``tp`` exceeds (``layers()``: the decoder layers' names, in the
    order of ``kv_shapes``); empty where ``tp`` exceeds no layer's KV heads (every share is then ``1 / tp``)."""
    if tp == 1 or all(s is None or tp <= s.kv_heads for s in kv_shapes):
        return {}
    out: dict[str, float] = {}
    for layer, shape in zip(layers(), kv_shapes, strict=True):
        if shape is None or tp <= shape.kv_heads:
            continue
        copied = kv_heads_per_device(shape.kv_heads, tp) / shape.kv_heads
        for name, leaf, module in _descendants(model.get_submodule(layer), layer):
            style = sharding.styles.get(name) or sharding.styles.get(f"{name}.weight")
            if (leaf not in KEY_VALUE and leaf not in FUSED) or style not in SPLIT or style in ROW_SPLIT:
                continue
            out[name] = _share(name, module, leaf, shape, tp, copied)
    return out


def _descendants(module: nn.Module, prefix: str) -> Iterator[tuple[str, str, nn.Module]]:
    """Every module under ``module`` (named ``prefix``): its full name, its own name in its parent, itself."""
    for child, sub in module.named_children():
        name = f"{prefix}.{child}"
        yield name, child, sub
        yield from _descendants(sub, name)


def _share(name: str, module: nn.Module, leaf: str, shape: KVShape, tp: int, copied: float) -> float:
    """The share of the projection ``module`` a device holds: ``copied`` of a key or value projection, the
    query's columns at ``1 / tp`` and the key's and value's at ``copied`` of a fused one."""
    columns = getattr(module, "out_features", None) or getattr(module, "nf", None)  # nn.Linear; GPT-2's Conv1D
    if not isinstance(columns, int):
        raise OpcountError(f"{name}: a {type(module).__name__} whose output width opcount cannot read")
    key, value = shape.kv_heads * shape.key_dim, shape.kv_heads * shape.value_dim
    heads = f"{shape.kv_heads} KV heads (keys {shape.key_dim} wide, values {shape.value_dim})"
    if leaf in KEY_VALUE:
        expected = key if KEY_VALUE[leaf] == "key" else value
        if columns != expected:
            raise OpcountError(
                f"{name}: a {KEY_VALUE[leaf]} projection {columns} wide where its layer caches {heads}: opcount "
                f"cannot say which of its columns vLLM copies at --tp {tp}"
            )
        return copied
    query = columns - key - value
    if query <= 0:
        raise OpcountError(
            f"{name}: a fused q, k and v projection {columns} wide where its layer caches {heads}: opcount "
            f"cannot say which of its columns vLLM copies at --tp {tp}"
        )
    return (query / tp + (key + value) * copied) / columns
