"""A Llama-shaped decoder timed on a CUDA GPU: decode steps and prefills, beside the GEMM rates
and the memory bandwidth the hardware reaches.

    python benchmarks/gpu_llm_step.py [--out DIR] [--layers N]

Needs a CUDA device and plain torch (opcount is not imported: this measures, the LLM path
predicts; docs/llm.md puts the two side by side). The model is Llama-3-8B's shape (hidden 4096,
MLP 14336, 32 query heads, 8 KV heads of 128, vocabulary 128256) with random bfloat16 weights,
written as the kernels a serving engine runs: one GEMM per projection (QKV fused, gate and up
fused), RMSNorm, rotary, SwiGLU, attention through ``scaled_dot_product_attention`` over a static
KV cache (decode: the query heads of a KV head as rows of one attention, the grouped-query form
of FlashDecoding; prefill: causal), the new keys and values written in place. Each step is
captured in a CUDA graph and replayed (no Python or launch gaps between kernels), timed with CUDA
events: the median of 20 replays after 5 warm-ups. Results go to stdout as markdown and, with
--out, to DIR/gpu_llm_step.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

HIDDEN, MLP, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4096, 14336, 32, 8, 128, 128256
DECODE = [(1, 2048), (16, 2048), (64, 2048), (1, 8192), (32, 8192)]  # (batch, cached tokens)
PREFILL = [(1, 2048), (1, 8192), (8, 2048)]  # (batch, prompt tokens)
GEMM_M = [1, 16, 64, 256, 1024, 4096, 16384]
GEMM_NK = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096)]


def timed(fn: Callable[[], Any], graph: bool = True, reps: int = 20) -> float:
    """Median seconds of ``fn``, replayed from a CUDA graph when ``graph``."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    run = fn
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fn()
        run = g.replay
    for _ in range(5):
        run()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


class Llama:
    """Random bfloat16 weights of Llama-3-8B's shape, ``layers`` decoder layers."""

    def __init__(self, layers: int, device: str) -> None:
        def w(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, device=device, dtype=torch.bfloat16) * 0.02

        self.embed = w(VOCAB, HIDDEN)
        self.head = w(VOCAB, HIDDEN)
        self.layers = [
            {
                "qkv": w((HEADS + 2 * KV_HEADS) * HEAD_DIM, HIDDEN),
                "o": w(HIDDEN, HEADS * HEAD_DIM),
                "gate_up": w(2 * MLP, HIDDEN),
                "down": w(HIDDEN, MLP),
                "n1": torch.ones(HIDDEN, device=device, dtype=torch.bfloat16),
                "n2": torch.ones(HIDDEN, device=device, dtype=torch.bfloat16),
            }
            for _ in range(layers)
        ]

    def weight_bytes(self) -> int:
        tensors = [self.embed, self.head, *(t for layer in self.layers for t in layer.values())]
        return sum(t.numel() * t.element_size() for t in tensors)


def rms(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-5)).to(x.dtype) * weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


