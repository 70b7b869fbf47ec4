"""What one device of an expert-parallel group does for a mixture-of-experts layer: the routes that reach
it, the distinct experts it reads, its grouped GEMMs' padded rows, the routes it dispatches; and the
all-to-all's settings (:class:`Dispatch`: its dtype, two-batch overlap).

A phase is traced for one replica's tokens ``T``, routed by expectation (:mod:`.moe.experts`: the
``T x top_k`` routes spread as evenly as integers allow over the ``E`` experts). Under expert
parallelism (``ep = tp x dp`` devices, :class:`.layout.Parallel`) the experts of a layer are shared by the
tokens of every replica: the group routes ``R = T x dp x top_k`` (the tensor-parallel ranks of a replica
hold the same tokens), each of the ``ep`` devices receives ``R / ep`` of them (the busiest one: the even
spread's first share, :func:`.routing.expert_loads` over the devices), spread evenly over its
``(E + redundant) / ep`` slots (:func:`.routing.expert_loads` again); a slot no route reaches is not read.
``redundant`` slots hold copies of experts (EPLB: SGLang's ``--ep-num-redundant-experts``), and a copied
expert's routes are split between its copies, as the load balancer places them: routes spread over every
slot alike. Experts beside identity slots (LongCat-Flash, :mod:`.moe.zero_experts`) count only their
real routes (:func:`.routing.real_routes`): an identity route runs nothing and leaves no device.

The traced block's calls then scale by three shares (:class:`ExpertShare`): its FLOPs, inputs and
outputs by the device's routes over the trace's; its expert weights by the device's distinct slots hit
over the trace's distinct experts hit; its grouped GEMMs' estimated compute by the device's rows padded
to whole tiles (:data:`.efficiency.TILE_ROWS`) over the trace's, as each expert's GEMM pads its own rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ...errors import OpcountValueError
from ...hardware.efficiency import TILE_ROWS
from ...ir import DTYPE_BYTES
from ..moe.routing import Experts, expert_loads, real_routes
from ..precision.formats import ALIASES

FP8_SCALE_CHANNELS = 128  # DeepEP's FP8 dispatch: one float32 scale per 128 channels of a token
FP8_SCALE_BYTES = 4
DISPATCH_DTYPES = ("bfloat16", "float16", "float8_e4m3fn")


@dataclass(frozen=True)
class Dispatch:
    """How the experts' all-to-all runs: ``dtype`` the dispatch is sent in (None: the residual stream's,
    as traced; ``float8_e4m3fn`` as DeepEP's FP8 dispatch, with its scales; the combine is always in the
    residual stream's dtype), and ``two_batch_overlap``: the step split in two halves whose all-to-alls
    run under each other's kernels (SGLang's ``--enable-two-batch-overlap``, vLLM's ``--enable-dbo``)."""

    dtype: str | None = None
    two_batch_overlap: bool = False

    def __post_init__(self) -> None:
        if self.dtype is not None:
            name = ALIASES.get(self.dtype.lower(), self.dtype.lower())  # the other dtype flags' short names
            if name not in DISPATCH_DTYPES:
                raise OpcountValueError(
                    f"--dispatch-dtype {self.dtype}: choose one of {', '.join(DISPATCH_DTYPES)} (or bf16, fp16, fp8)"
                )
            object.__setattr__(self, "dtype", name)

    def bytes_per_route(self, hidden: int, residual: float) -> float:
        """Bytes one token's hidden state takes dispatched to one expert: ``hidden`` elements in the
        dispatch dtype (``residual`` bytes each where none is given), and under FP8 a float32 scale
        per 128 channels (DeepEP's per-token, per-128-channel quantization)."""
        if self.dtype is None:
            return hidden * residual
        scales = math.ceil(hidden / FP8_SCALE_CHANNELS) * FP8_SCALE_BYTES if self.dtype.startswith("float8") else 0
        return hidden * DTYPE_BYTES[self.dtype] + scales


@dataclass(frozen=True)
class Spread:
    """``routes`` spread evenly over ``slots`` slots (:func:`.routing.expert_loads`): the slots
    they reach (``hits``, each read once) and their rows padded to whole tiles (``padded``)."""

    routes: int
    slots: int

    @property
    def loads(self) -> list[int]:
        return expert_loads(self.routes, 1, self.slots)

    @property
    def hits(self) -> int:
        return sum(1 for load in self.loads if load)

    @property
    def padded(self) -> int:
        return sum(math.ceil(load / TILE_ROWS) * TILE_ROWS for load in self.loads)


@dataclass(frozen=True)
class ExpertShare:
    """One device's share of a traced experts block: ``routes`` (of its FLOPs, inputs and outputs),
    ``experts`` (of the expert weights it reads), ``padded`` (of its grouped GEMMs' estimated compute);
    ``dispatched``: routes the device's own tokens send to experts (its all-to-all's payload, in routes)."""

    routes: float
    experts: float
    padded: float
    dispatched: float


def group_routes(experts: Experts, tokens: int, dp: int) -> int:
    """Routes to real experts of the tokens of ``dp`` replicas of ``tokens`` each."""
    return real_routes(tokens * dp, experts.top_k, experts.count, experts.identity)


def device_spread(experts: Experts, tokens: int, dp: int, ep: int, redundant: int = 0) -> Spread:
    """The busiest device's routes over its ``(count + redundant) / ep`` slots: the group's routes
    spread evenly over the ``ep`` devices, the first share."""
    slots = experts.count + redundant
    if ep < 1 or slots % ep:
        raise OpcountValueError(f"--ep {ep}: does not divide the {slots} expert slots of {experts.name}")
    return Spread(expert_loads(group_routes(experts, tokens, dp), 1, ep)[0], slots // ep)


def expert_share(experts: Experts, tokens: int, dp: int, ep: int, redundant: int = 0) -> ExpertShare:
    """A device's share of the block traced at ``tokens`` tokens (one replica's), under ``ep``
    devices shared by ``dp`` replicas' tokens, with ``redundant`` more slots."""
    traced = Spread(group_routes(experts, tokens, 1), experts.count)
    device = device_spread(experts, tokens, dp, ep, redundant)
    dispatched = group_routes(experts, tokens, dp) / ep
    if not traced.routes:  # no expert ran in the trace: nothing to scale
        return ExpertShare(0.0, 0.0, 0.0, dispatched)
    return ExpertShare(
        device.routes / traced.routes, device.hits / traced.hits, device.padded / traced.padded, dispatched
    )
