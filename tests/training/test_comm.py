"""A parallel training step's communication against its closed forms worked by hand: tensor-parallel bytes per
layer with and without sequence parallelism (Megatron-LM; Korthikanti et al. 2022), the context-parallel ring's
exchange, the experts' all-to-alls, the pipeline's sends, ZeRO-3's traffic (the ZeRO paper's 1.5x), and which
groups leave the node."""

from __future__ import annotations

import pytest

from opcount.hardware.interconnect import Interconnect
from opcount.training.comm import (
    Shape,
    collective,
    context_parallel,
    data_parallel,
    expert_parallel,
    pipeline_send,
    tensor_parallel,
)

LINK = Interconnect(bandwidth=450e9, latency=1e-6, devices_per_node=8, network_bandwidth=50e9, network_latency=5e-6)
# one micro-batch of Llama-3-70B: 1 x 4096 tokens, h = 8192, 8 KV heads of 128, bfloat16
LLAMA = Shape(batch=1, seq_len=4096, hidden=8192, kv_heads=8, head_dim=128, itemsize=2, top_k=2)
A = 4096 * 8192 * 2  # the activation [b, s, h]: 67,108,864 bytes


def _sent(collectives: list) -> float:  # type: ignore[type-arg]
    return sum(c.sent for c in collectives)


def test_tensor_parallel_bytes_per_layer() -> None:
    # two all-reduces forward, two backward, each 2 (t - 1) / t x A sent per device: t = 8 -> 3.5 A a pass
    forward, backward = tensor_parallel(LLAMA, tp=8, cp=1, sp=False, link=LINK)
    assert [c.kind for c in forward] == ["all_reduce"] * 2
    assert _sent(forward) == _sent(backward) == pytest.approx(3.5 * A)
    assert _sent(forward) == pytest.approx(234_881_024)
    # sequence parallelism: each all-reduce an all-gather and a reduce-scatter, the same bytes
    forward, backward = tensor_parallel(LLAMA, tp=8, cp=1, sp=True, link=LINK)
    assert sorted(c.kind for c in forward) == ["all_gather", "all_gather", "reduce_scatter", "reduce_scatter"]
    assert _sent(forward) == _sent(backward) == pytest.approx(3.5 * A)
    # inside the node: 2 x 7/8 x A over 450 GB/s and 14 latency steps per all-reduce
    ar = tensor_parallel(LLAMA, tp=8, cp=1, sp=False, link=LINK)[0][0]
    assert ar.time == pytest.approx(2 * 7 / 8 * A / 450e9 + 14 * 1e-6)
    # context parallelism halves each device's tokens: half the bytes
    assert _sent(tensor_parallel(LLAMA, tp=8, cp=2, sp=False, link=LINK)[0]) == pytest.approx(1.75 * A)


def test_context_parallel_exchange_bytes() -> None:
    # each device's K and V chunk: 2 x b x (s / cp) x (KV heads / tp) x d x 2 bytes = 2 x 1024 x 4 x 128 x 2
    chunk = 2 * 1 * 1024 * 4 * 128 * 2
    assert chunk == 2_097_152
    forward, backward = context_parallel(LLAMA, tp=2, cp=4, link=LINK)
    assert _sent(forward) == pytest.approx(3 * chunk)  # passed on cp - 1 = 3 times
    assert _sent(backward) == pytest.approx(6 * chunk)  # the keys and values again, and their gradients
    # the ring's devices lie tp = 2 apart: 4 x 2 = 8 fit the node
    assert forward[0].time == pytest.approx(3 * chunk / 450e9 + 3 * 1e-6)


def test_expert_all_to_all_bytes() -> None:
    # per MoE layer: dispatch and combine, forward and backward; T = b s / cp / tp (sequence parallel) tokens,
    # k = 2 copies of h bfloat16 elements, (ep - 1) / ep of them to other devices
    forward, backward = expert_parallel(LLAMA, tp=2, cp=1, ep=4, sp=True, link=LINK)
    tokens = 4096 / 2
    assert len(forward) == len(backward) == 2
    assert _sent(forward) == pytest.approx(2 * 3 / 4 * tokens * 2 * 8192 * 2)


def test_pipeline_send() -> None:
    # the activations of a micro-batch, A, or A / tp with sequence parallelism; across nodes at the network's speed
    send = pipeline_send(LLAMA, tp=8, cp=1, sp=False, across_nodes=True, link=LINK)
    assert send.sent == A and send.time == pytest.approx(A / 50e9 + 5e-6)
    assert pipeline_send(LLAMA, tp=8, cp=1, sp=True, across_nodes=False, link=LINK).sent == A / 8


def test_zero3_traffic() -> None:
    # the ZeRO paper: stages 1 and 2 move what an all-reduce moves (2 psi x (N-1)/N x 2 bytes), stage 3 1.5 times it
    psi, n = 1e9, 64
    all_reduce = _sent(data_parallel(2 * psi, 2 * psi, 0, n, 8, LINK))
    assert all_reduce == pytest.approx(2 * 63 / 64 * 2 * psi)
    assert _sent(data_parallel(2 * psi, 2 * psi, 2, n, 8, LINK)) == pytest.approx(all_reduce)
    zero3 = data_parallel(2 * psi, 2 * psi, 3, n, 8, LINK)
    assert [c.kind for c in zero3] == ["reduce_scatter", "all_gather", "all_gather"]
    assert _sent(zero3) == pytest.approx(1.5 * all_reduce)
    assert data_parallel(2 * psi, 2 * psi, 3, 1, 8, LINK) == []  # no replicas, no traffic


def test_groups_across_nodes() -> None:
    # a data-parallel group of 2 whose devices lie tp = 8 apart spans two nodes: the network's bandwidth
    across = collective("all_reduce", 1e9, 2, 8, LINK)
    assert across.time == pytest.approx(1e9 / 50e9 + 2 * 5e-6)
    # the same two devices side by side: NVLink
    inside = collective("all_reduce", 1e9, 2, 1, LINK)
    assert inside.time == pytest.approx(1e9 / 450e9 + 2 * 1e-6)
