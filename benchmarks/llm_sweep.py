"""How fast an LLM decode sweep runs: Llama-3-70B on the meta device, 30 points (batch 1..32 x
cache length 128..4096), through the Python API and through the command line.

- API: build the model once (``CausalLM``), then one ``phase("decode", ...)`` per point with the
  H100 SXM roofline; this process's peak resident memory (VmHWM) after it.
- CLI: ``python -m opcount llm:llama-3-70b --phase decode --sweep batch=... --sweep kv-len=...
  --hardware h100-sxm``, wall time including interpreter start-up and imports, and its peak RSS.
- one CLI point: ``llm:llama-3-70b --meta --phase decode --kv-len 2048``.

Targets: the 30 points under 10 s (API and CLI); one CLI point in under 5 s and under 1 GB of
peak resident memory. Exit status 1 when one is missed.

    python benchmarks/llm_sweep.py [--batch 1,2,4,8,16,32] [--kv-len 128,512,1024,2048,4096] [--layers N]
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's opcount, as the CLI runs it (python -m from ROOT)

from llama70b_meta import peak_rss_gb  # noqa: E402  (this directory is on sys.path when run as a script)

SWEEP_TARGET_S = 10.0
SINGLE_TARGET_S = 5.0
SINGLE_TARGET_GB = 1.0


def numbers(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def api_sweep(
    model: str, batches: list[int], kv_lens: list[int], layers: int | None
) -> tuple[float, float, float, int]:
    """Seconds to import (opcount.llm, transformers), to build, for every point; the number of points."""
    t0 = time.perf_counter()
    import transformers  # noqa: F401  (imported once per process, whatever the model)

    from opcount.llm.catalogue import config
    from opcount.llm.phases import CausalLM

    overrides = {"num_hidden_layers": layers} if layers else {}
    t1 = time.perf_counter()
    llm = CausalLM(config(model, **overrides))
    t2, cpu = time.perf_counter(), time.process_time()
    points = 0
    for batch in batches:
        for kv_len in kv_lens:
            cost = llm.phase("decode", kv_len=kv_len, batch=batch, hardware="h100-sxm")
            assert cost.time is not None
            points += 1
    return t1 - t0, t2 - t1, time.perf_counter() - t2, time.process_time() - cpu, points


def run_cli(args: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds, peak resident GB and stdout of ``python -m opcount ARGS`` in a
    fresh process."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "opcount", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True
        )
        assert proc.stdout is not None
        out = proc.stdout.read()
        # wait4: this child's own rusage (RUSAGE_CHILDREN would mix every child's peak)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"opcount {' '.join(args)} failed:\n{err.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024 / 1e9, out  # ru_maxrss in KiB on Linux


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3-70b", help="a catalogue name (default llama-3-70b)")
    parser.add_argument("--batch", type=numbers, default=[1, 2, 4, 8, 16, 32], metavar="B1,B2,...")
    parser.add_argument("--kv-len", type=numbers, default=[128, 512, 1024, 2048, 4096], metavar="L1,L2,...")
    parser.add_argument("--layers", type=int, help="override the layer count (a quick run; targets not checked)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("opcount").setLevel(logging.ERROR)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"{args.model}, decode sweep on h100-sxm (meta device); load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    overrides = ["--hf-config", f"num_hidden_layers={args.layers}"] if args.layers else []

    import_s, build_s, sweep_s, sweep_cpu, points = api_sweep(args.model, args.batch, args.kv_len, args.layers)
    api_rss = peak_rss_gb()
    print(
        f"  API: imports {import_s:.2f} s, built in {build_s:.2f} s, {points} points in {sweep_s:.2f} s "
        f"({sweep_s / points:.3f} s per point; {sweep_cpu:.2f} s CPU); peak RSS {api_rss:.2f} GB"
    )

    sweep = [
        "--sweep",
        f"batch={','.join(map(str, args.batch))}",
        "--sweep",
        f"kv-len={','.join(map(str, args.kv_len))}",
    ]
    cli_s, cli_cpu, cli_gb, out = run_cli(
        [f"llm:{args.model}", "--phase", "decode", *sweep, "--hardware", "h100-sxm", *overrides]
    )
    rows = sum(1 for line in out.splitlines() if line.startswith("| ") and not line.startswith("| batch"))
    print(
        f"  CLI sweep: {rows} rows in {cli_s:.2f} s wall, {cli_cpu:.2f} s CPU (start-up included), peak RSS {cli_gb:.2f} GB"
    )

    single = [f"llm:{args.model}", "--meta", "--phase", "decode", "--kv-len", "2048", *overrides]
    one_s, one_cpu, one_gb, _ = run_cli(single)
    print(f"  CLI, one point ({' '.join(single)}): {one_s:.2f} s wall, {one_cpu:.2f} s CPU, peak RSS {one_gb:.2f} GB")

    if args.layers:
        print("targets not checked (--layers)")
        return 0
    checks = [
        (f"API build + sweep under {SWEEP_TARGET_S:.0f} s", build_s + sweep_s < SWEEP_TARGET_S),
        (f"CLI sweep under {SWEEP_TARGET_S:.0f} s", cli_s < SWEEP_TARGET_S),
        (f"one CLI point under {SINGLE_TARGET_S:.0f} s", one_s < SINGLE_TARGET_S),
        (f"one CLI point under {SINGLE_TARGET_GB:.0f} GB", one_gb < SINGLE_TARGET_GB),
    ]
    for name, ok in checks:
        print(f"  target: {name}: {verdict(ok)}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
