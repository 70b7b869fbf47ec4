"""A Llama-style decoder with ~70B parameters analyzed on the meta device by the dispatch tracer.

The model is built from a transformers ``LlamaConfig`` under ``torch.device("meta")``: its
weights (~140 GB in bf16) are never allocated, and the analysis runs no arithmetic. The script
prints the parameter count, the forward FLOPs (and, with ``--train``, a training step's), the
time taken and the process's peak resident memory, which should stay under 2 GB.

    python benchmarks/llama70b_meta.py [--seq 2048] [--batch 1] [--train]
"""

from __future__ import annotations

import argparse
import logging
import resource
import sys
import time

import torch

from opcount import FlopCountAnalysis, TensorShape


def llama70b() -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=8192,
        intermediate_size=28672,
        num_hidden_layers=80,
        num_attention_heads=64,
        num_key_value_heads=8,
        vocab_size=32000,
        max_position_embeddings=4096,
        torch_dtype=torch.bfloat16,
    )
    with torch.device("meta"):
        return LlamaForCausalLM(config).to(torch.bfloat16).eval()  # type: ignore[arg-type]  # transformers' typing of .to


def peak_rss_gb() -> float:
    """This process's peak resident memory. On Linux VmHWM: ru_maxrss would also count the peak of
    a parent that started this process (it survives exec), e.g. benchmarks/vs_peers.py's."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) * 1024 / 1e9 for line in status if line.startswith("VmHWM"))
    except (OSError, StopIteration):
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in KiB on Linux, bytes on macOS
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=2048, help="tokens per sequence (default 2048)")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--train", action="store_true", help="also count a training step (forward + backward)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)

    start = time.perf_counter()
    model = llama70b()
    built = time.perf_counter()
    params = sum(p.numel() for p in model.parameters())
    ids = TensorShape((args.batch, args.seq), dtype=torch.long)
    print(f"Llama-style decoder: {params / 1e9:.2f}B parameters, input {args.batch}x{args.seq} tokens (meta device)")
    print(f"  built in {built - start:.1f} s, peak RSS so far {peak_rss_gb():.2f} GB")

    totals: dict[str, int] = {}
    for mode in ["eval", "train"] if args.train else ["eval"]:
        t0 = time.perf_counter()
        analysis = FlopCountAnalysis(model, (ids,), kwargs={"use_cache": False}, tracer="dispatch", mode=mode)
        total = totals[mode] = analysis.total()
        elapsed = time.perf_counter() - t0
        top = ", ".join(f"{op} {v / 1e12:.1f}T" for op, v in analysis.by_operator().most_common(3))
        print(f"  {mode:5s}: {total / 1e12:.2f} TFLOPs (1 MAC = 1 flop; {top}) in {elapsed:.1f} s")
        # the usual estimate: one MAC per parameter per token forward (2N flops with MAC = 2)
        print(f"         {total / (args.batch * args.seq * params):.2f} MACs per parameter per token")
        if analysis.unsupported_ops():
            print(f"         unsupported: {dict(analysis.unsupported_ops())}")
    if args.train:
        print(f"  train / eval = {totals['train'] / totals['eval']:.3f} (3 expected: backward = 2 x forward)")
    rss = peak_rss_gb()
    print(f"peak resident memory: {rss:.2f} GB ({'under' if rss < 2 else 'OVER'} the 2 GB target)")
    return 0 if rss < 2 else 1


if __name__ == "__main__":
    sys.exit(main())
