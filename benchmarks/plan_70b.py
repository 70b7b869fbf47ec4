"""``opcount plan`` on a 70B model over three device types up to 64 devices, against the floor of importing what it
needs (issue 39's target: under 60 s on 2 cores).

Two fresh processes, side by side:

- floor: import torch, transformers and ``LlamaForCausalLM``, nothing else;
- plan: the same imports, then the command as a user runs it (``opcount plan llm:llama-3-70b --concurrency 32
  --input-len 4096 --output-len 1024 --requests 64 --slo-ttft 2s --slo-tpot 50ms --hardware h100-sxm,h200-sxm,b200
  --price h100-sxm=2.5,h200-sxm=3.5,b200=5 --max-devices 64``), its JSON written to a temporary file.

Each reports its seconds (wall, and the process's CPU: the machine may be shared), its resident memory (VmHWM at
the end) and, for the plan, the configurations simulated and the cheapest meeting the targets. ``--profile``
prints the plan's top functions (stderr). ``--model``, ``--hardware``, ``--prices`` and ``--max-devices`` run a
smaller search (the target is stated for the defaults).

    python benchmarks/plan_70b.py [--max-devices 64] [--profile]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from floor_process import import_floor, run_child, status_mb

TARGET_SECONDS = 60.0
HARDWARE, PRICES = "h100-sxm,h200-sxm,b200", "h100-sxm=2.5,h200-sxm=3.5,b200=5"


def command(args: argparse.Namespace, output: str) -> list[str]:
    """The ``opcount plan`` command line measured, its JSON written to ``output``."""
    return [
        "plan", args.model, "--concurrency", "32", "--input-len", "4096", "--output-len", "1024", "--requests", "64",
        "--slo-ttft", "2s", "--slo-tpot", "50ms", "--hardware", args.hardware, "--price", args.prices,
        "--max-devices", str(args.max_devices), "--format", "json", "-o", output,
    ]  # fmt: skip


def child(args: argparse.Namespace) -> dict[str, Any]:
    """One measurement, in this (fresh) process."""
    start, cpu = time.perf_counter(), time.process_time()
    out = import_floor()
    if args.child == "floor":
        return out | {"cpu_s": time.process_time() - cpu, "peak_mb": status_mb("VmHWM")}
    from opcount.cli.main import main

    profile = None
    if args.profile:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    with tempfile.TemporaryDirectory() as folder:
        output = str(Path(folder) / "plan.json")
        status = main(command(args, output))
        if status != 0:
            raise SystemExit(f"opcount plan exited with {status}")
        plan = json.loads(Path(output).read_text())["plan"]
    total, used = time.perf_counter() - start, time.process_time() - cpu
    if profile is not None:
        import pstats

        profile.disable()
        pstats.Stats(profile, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    best = plan["met"][0] if plan["met"] else None
    return out | {
        "plan_s": total, "cpu_s": used, "peak_mb": status_mb("VmHWM"), "simulations": plan["simulations"],
        "met": len(plan["met"]), "searched": len(plan["met"]) + len(plan["missed"]) + len(plan["rejected"]),
        "best": None if best is None else f"{best['devices']} x {best['hardware']} {best['layout']}, "
        f"${best['cost_per_m_tokens']:.3g} per million output tokens",
    }  # fmt: skip


def measure(which: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = [__file__, "--child", which, "--model", args.model, "--hardware", args.hardware]
    argv += ["--prices", args.prices, "--max-devices", str(args.max_devices)] + (["--profile"] if args.profile else [])
    return run_child(argv)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llm:llama-3-70b", help="the model planned (default llm:llama-3-70b)")
    parser.add_argument("--hardware", default=HARDWARE, help=f"the device types searched (default {HARDWARE})")
    parser.add_argument("--prices", default=PRICES, help=f"their dollars per device-hour (default {PRICES})")
    parser.add_argument("--max-devices", type=int, default=64, help="the most devices a configuration (default 64)")
    parser.add_argument("--profile", action="store_true", help="print the plan's top functions (stderr)")
    parser.add_argument("--child", choices=("floor", "plan"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    floor, run = measure("floor", args), measure("plan", args)
    print(
        f"opcount plan {args.model} over {args.hardware} up to {args.max_devices} devices, 64 requests of 4,096 + 1,024"
    )
    print("tokens from 32 clients, targets TTFT p50 2 s and TPOT p50 50 ms")
    print(
        f"  floor (import torch, transformers, LlamaForCausalLM): {floor['import_s']:.2f} s, {floor['peak_mb']:.0f} MB"
    )
    print(
        f"  plan: {run['plan_s']:.1f} s wall, {run['cpu_s']:.1f} s CPU (imports {run['import_s']:.1f} s), "
        f"{run['searched']} configurations searched, {run['simulations']} simulated, {run['met']} meeting the "
        f"targets; peak {run['peak_mb']:.0f} MB ({run['peak_mb'] - floor['peak_mb']:.0f} MB beyond the floor)"
    )
    print(f"  cheapest meeting the targets: {run['best'] or 'none'}")
    print(
        f"  ratio to the target: {run['plan_s'] / TARGET_SECONDS:.2f} x {TARGET_SECONDS:g} s wall "
        f"({run['cpu_s'] / TARGET_SECONDS:.2f} in CPU seconds: the wall time of this one-thread run on an idle machine)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
