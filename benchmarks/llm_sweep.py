"""How fast an LLM decode sweep runs: Llama-3-70B on the meta device, 30 points (batch 1..32 x
cache length 128..4096), side by side with what importing alone costs.

- baseline: a fresh ``python -c "import torch, transformers; from transformers import
  LlamaForCausalLM"``: wall time and peak RSS, the floor any command that builds the model pays;
- CLI: ``python -m opcount llm:llama-3-70b --phase decode --sweep batch=... --sweep kv-len=...
  --hardware h100-sxm`` in a fresh process (the sweep fitted from a few traces), wall and CPU time and
  peak RSS, then the same without ``--hardware``;
- API: build the model once, then the 30 points by ``opcount.llm.sweep.points.phase_points`` (a few
  traces), and by one ``phase("decode", ...)`` per point (a trace each, the reference);
- grid: ``phase_points`` over a 1,000-point grid (40 batches x 25 cache lengths) in the same process;
- one CLI point: ``llm:llama-3-70b --meta --phase decode --kv-len 2048`` (before the in-process part,
  whose peak a child's RSS would start from).

Each measurement is the median of ``--runs`` runs. Targets: the CLI sweep within 1.5 s and 150 MB of
the baseline; the 1,000-point grid under 10 s; one CLI point under 5 s and 1 GB. Exit status 1 when
one is missed.

    python benchmarks/llm_sweep.py [--runs 3] [--batch 1,2,4,8,16,32] [--kv-len 128,...] [--layers N]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # this checkout's opcount, as the CLI runs it (python -m from ROOT)

from llama70b_meta import peak_rss_gb  # noqa: E402  (this directory is on sys.path when run as a script)

OVER_BASELINE_S = 1.5
OVER_BASELINE_GB = 0.150
GRID_TARGET_S = 10.0
SINGLE_TARGET_S = 5.0
SINGLE_TARGET_GB = 1.0
BASELINE = "import torch, transformers; from transformers import LlamaForCausalLM"


def numbers(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def run_process(args: list[str]) -> tuple[float, float, float, str]:
    """Wall seconds, CPU seconds, peak resident GB and stdout of ``python ARGS`` in a fresh process."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
        assert proc.stdout is not None
        out = proc.stdout.read()
        # wait4: this child's own rusage (RUSAGE_CHILDREN would mix every child's peak)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            err.seek(0)
            raise SystemExit(f"python {' '.join(args)} failed:\n{err.read().decode()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024 / 1e9, out  # ru_maxrss in KiB on Linux


def median_of(runs: int, measure: Any) -> tuple[float, ...]:
    """Each figure of ``measure()`` (a tuple of numbers, the last may be text) as the median of ``runs`` calls."""
    results = [measure() for _ in range(runs)]
    return tuple(
        statistics.median(r[i] for r in results) if isinstance(results[0][i], (int, float)) else results[-1][i]
        for i in range(len(results[0]))
    )


def api(model: str, batches: list[int], kv_lens: list[int], layers: int | None, reference: bool) -> dict[str, Any]:
    """In this process: imports, build, the sweep fitted, the same traced point by point, the grid."""
    t0 = time.perf_counter()
    import transformers  # noqa: F401  (imported once per process, whatever the model)

    from opcount.llm.causal_lm import CausalLM
    from opcount.llm.models.catalogue import config
    from opcount.llm.sweep.figures import PhaseValues
    from opcount.llm.sweep.points import phase_points

    overrides = {"num_hidden_layers": layers} if layers else {}
    t1 = time.perf_counter()
    llm = CausalLM(config(model, **overrides))
    t2 = time.perf_counter()
    traces = [0]
    original = llm._trace

    def counted(*args: Any, **kwargs: Any) -> Any:  # every trace of the model, fitted or analyzed
        traces[0] += 1
        return original(*args, **kwargs)

    llm._trace = counted  # type: ignore[method-assign]
    points = [(b, 1, k) for b in batches for k in kv_lens]
    fitted = phase_points(llm, "decode", points, hardware="h100-sxm")
    t3 = time.perf_counter()
    out: dict[str, Any] = {"imports": t1 - t0, "build": t2 - t1, "fitted": t3 - t2, "points": len(points)}
    out["traces"] = traces[0]
    if reference:
        traced = [PhaseValues.of(llm.phase("decode", kv_len=k, batch=b, hardware="h100-sxm")) for b, _, k in points]
        out["traced"] = time.perf_counter() - t3
        same = all(
            (a.flops, a.memory, a.time, a.time_bound, a.limited_by)
            == (b.flops, b.memory, b.time, b.time_bound, b.limited_by)
            for a, b in zip(fitted, traced, strict=True)
        )
        out["equal"] = same
    grid = [(b, 1, k) for b in range(1, 41) for k in range(64, 64 + 25 * 160, 160)]
    t4 = time.perf_counter()
    traces[0] = 0
    rows = phase_points(llm, "decode", grid, hardware="h100-sxm")
    out["grid"] = time.perf_counter() - t4
    out["grid_points"], out["grid_traces"] = len(rows), traces[0]
    out["rss"] = peak_rss_gb()
    return out


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3-70b", help="a catalogue name (default llama-3-70b)")
    parser.add_argument("--batch", type=numbers, default=[1, 2, 4, 8, 16, 32], metavar="B1,B2,...")
    parser.add_argument("--kv-len", type=numbers, default=[128, 512, 1024, 2048, 4096], metavar="L1,L2,...")
    parser.add_argument("--layers", type=int, help="override the layer count (a quick run; targets not checked)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each fresh-process measurement (median)")
    parser.add_argument("--no-reference", action="store_true", help="skip the point-by-point traced sweep")
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore", FutureWarning)  # transformers' deprecation notes, once per trace
    logging.basicConfig(level=logging.ERROR)
    logging.getLogger("opcount").setLevel(logging.ERROR)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(
        f"{args.model}, decode sweep on h100-sxm (meta device), median of {args.runs}; "
        f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
    )
    overrides = ["--hf-config", f"num_hidden_layers={args.layers}"] if args.layers else []

    base_s, base_cpu, base_gb, _ = median_of(args.runs, lambda: run_process(["-c", BASELINE]))
    print(f"  baseline ({BASELINE}): {base_s:.2f} s wall, {base_cpu:.2f} s CPU, peak RSS {base_gb:.3f} GB")

    sweep = [
        "--sweep",
        f"batch={','.join(map(str, args.batch))}",
        "--sweep",
        f"kv-len={','.join(map(str, args.kv_len))}",
    ]
    cli = ["-m", "opcount", f"llm:{args.model}", "--phase", "decode", *sweep, "--hardware", "h100-sxm", *overrides]
    cli_s, cli_cpu, cli_gb, out = median_of(args.runs, lambda: run_process(cli))
    rows = sum(1 for line in str(out).splitlines() if line.startswith("| ") and not line.startswith("| batch"))
    print(
        f"  CLI sweep: {rows} rows in {cli_s:.2f} s wall, {cli_cpu:.2f} s CPU (start-up included), peak RSS "
        f"{cli_gb:.3f} GB; over the baseline {cli_s - base_s:+.2f} s wall, {cli_cpu - base_cpu:+.2f} s CPU, "
        f"{1000 * (cli_gb - base_gb):+.0f} MB"
    )

    plain = [c for c in cli if c not in ("--hardware", "h100-sxm")]
    plain_s, plain_cpu, plain_gb, _ = median_of(args.runs, lambda: run_process(plain))
    print(
        f"  CLI sweep without --hardware: {plain_s:.2f} s wall, {plain_cpu:.2f} s CPU, peak RSS {plain_gb:.3f} GB; "
        f"over the baseline {plain_s - base_s:+.2f} s wall, {plain_cpu - base_cpu:+.2f} s CPU"
    )

    # before the in-process part: a child's ru_maxrss starts from the pages it shares with this process
    single = ["-m", "opcount", f"llm:{args.model}", "--meta", "--phase", "decode", "--kv-len", "2048", *overrides]
    one_s, one_cpu, one_gb, _ = median_of(args.runs, lambda: run_process(single))
    print(
        f"  CLI, one point ({' '.join(single[2:])}): {one_s:.2f} s wall, {one_cpu:.2f} s CPU, peak RSS {one_gb:.2f} GB"
    )

    a = api(args.model, args.batch, args.kv_len, args.layers, not args.no_reference)
    print(
        f"  API: imports {a['imports']:.2f} s, built in {a['build']:.2f} s, {a['points']} points in {a['fitted']:.2f} s "
        f"({a['traces']} traces)"
        + (f"; traced point by point in {a['traced']:.2f} s, figures equal: {a['equal']}" if "traced" in a else "")
    )
    print(
        f"  API grid: {a['grid_points']} points in {a['grid']:.2f} s ({a['grid_traces']} traces); "
        f"peak RSS {a['rss']:.2f} GB"
    )

    if args.layers:
        print("targets not checked (--layers)")
        return 0
    checks = [
        (f"CLI sweep within {OVER_BASELINE_S} s of the baseline", cli_s - base_s <= OVER_BASELINE_S),
        (f"CLI sweep within {1000 * OVER_BASELINE_GB:.0f} MB of the baseline", cli_gb - base_gb <= OVER_BASELINE_GB),
        (f"1,000-point grid under {GRID_TARGET_S:.0f} s", a["grid"] < GRID_TARGET_S),
        (f"one CLI point under {SINGLE_TARGET_S:.0f} s", one_s < SINGLE_TARGET_S),
        (f"one CLI point under {SINGLE_TARGET_GB:.0f} GB", one_gb < SINGLE_TARGET_GB),
    ]
    if "equal" in a:
        checks.append(("fitted figures equal the traced ones", a["equal"]))
    for name, ok in checks:
        print(f"  target: {name}: {verdict(ok)}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
