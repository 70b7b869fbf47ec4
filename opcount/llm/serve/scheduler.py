"""The engine's scheduler as vLLM's v1 scheduler runs it (``Scheduler.schedule`` in
vllm/v1/core/sched/scheduler.py), over a step cost (:mod:`.step_cost`):

- each step first serves the running requests in order, each its next tokens (a decode: one; a prompt in
  progress: its next chunk), within a budget of ``max_num_batched_tokens`` tokens a step;
- a running request whose new tokens need a KV block that is not free preempts the newest running request
  (the last admitted; itself where it is the newest), whose blocks are freed and which goes back to the
  front of the queue to be computed again from nothing, its prompt and the tokens it had generated (vLLM v1
  preempts by recompute only);
- then, in a step that preempted nothing, the waiting requests in arrival order (FCFS), while fewer than
  ``max_num_seqs`` run, the budget has tokens left and their blocks are free: a prompt longer than the
  budget left runs in chunks (chunked prefill, always on in vLLM v1);
- the KV cache is ``num_blocks`` blocks of ``block_size`` tokens; a request holds the blocks of its computed
  tokens, and ``blocks_per_sequence`` more while it runs (the layers whose cache is a fixed size per sequence:
  a sliding window, a recurrent state; :func:`.simulate.kv_layout`), and frees them all when it finishes or
  is preempted.

A step's tokens come out when it ends; a request whose computed tokens reach its prompt and generated
tokens samples one more (its first at the end of its prompt's last chunk). Arrivals during a step wait for
the next one. Under speculative decoding (:mod:`.speculative`) a decode carries ``k`` draft tokens: it takes
``1 + k`` tokens of the budget and the KV blocks of ``k`` lookahead slots (vLLM's ``num_lookahead_tokens``), and
emits the tokens its verify accepts; every request scheduled holds the blocks of ``k`` lookahead slots past its
new tokens, where the drafter writes the next drafts (``allocate_slots(..., num_lookahead_tokens)``, which vLLM
passes for its EAGLE-family drafters, MTP among them). A verify that the budget left cannot take whole waits for
the next step (vLLM would shorten its drafts). With prefix caching (``Engine.enable_prefix_caching``, vLLM v1's
default), a request admitted takes its prompt's longest cached run of blocks as computed (:mod:`.prefix_cache`):
its first chunk starts after them, and its blocks cached as it computes them. The time the engine's CPU spends
between steps is not modelled (docs/simulate.md).
"""

from __future__ import annotations

import heapq
from array import array
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from ...errors import OpcountValueError
from .prefix_cache import BlockPool, prompt_hashes
from .speculative import Speculation
from .step_cost import Step, StepCost
from .workload import Workload


@dataclass(frozen=True, kw_only=True)
class Engine:
    """The scheduler's knobs under vLLM's names, and the KV cache's size in blocks."""

    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    num_blocks: int
    blocks_per_sequence: int = 0  # held by each running request whatever its length
    enable_prefix_caching: bool = True  # vLLM v1's default (--enable-prefix-caching / --no-enable-prefix-caching)

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "block_size", "num_blocks"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OpcountValueError(f"{name} must be a whole number from 1, got {value!r}")
        fixed = self.blocks_per_sequence
        if not isinstance(fixed, int) or isinstance(fixed, bool) or fixed < 0:
            raise OpcountValueError(f"blocks_per_sequence must be a whole number from 0, got {fixed!r}")


@dataclass(eq=False)  # one request is itself only: found in the queues by identity
class Request:
    """One request as it runs: its lengths, arrival, tokens computed and generated, blocks and times."""

    index: int
    arrival: float
    prompt: int
    output: int
    tokens: int = 0  # the tokens it holds to compute: its prompt and what it has generated
    computed: int = 0
    generated: int = 0
    blocks: int = 0
    # when each generated token came out: 8 bytes a token (10,000 answers of 1,000 tokens: 80 MB)
    token_times: array[float] = field(default_factory=lambda: array("d"))
    preempted: int = 0
    credit: float = 0.0  # speculative decoding: accepted tokens expected and not yet emitted (Speculation.emit)
    hashes: tuple[int, ...] = ()  # its prompt's blocks that can be shared (prefix caching)
    shared: list[int] = field(default_factory=list)  # the cached blocks it holds by their hashes, in order
    hashed_upto: int = 0  # its prompt's blocks looked at for caching so far

    def __post_init__(self) -> None:
        self.tokens = self.prompt