def step(
    model: Llama, cache: list[tuple[torch.Tensor, torch.Tensor]], ids: torch.Tensor, pos: torch.Tensor
) -> torch.Tensor:
    """One forward over ``ids`` [batch, new] written at positions ``pos`` [new] of the cache."""
    batch, new = ids.shape
    x = model.embed[ids]
    inv = 1.0 / (500000.0 ** (torch.arange(0, HEAD_DIM, 2, device=ids.device).float() / HEAD_DIM))
    angles = pos.float()[:, None] * inv[None, :]
    cos = torch.cat((angles.cos(), angles.cos()), -1).to(x.dtype)[None, None]
    sin = torch.cat((angles.sin(), angles.sin()), -1).to(x.dtype)[None, None]
    for layer, (keys, values) in zip(model.layers, cache, strict=True):
        h = rms(x, layer["n1"])
        q, k, v = (h @ layer["qkv"].T).split([HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], -1)
        q = rotate(q.view(batch, new, HEADS, HEAD_DIM).transpose(1, 2), cos, sin)
        k = rotate(k.view(batch, new, KV_HEADS, HEAD_DIM).transpose(1, 2), cos, sin)
        v = v.view(batch, new, KV_HEADS, HEAD_DIM).transpose(1, 2)
        keys.index_copy_(2, pos, k)
        values.index_copy_(2, pos, v)
        if new == 1:  # decode: the query heads of one KV head are the rows of one attention
            group = HEADS // KV_HEADS
            out = F.scaled_dot_product_attention(q.reshape(batch, KV_HEADS, group, HEAD_DIM), keys, values)
            out = out.reshape(batch, HEADS, 1, HEAD_DIM)
        else:  # prefill from an empty cache: causal over the prompt itself
            group = HEADS // KV_HEADS
            out = F.scaled_dot_product_attention(
                q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1), is_causal=True
            )
        x = x + out.transpose(1, 2).reshape(batch, new, HEADS * HEAD_DIM) @ layer["o"].T
        gate, up = (rms(x, layer["n2"]) @ layer["gate_up"].T).chunk(2, -1)
        x = x + (F.silu(gate) * up) @ layer["down"].T
    return x[:, -1] @ model.head.T  # logits of the last token, as generation asks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--layers", type=int, default=32)
    args = parser.parse_args()
    device = "cuda"
    torch.manual_seed(0)
    result: dict[str, Any] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "layers": args.layers,
        "shape": "Llama-3-8B (hidden 4096, MLP 14336, 32 heads, 8 KV heads, head_dim 128, vocab 128256), bfloat16",
    }
    # what the hardware reaches: a stream and GEMMs of the model's shapes
    big = torch.empty(2**30, dtype=torch.uint8, device=device)
    dst = torch.empty_like(big)
    copy = timed(lambda d=dst, s=big: d.copy_(s), graph=False)
    result["copy_bytes_per_s"] = 2 * big.numel() / copy
    del big, dst
    gemms = []
    for n, k in GEMM_NK:
        b = torch.randn(n, k, device=device, dtype=torch.bfloat16)
        for m in GEMM_M:
            a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
            t = timed(lambda a=a, b=b: a @ b.T, graph=False)
            gemms.append({"m": m, "n": n, "k": k, "seconds": t, "flops_per_s": 2 * m * n * k / t})
        del b
    result["gemm"] = gemms
    model = Llama(args.layers, device)
    result["weight_bytes"] = model.weight_bytes()
    runs = []
    for phase, cases in (("decode", DECODE), ("prefill", PREFILL)):
        for batch, tokens in cases:
            length = tokens + 1 if phase == "decode" else tokens
            shape = (batch, KV_HEADS, length, HEAD_DIM)
            cache = [
                (
                    torch.zeros(shape, device=device, dtype=torch.bfloat16),
                    torch.zeros(shape, device=device, dtype=torch.bfloat16),
                )
                for _ in model.layers
            ]
            new = 1 if phase == "decode" else tokens
            ids = torch.randint(0, VOCAB, (batch, new), device=device)
            pos = (
                torch.arange(tokens, tokens + 1, device=device)
                if phase == "decode"
                else torch.arange(tokens, device=device)
            )
            with torch.inference_mode():
                t = timed(lambda ids=ids, pos=pos, cache=cache: step(model, cache, ids, pos))
            runs.append({"phase": phase, "batch": batch, "tokens": tokens, "seconds": t})
            print(f"{phase} batch {batch} tokens {tokens}: {t * 1e3:.3f} ms", flush=True)
            del cache
            torch.cuda.empty_cache()
    result["steps"] = runs
    print(f"# {result['device']}, torch {result['torch']}, {args.layers} layers")
    print(f"copy: {result['copy_bytes_per_s'] / 1e12:.2f} TB/s (read + written)")
    for g in gemms:
        print(f"gemm {g['m']}x{g['n']}x{g['k']}: {g['flops_per_s'] / 1e12:.1f} TFLOP/s")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu_llm_step.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
