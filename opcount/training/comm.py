"""The communication of a parallel training step, per device: what tensor, sequence, context, expert, pipeline
and data parallelism send, as closed forms in the micro-batch's shape, priced on the interconnect.

Per layer and micro-batch, with ``A = b (s / cp) h`` activation elements in the layer's dtype:

- tensor parallelism (Megatron-LM, Shoeybi et al. 2019): two all-reduces of ``A`` in the forward pass (after the
  attention's and the MLP's row-parallel projections) and two in the backward pass (before their column-parallel
  ones); with sequence parallelism (Korthikanti et al. 2022) each all-reduce becomes an all-gather and a
  reduce-scatter of ``A``: the same ``2 (t - 1) / t x A`` bytes sent per device, each collective half of it.
- context parallelism (ring attention, as Megatron-LM / Transformer Engine run it): each device passes its keys'
  and values' chunk ``2 b (s / cp) g d`` (``g`` its KV heads, ``d`` the head size) around the ring, ``cp - 1``
  sends in the forward pass; the backward pass sends them again with their gradients: twice the bytes.
- expert parallelism: each MoE layer dispatches its tokens' ``k`` routed copies to the experts' devices and
  combines them back (two all-to-alls of ``T k h`` elements, ``T`` the device's tokens) in the forward pass, and
  two in the backward pass.
- pipeline parallelism: each micro-batch crosses every stage boundary once forward (the activations, ``A``;
  ``A / t`` with sequence parallelism) and once backward (their gradients); interleaved, once per model chunk.
- data parallelism: :func:`opcount.training.step.gradient_sync`, over the ``dp x cp`` devices that hold the same
  weights (Megatron-LM reduces gradients over the data- and context-parallel group).

A group lies inside a node when its devices, at their stride in the rank order, fit one
(:mod:`opcount.training.layout`); a wider one runs at the network's bandwidth and latency.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OpcountError
from ..hardware.interconnect import Collective, Interconnect


def _ring(kind: str, n: int) -> tuple[float, int]:
    """The ring algorithms' bytes sent per device (a fraction of the payload) and latency steps, for ``n`` devices."""
    if kind == "all_reduce":
        return 2 * (n - 1) / n, 2 * (n - 1)
    if kind in ("all_gather", "reduce_scatter"):
        return (n - 1) / n, n - 1
    if kind == "all_to_all":
        return (n - 1) / n, 1
    if kind == "ring_exchange":  # the payload passed on n - 1 times
        return float(n - 1), n - 1
    raise OpcountError(f"internal error: no collective {kind!r}")


def collective(kind: str, payload: float, devices: int, stride: int, link: Interconnect | None) -> Collective:
    """``kind`` of ``payload`` bytes over ``devices`` that lie ``stride`` apart in the rank order."""
    if devices == 1:
        return Collective(kind, 1, payload, 0.0, 0, 0.0)
    if link is None:
        raise OpcountError(f"a {kind} over {devices} devices: the hardware has no interconnect figures to price it")
    fraction, steps = _ring(kind, devices)
    bandwidth, latency = link.link(devices * stride, kind)
    sent = fraction * payload
    return Collective(kind, devices, payload, sent, steps, sent / bandwidth + steps * latency)


@dataclass(frozen=True)
class Shape:
    """One micro-batch through one layer: ``batch`` sequences of ``seq_len`` tokens, ``hidden`` wide,
    ``kv_heads`` x ``head_dim`` keys and values, ``top_k`` experts a token, ``itemsize`` bytes an element."""

    batch: int
    seq_len: int
    hidden: int
    kv_heads: int
    head_dim: int
    itemsize: float
    top_k: int = 0


def tensor_parallel(
    shape: Shape, tp: int, cp: int, sp: bool, link: Interconnect | None
) -> tuple[list[Collective], ...]:
    """A layer's tensor-parallel collectives for one micro-batch: (forward, backward)."""
    payload = shape.batch * shape.seq_len / cp * shape.hidden * shape.itemsize
    if sp:
        one = [collective("all_gather", payload, tp, 1, link), collective("reduce_scatter", payload, tp, 1, link)]
        return one * 2, one * 2
    ar = collective("all_reduce", payload, tp, 1, link)
    return [ar, ar], [ar, ar]


def context_parallel(shape: Shape, tp: int, cp: int, link: Interconnect | None) -> tuple[list[Collective], ...]:
    """A layer's ring exchange of its keys and values for one micro-batch: (forward, backward)."""
    heads = max(1, shape.kv_heads // tp)  # a device's KV heads under tensor parallelism
    chunk = 2 * shape.batch * shape.seq_len / cp * heads * shape.head_dim * shape.itemsize
    forward = collective("ring_exchange", chunk, cp, tp, link)
    backward = collective("ring_exchange", 2 * chunk, cp, tp, link)  # the keys and values again, and their gradients
    return [forward], [backward]


def expert_parallel(
    shape: Shape, tp: int, cp: int, ep: int, sp: bool, link: Interconnect | None
) -> tuple[list[Collective], ...]:
    """An MoE layer's dispatch and combine for one micro-batch: (forward, backward)."""
    tokens = shape.batch * shape.seq_len / cp / (tp if sp else 1)
    one = collective("all_to_all", tokens * shape.top_k * shape.hidden * shape.itemsize, ep, tp * cp, link)
    return [one, one], [one, one]


def pipeline_send(
    shape: Shape, tp: int, cp: int, sp: bool, across_nodes: bool, link: Interconnect | None
) -> Collective:
    """One micro-batch's activations (or their gradients) from a stage to the next."""
    payload = shape.batch * shape.seq_len / cp * shape.hidden * shape.itemsize / (tp if sp else 1)
    if link is None:
        raise OpcountError("a pipeline's sends: the hardware has no interconnect figures to price them")
    bandwidth, latency = link.link(link.devices_per_node + 1 if across_nodes else 2, "pipeline send")
    return Collective("send_recv", 2, payload, payload, 1, payload / bandwidth + latency)


def data_parallel(
    gradient_bytes: float, weight_bytes: float, zero: int, devices: int, stride: int, link: Interconnect | None
) -> list[Collective]:
    """A step's data-parallel collectives over ``devices`` lying ``stride`` apart, each payload a device's whole
    (unpartitioned) gradients or weights, as :func:`opcount.training.step.gradient_sync` counts them: ZeRO-0 an
    all-reduce; 1 and 2 a reduce-scatter and an all-gather of the updated weights; 3 also the weights gathered
    for the forward and the backward pass."""
    if devices == 1:
        return []
    if zero == 0:
        return [collective("all_reduce", gradient_bytes, devices, stride, link)]
    gathers = 2 if zero == 3 else 1
    return [
        collective("reduce_scatter", gradient_bytes, devices, stride, link),
        *(collective("all_gather", weight_bytes, devices, stride, link) for _ in range(gathers)),
    ]
