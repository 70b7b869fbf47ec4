"""opcount against fvcore and torch's FlopCounterMode, side by side in one process.

    .venv/bin/python benchmarks/compare.py            # every model, 5 runs each
    .venv/bin/python benchmarks/compare.py --quick    # resnet50 and the MLP stacks, 3 runs

For each model it times (median of --runs after one warm-up, methods interleaved so that
machine noise hits them alike): the plain forward pass, bare jit tracing
(torch.jit._get_trace_graph), fvcore's FlopCountAnalysis, FlopCounterMode, and opcount with
each tracer. It prints the ratios that the targets in docs/benchmarks.md are stated in, and
with --memory the peak resident memory of each method in a fresh subprocess.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import logging
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

logging.disable(logging.WARNING)


class LogitsOnly(nn.Module):
    """Bare jit tracing and fvcore need tensor outputs: return only the logits. The cache stays
    on: without it transformers builds its mask with torch.vmap, which jit tracing cannot record."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids).logits


def mlp(blocks: int, width: int = 64) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(blocks):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def build(name: str) -> tuple[nn.Module, tuple[Any, ...]]:
    import torchvision

    if name.startswith("mlp"):
        return mlp(int(name[3:])).eval(), (torch.randn(8, 64),)
    if name == "gpt2":
        import transformers

        model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).eval()
        return LogitsOnly(model).eval(), (torch.randint(0, 50257, (1, 256)),)
    return torchvision.models.get_model(name, weights=None).eval(), (torch.randn(1, 3, 224, 224),)


def methods(model: nn.Module, inputs: tuple[Any, ...]) -> dict[str, Callable[[], object]]:
    import opcount

    found: dict[str, Callable[[], object]] = {
        "forward": lambda: model(*inputs),
        "bare_jit": lambda: torch.jit._get_trace_graph(model, inputs),
        "opcount_jit": lambda: opcount.FlopCountAnalysis(model, inputs).total(),
    }
    try:
        from fvcore.nn import FlopCountAnalysis as FvcoreFlops

        found["fvcore"] = lambda: FvcoreFlops(model, inputs).unsupported_ops_warnings(False).total()
    except ImportError:
        pass

    def flop_counter_mode() -> int:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            model(*inputs)
        return counter.get_total_flops()

    found["flop_counter_mode"] = flop_counter_mode
    if "tracer" in inspect.signature(opcount.FlopCountAnalysis).parameters or "tracer" in inspect.signature(
        opcount.JitModelAnalysis
    ).parameters:
        found["opcount_dispatch"] = lambda: opcount.FlopCountAnalysis(model, inputs, tracer="dispatch").total()
        found["opcount_dispatch_meta"] = lambda: opcount.FlopCountAnalysis(
            model, inputs, tracer="dispatch", device="meta"
        ).total()
    return found


def time_methods(name: str, runs: int) -> dict[str, float]:
    model, inputs = build(name)
    todo = methods(model, inputs)
    times: dict[str, list[float]] = {k: [] for k in todo}
    with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
        for k, fn in list(todo.items()):  # warm-up; a method that fails is dropped
            try:
                fn()
            except Exception as e:
                print(f"  {name}: {k} failed: {type(e).__name__}: {str(e).splitlines()[0][:100]}")
                del todo[k], times[k]
        for _ in range(runs):
            for k, fn in todo.items():
                start = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def peak_rss_mb(name: str, method: str) -> float:
    """Peak resident memory of a fresh process while it runs one method on a built model.

    The peak (VmHWM) is reset after imports and model building through /proc/self/clear_refs,
    so the figure is what the method itself needs on top of the model."""
    code = (
        "import sys, torch; sys.path.insert(0, 'benchmarks'); import compare as c; "
        f"m, i = c.build({name!r}); f = c.methods(m, i)[{method!r}]\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "with torch.no_grad(): f()\n"
        "print([int(l.split()[1]) / 1024 for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="resnet50 and the MLP stacks only")
    parser.add_argument("--memory", action="store_true", help="also measure peak RSS per method")
    parser.add_argument("--models", nargs="*")
    args = parser.parse_args()
    torch.set_num_threads(1)  # steadier timings on a shared machine
    names = args.models or (
        ["resnet50", "mlp1000", "mlp2000", "mlp4000"]
        if args.quick
        else ["resnet50", "mobilenet_v3_large", "vit_b_16", "swin_t", "gpt2", "mlp1000", "mlp2000", "mlp4000"]
    )
    runs = 3 if args.quick and args.runs == 5 else args.runs
    header = ("model", "forward", "bare_jit", "fvcore", "FlopCounterMode", "opcount_jit", "jit/bare", "fvcore/bare",
              "fvcore/opcount_jit", "dispatch", "meta", "fvcore/meta")
    print(" | ".join(header))
    results: dict[str, dict[str, float]] = {}
    for name in names:
        t = results[name] = time_methods(name, runs)
        g = t.get
        row = [name, *(f"{g(k, 0):.3f}" if g(k) else "n/a" for k in ("forward", "bare_jit", "fvcore",
               "flop_counter_mode", "opcount_jit")),
               ratio(g("opcount_jit"), g("bare_jit")), ratio(g("fvcore"), g("bare_jit")),
               ratio(g("fvcore"), g("opcount_jit")),
               f"{g('opcount_dispatch', 0):.3f}" if g("opcount_dispatch") else "n/a",
               f"{g('opcount_dispatch_meta', 0):.3f}" if g("opcount_dispatch_meta") else "n/a",
               ratio(g("fvcore"), g("opcount_dispatch_meta"))]
        print(" | ".join(row), flush=True)
    speedups = [results[n]["fvcore"] / results[n]["opcount_jit"] for n in names if "fvcore" in results[n]]
    if speedups:
        print(f"median speed-up of opcount (jit) over fvcore: {statistics.median(speedups):.2f}x")
    mlps = [n for n in ("mlp2000", "mlp4000") if n in results]
    if len(mlps) == 2:
        print(f"linearity: opcount_jit mlp4000 / mlp2000 = "
              f"{results['mlp4000']['opcount_jit'] / results['mlp2000']['opcount_jit']:.2f} (target <= 2.1)")
    if args.memory:
        print("\npeak RSS (MB) | forward | opcount_jit | analysis adds")
        for name in [n for n in names if not n.startswith("mlp")][:3]:
            fwd, ours = peak_rss_mb(name, "forward"), peak_rss_mb(name, "opcount_jit")
            print(f"{name} | {fwd:.0f} | {ours:.0f} | {100 * (ours - fwd) / fwd:+.1f}%", flush=True)


if __name__ == "__main__":
    main()
