"""The KV cache's blocks with automatic prefix caching, as vLLM v1 keeps them (``BlockPool`` in
vllm/v1/core/block_pool.py, ``KVCacheManager.get_computed_blocks`` in vllm/v1/core/kv_cache_manager.py):

- a full block of a prompt is known by a hash of its tokens and of every token before it; a block a running
  request computed is cached under its hash, and another request whose prompt starts with the same blocks
  takes them as computed when it is admitted (its longest run of cached blocks from the first, leaving at
  least its last prompt token to compute, as vLLM does to sample from it), referencing them instead of
  computing them;
- a block is referenced by every running request holding it and freed when none does; a freed cached block
  keeps its tokens and can still be hit, until a new block is needed and none is free without a cached one:
  then the least recently freed cached block is evicted (vLLM's free queue hands out its head, the block freed
  longest ago; a request's blocks are freed last first, so a prefix outlives its tail);
- blocks with no hash (the answer's, a prompt's last partial block, the blocks of a prompt no one shares) are
  counted, not named: they never hit.

One departure, stated: vLLM hands out the free queue's head whether or not it holds a cached block; here a
free block without one is handed out first, so a cached block lives somewhat longer than in vLLM.
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """The cached blocks of a KV cache: which hashes running requests hold (and how many hold each), and the
    freed cached ones in the order they were freed. The count of free blocks stays with the scheduler (its
    hot loop): each method returns what it changes there."""

    def __init__(self) -> None:
        self.held: dict[int, int] = {}  # a cached hash held by running requests: how many
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached and free, least recently freed first
        self.queried = self.hit = 0  # prompt tokens looked up at admission, and found (vLLM's hit rate)

    def cached_prefix(self, hashes: tuple[int, ...], prompt: int, block_size: int) -> int:
        """Blocks of ``hashes`` cached from the first on, at most ``prompt - 1`` tokens' full blocks."""
        most = min(len(hashes), (prompt - 1) // block_size)
        n = 0
        while n < most and (hashes[n] in self.held or hashes[n] in self.evictable):
            n += 1
        return n

    def from_free(self, hashes: tuple[int, ...], n: int) -> int:
        """Of the first ``n`` blocks of ``hashes`` (cached), those no running request holds: free blocks that
        taking them uses."""
        return sum(1 for h in hashes[:n] if h not in self.held)

    def take(self, hashes: tuple[int, ...], n: int) -> int:
        """A request takes the first ``n`` blocks of ``hashes`` (all cached) as computed: the free blocks used."""
        used = 0
        for h in hashes[:n]:
            if h in self.held:
                self.held[h] += 1
            else:
                del self.evictable[h]
                self.held[h] = 1
                used += 1
        return used

    def evict_for(self, need: int, free: int) -> None:
        """Before ``need`` new blocks are handed out of ``free``: the least recently freed cached blocks evicted
        where fewer than ``need`` free blocks hold none."""
        for _ in range(need - (free - len(self.evictable))):
            self.evictable.popitem(last=False)

    def cache(self, h: int) -> bool:
        """A running request has computed the block ``h`` names, in a block of its own: that block is cached
        (and now shared) unless the hash already is (two requests computing one prefix at once keep one copy
        cached, as vLLM does). Whether it was."""
        if h in self.held or h in self.evictable:
            return False
        self.held[h] = 1
        return True

    def release(self, hashes: list[int]) -> int:
        """A request frees the cached blocks it holds, ``hashes`` in prompt order, the last first (a prefix's
        first blocks are evicted last): the blocks no running request holds any more, now free."""
        freed = 0
        for h in reversed(hashes):
            left = self.held[h] - 1
            if left:
                self.held[h] = left
            else:
                del self.held[h]
                self.evictable[h] = None
                freed += 1
        return freed


def prompt_hashes(
    prompt: int, block_size: int, shared_tokens: int = 0, trace: tuple[int, ...] = (), trace_block: int = 0
) -> tuple[int, ...]:
    """The hashes of a prompt's full blocks that can be shared: the first ``shared_tokens`` (one prefix all
    requests have: block ``j``'s hash is ``j``'s), or those a trace's hashes cover (each of ``trace_block``
    tokens; a block of ``block_size`` tokens is known by the trace blocks it overlaps and every block before
    it, chained as vLLM chains a block's hash to its parent's)."""
    if trace and trace_block:
        blocks = min(prompt, len(trace) * trace_block) // block_size
        out, parent = [], 0
        for j in range(blocks):
            first, last = j * block_size // trace_block, ((j + 1) * block_size - 1) // trace_block
            parent = hash((parent, *trace[first : last + 1]))
            out.append(parent)
        return tuple(out)
    return tuple(range(1, min(shared_tokens, prompt) // block_size + 1))
