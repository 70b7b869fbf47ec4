"""``opcount simulate`` on a 70B model against the floor of importing what it needs (issue 38's target:
10,000 requests in under 10 s and 300 MB beyond importing torch, transformers and the model class).

Two fresh processes, side by side:

- floor: import torch, transformers and ``LlamaForCausalLM``, nothing else;
- simulate: the same imports, then the model built on meta, its phases traced and fitted, and the
  workload run through the scheduler (with the bound's run beside it), as ``opcount simulate`` does.

Each reports its seconds and its resident memory (VmRSS after the imports, VmHWM at the end); the
simulation's figures beyond the floor are its own. ``--profile`` prints the simulation's top functions.

    python benchmarks/simulate_70b.py [--requests 10000] [--rate 5] [--tp 2] [--profile]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from floor_process import import_floor, run_child, status_mb

TARGET_SECONDS, TARGET_MB = 10.0, 300.0


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    out = import_floor()
    if args.child == "floor":
        return out | {"peak_mb": status_mb("VmHWM")}
    from opcount.cli.llm import config_of
    from opcount.llm.causal_lm import CausalLM
    from opcount.llm.deploy.layout import Parallel
    from opcount.llm.serve.simulate import simulate
    from opcount.llm.serve.workload import Workload

    marks: dict[str, float] = {}
    begin = time.perf_counter()

    def status(line: str) -> None:
        marks.setdefault(line.split(" ")[0], time.perf_counter() - begin)

    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    llm = CausalLM(config_of("llm:llama-3-70b", [])[0])
    built = time.perf_counter() - begin
    workload = Workload(requests=args.requests, input_len=1024, output_len=128, rate=args.rate)
    result = simulate(llm, workload, "h100-sxm", Parallel(tp=args.tp), status=status)
    total = time.perf_counter() - begin
    if profile is not None:
        import pstats

        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return out | {
        "simulate_s": total, "build_s": built, "trace_s": marks.get("simulating", total) - built,
        "replay_s": total - marks.get("simulating", total), "peak_mb": status_mb("VmHWM"),
        "traced_phases": result.fit.traces if result.fit else 0, "steps": result.metrics["steps"],
        "p50_ttft_ms": result.metrics["p50_ttft_ms"], "p50_tpot_ms": result.metrics["p50_tpot_ms"],
    }  # fmt: skip


def measure(which: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = [__file__, "--child", which, "--requests", str(args.requests), "--rate", str(args.rate)]
    argv += ["--tp", str(args.tp)] + (["--profile"] if args.profile else [])
    return run_child(argv)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=5.0, help="requests a second, Poisson (default 5)")
    parser.add_argument("--tp", type=int, default=2, help="tensor-parallel devices (default 2 H100s)")
    parser.add_argument("--profile", action="store_true", help="print the simulation's top functions (stderr)")
    parser.add_argument("--child", choices=("floor", "simulate"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    floor, sim = measure("floor", args), measure("simulate", args)
    beyond_mb = sim["peak_mb"] - floor["peak_mb"]
    print(f"llama-3-70b on {args.tp} x h100-sxm, {args.requests:,} requests of 1,024 + 128 tokens at {args.rate:g}/s")
    print(
        f"  floor (import torch, transformers, LlamaForCausalLM): {floor['import_s']:.2f} s, {floor['peak_mb']:.0f} MB"
    )
    print(
        f"  simulate beyond it: {sim['simulate_s']:.2f} s (build {sim['build_s']:.2f}, trace {sim['traced_phases']} "
        f"phases {sim['trace_s']:.2f}, replay {sim['steps']:,.0f} steps twice {sim['replay_s']:.2f}), "
        f"{beyond_mb:.0f} MB (peak {sim['peak_mb']:.0f} MB)"
    )
    print(
        f"  ratios to the target: time {sim['simulate_s'] / TARGET_SECONDS:.2f} x {TARGET_SECONDS:g} s, "
        f"memory {beyond_mb / TARGET_MB:.2f} x {TARGET_MB:g} MB; TTFT p50 {sim['p50_ttft_ms']:.4g} ms, "
        f"TPOT p50 {sim['p50_tpot_ms']:.4g} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