@dataclass(frozen=True)
class Run:
    """What the scheduler did: every request (its token times), its steps, preemptions, the seconds it ran
    steps, and the KV blocks in use (their peak, and their sum over time)."""

    requests: list[Request]
    steps: int
    preemptions: int
    busy: float  # seconds the engine ran steps
    peak_blocks: int
    block_seconds: float  # blocks in use integrated over the run's steps
    verifies: int = 0  # speculative decoding: the sequences' verify forwards, and the tokens they emitted
    verified_tokens: int = 0
    prefix_queried: int = 0  # prefix caching: prompt tokens looked up at admission, and those found cached
    prefix_hit: int = 0


# what an observer of the run is told after each step: its start and seconds, its work, and the indices of the
# requests it ran (a timeline records them: opcount.llm.serve.timeline)
OnStep = Callable[[float, float, Step, list[int]], None]
# told every `progress_every` steps: the requests finished and the requests in all (a progress bar)
OnProgress = Callable[[int, int], None]
PROGRESS_EVERY = 1000


def blocks_for(tokens: int, block_size: int) -> int:
    return -(-tokens // block_size)


def release(r: Request, pool: BlockPool | None) -> int:
    """``r`` gives back its blocks (finished or preempted): the blocks now free, its own and the cached ones no
    other running request holds."""
    freed = r.blocks - len(r.shared)
    if r.shared:
        assert pool is not None  # a request holds blocks by their hashes only under prefix caching
        freed += pool.release(r.shared)
    r.blocks, r.shared, r.hashed_upto = 0, [], 0
    return freed


def run(
    workload: Workload,
    engine: Engine,
    cost: StepCost,
    *,
    on_step: OnStep | None = None,
    progress: OnProgress | None = None,
    progress_every: int = PROGRESS_EVERY,
    speculation: Speculation | None = None,
) -> Run:
    """Every request of ``workload`` through ``engine``'s scheduler, each step priced by ``cost``; ``on_step``
    told of each step, ``progress`` of the requests done every ``progress_every`` steps; each decode
    speculating as ``speculation`` says (None: none)."""
    fixed = engine.blocks_per_sequence  # a request's first chunk takes them with its tokens' blocks
    lookahead = speculation.tokens if speculation else 0
    # the last verify: the tokens cached but the last, its 1 + k, and k lookahead slots
    prompts, outputs = workload.lengths()
    longest = int((prompts + outputs).max())
    largest = blocks_for(longest - 1 + 2 * lookahead, engine.block_size) + fixed
    if largest > engine.num_blocks:
        raise OpcountValueError(
            f"a request of {longest} tokens (prompt and answer) needs {largest} KV blocks of "
            f"{engine.block_size} tokens; the cache holds {engine.num_blocks}"
        )
    size = engine.block_size
    pool = BlockPool() if engine.enable_prefix_caching else None
    shared_tokens = [int(workload.prefix_hit * p) for p in prompts.tolist()] if workload.prefix_hit else None
    trace = workload.trace if workload.trace is not None and workload.hash_block else None
    sharing = pool is not None and bool(shared_tokens or trace)  # prompts that can hit: the hit rate is counted

    def request(i: int, t: float) -> Request:
        r = Request(i, t, int(prompts[i]), int(outputs[i]))
        if sharing:
            r.hashes = prompt_hashes(
                r.prompt, size, shared_tokens[i] if shared_tokens else 0,
                trace[i].hashes if trace else (), workload.hash_block,
            )  # fmt: skip
        return r

    arrivals = [(t, i) for i, t in enumerate(workload.first_arrivals())]
    heapq.heapify(arrivals)
    sent = len(arrivals)
    done: list[Request] = []
    waiting: deque[Request] = deque()
    running: list[Request] = []
    free = engine.num_blocks
    now, steps, preemptions, busy, peak, block_seconds = 0.0, 0, 0, 0.0, 0, 0.0
    verifies = verified = 0
    while len(done) < workload.requests:
        if not running and not waiting:
            now = max(now, arrivals[0][0])  # idle until the next request
        while arrivals and arrivals[0][0] <= now:
            t, i = heapq.heappop(arrivals)
            waiting.append(request(i, t))
        scheduled: list[tuple[Request, int, bool]] = []  # a request, its tokens this step, whether it verifies
        chunks: list[tuple[int, int]] = []
        budget, preempted, decode, kv_tokens = engine.max_num_batched_tokens, False, 0, 0
        i = 0
        while i < len(running) and budget:
            r = running[i]
            decoding = r.computed + 1 == r.tokens and r.generated > 0  # one token after a sampled one
            if decoding and lookahead:
                if budget < 1 + lookahead:
                    break
                n = 1 + lookahead  # its last token and its drafts, verified together
            else:
                n = min(r.tokens - r.computed, budget)
            # the slots of its new tokens and of the k drafts proposed after them; rejected drafts' slots stay held
            need = -(-(r.computed + n + lookahead) // size) + fixed - r.blocks  # blocks_for, inline: the hot loop
            if need < 0:
                need = 0
            lost = False
            while need > free:
                # the newest running request: never one scheduled already this step, which all come before r
                victim = running.pop()
                preempted, preemptions, lost = True, preemptions + 1, victim is r
                free += release(victim, pool)
                victim.computed, victim.preempted = 0, victim.preempted + 1
                waiting.appendleft(victim)
                if lost:
                    break
            if lost:  # r was the newest: none runs after it this step (vLLM stops scheduling the running here)
                break
            if pool is not None and pool.evictable:
                pool.evict_for(need, free)
            free -= need
            r.blocks += need
            scheduled.append((r, n, decoding and lookahead > 0))
            budget -= n
            if decoding:
                decode, kv_tokens = decode + 1, kv_tokens + r.computed
            else:  # a prompt's chunk, or a preempted request's recompute
                chunks.append((r.computed, n))
            i += 1
        while not preempted and waiting and budget and len(running) < engine.max_num_seqs:
            r = waiting[0]
            hit = taken = 0
            if r.hashes:  # its longest cached prefix, computed already (a new request, or one preempted)
                assert pool is not None
                hit = pool.cached_prefix(r.hashes, r.tokens, size)
                taken = pool.from_free(r.hashes, hit)
            n = min(r.tokens - hit * size, budget)
            need = blocks_for(hit * size + n + lookahead, size) + fixed - hit
            if need + taken > free:
                break
            waiting.popleft()
            if sharing:
                assert pool is not None
                pool.queried, pool.hit = pool.queried + r.tokens, pool.hit + hit * size
            if hit:
                assert pool is not None
                free -= pool.take(r.hashes, hit)
                r.shared, r.hashed_upto, r.computed, r.blocks = list(r.hashes[:hit]), hit, hit * size, hit
            if pool is not None and pool.evictable:
                pool.evict_for(need, free)
            free -= need
            r.blocks += need
            running.append(r)
            scheduled.append((r, n, False))
            chunks.append((r.computed, n))
            budget -= n
        if not scheduled:
            raise OpcountValueError("no request could be scheduled: the KV cache is too small for one step")
        step = Step(decode, kv_tokens, tuple(chunks), lookahead if decode else 0)
        seconds = cost(step)
        if on_step is not None:
            on_step(now, seconds, step, [r.index for r, _, _ in scheduled])
        now += seconds
        busy += seconds
        steps += 1
        used = engine.num_blocks - free
        peak, block_seconds = max(peak, used), block_seconds + used * seconds
        for r, n, verify in scheduled:
            if verify:
                assert speculation is not None  # a verify is scheduled only under speculation
                # its last token and the accepted drafts are now cached, and one more is sampled
                emitted, r.credit = speculation.emit(r.credit)
                emitted = min(emitted, r.output - r.generated)
                verifies, verified = verifies + 1, verified + emitted
                r.computed += emitted
                r.token_times.extend([now] * emitted)
            else:
                r.computed += n
                if r.hashes and r.hashed_upto < len(r.hashes):
                    assert pool is not None
                    full = min(r.computed // size, len(r.hashes))
                    for h in r.hashes[r.hashed_upto : full]:
                        if pool.cache(h):
                            r.shared.append(h)
                    r.hashed_upto = full
                if r.computed < r.tokens:
                    continue
                emitted = 1
                r.token_times.append(now)
            r.generated += emitted
            r.tokens += emitted
            if r.generated == r.output:
                running.remove(r)
                free += release(r, pool)
                done.append(r)
                if workload.closed_loop and sent < workload.requests:
                    heapq.heappush(arrivals, (now, sent))
                    sent += 1
        if progress is not None and steps % progress_every == 0:
            progress(len(done), workload.requests)
    done.sort(key=lambda r: r.index)
    queried, hit = (pool.queried, pool.hit) if pool is not None else (0, 0)
    return Run(done, steps, preemptions, busy, peak, block_seconds, verifies, verified, queried, hit)
