"""The names the cache's tensors carry in a trace: a read or write through any view of one is the cache's
(priced in its dtype, counted by the bound)."""

from __future__ import annotations

KV_PREFIX = "kv_cache"
# the cache's tensors by name: a read or write through any view of one is the cache's (priced in
# its dtype, counted by the bound), :class:`~opcount.memory.MemoryTrafficAnalysis`'s ``named_views``
CACHE_NAMES = (KV_PREFIX + ".",)
# the end of a cache tensor's name that the model keeps in float32 whatever the KV dtype (a recurrent state part)
FLOAT32_STATE = "_float32"
