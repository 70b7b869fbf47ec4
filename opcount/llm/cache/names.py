"""The names the cache's tensors carry in a trace: a read or write through any view of one is the cache's
(priced in its dtype, counted by the bound), and its name says which part it is (keys, values, a latent, a
state's conv or recurrent part) and so which dtype: the KV cache's, a state part's, or float32."""

from __future__ import annotations

KV_PREFIX = "kv_cache"
# the cache's tensors by name: a read or write through any view of one is the cache's (priced in
# its dtype, counted by the bound), :class:`~opcount.memory.MemoryTrafficAnalysis`'s ``named_views``
CACHE_NAMES = (KV_PREFIX + ".",)
# an attention layer's tensors: ``kv_cache.L.keys`` and ``kv_cache.L.values``, or a latent attention's one
# ``kv_cache.L.latent`` (its views ``latent[dense]`` and ``latent[chosen]`` named after it: a DSA layer's reads)
KEYS, VALUES, LATENT_KV = "keys", "values", "latent"
# a state layer's tensors: ``kv_cache.L.conv0`` (a conv state), ``kv_cache.L.state0`` (a recurrent state)
CONV_STATE, RECURRENT_STATE = "conv", "state"
# the end of a cache tensor's name that the model keeps in float32 whatever the flags (a recurrent state part)
FLOAT32_STATE = "_float32"


def state_part(name: str) -> str | None:
    """Which part of a state the cache tensor ``name`` (``kv_cache.L.conv0``) is: :data:`CONV_STATE`,
    :data:`RECURRENT_STATE` or :data:`FLOAT32_STATE`; None for keys, values, latents and indexer keys."""
    last = name.rpartition(".")[2]
    if last.endswith(FLOAT32_STATE):
        return FLOAT32_STATE
    for part in (CONV_STATE, RECURRENT_STATE):
        if last.startswith(part) and last[len(part) :].isdigit():
            return part
    return None
