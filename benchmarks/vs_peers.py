"""opcount against fvcore and torch's FlopCounterMode, side by side in one process, with targets.

    .venv/bin/python benchmarks/vs_peers.py                    # every model, 5 runs each
    .venv/bin/python benchmarks/vs_peers.py --quick            # resnet50 and the MLP stacks, 3 runs
    .venv/bin/python benchmarks/vs_peers.py --runs 3 --memory  # also peak memory, and the 70B decoder

For each model it times (median of --runs after one warm-up, methods interleaved so that
machine noise hits them alike, one intra-op thread): the plain forward pass, bare jit tracing
(torch.jit._get_trace_graph), fvcore's FlopCountAnalysis, FlopCounterMode, and opcount with each
tracer: jit, dispatch on real tensors, and dispatch on meta tensors, the latter both warm (its
process-wide caches of operator recipes and module templates filled by the warm-up, as in any
later analysis of a similar model) and cold (both emptied first, as in a fresh process). It
then checks the targets of docs/benchmarks.md against the ratios measured in this run and
prints each as met or missed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import re
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

logging.disable(logging.WARNING)
warnings.filterwarnings("ignore", "`torch.jit.script` is deprecated", FutureWarning)  # fvcore's import
HERE = Path(__file__).resolve().parent
ALL = ["resnet50", "mobilenet_v3_large", "vit_b_16", "swin_t", "gpt2", "mlp1000", "mlp2000", "mlp4000"]
QUICK = ["resnet50", "mlp1000", "mlp2000", "mlp4000"]
COLUMNS = {  # method -> column title
    "forward": "forward",
    "bare_jit": "bare jit",
    "fvcore": "fvcore",
    "flop_counter_mode": "FlopCounterMode",
    "jit": "opcount jit",
    "dispatch": "dispatch",
    "meta": "meta",
    "meta_cold": "meta cold",
}


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
    from opcount.tracers import replay, shapes

    def meta_cold() -> int:  # what a first analysis in a fresh process pays
        shapes._RECIPES.clear()
        replay._TEMPLATES.clear()
        return opcount.FlopCountAnalysis(model, inputs, tracer="dispatch", device="meta").total()

    found: dict[str, Callable[[], object]] = {
        "forward": lambda: model(*inputs),
        "bare_jit": lambda: torch.jit._get_trace_graph(model, inputs),
        "jit": lambda: opcount.FlopCountAnalysis(model, inputs).total(),
        "dispatch": lambda: opcount.FlopCountAnalysis(model, inputs, tracer="dispatch").total(),
        "meta": lambda: opcount.FlopCountAnalysis(model, inputs, tracer="dispatch", device="meta").total(),
        "meta_cold": meta_cold,
    }
    try:
        from fvcore.nn import FlopCountAnalysis as FvcoreFlops

        found["fvcore"] = lambda: FvcoreFlops(model, inputs).unsupported_ops_warnings(False).total()
    except ImportError:
        print("fvcore is not installed: its column and the targets against it are skipped")

    def flop_counter_mode() -> int:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter:
            model(*inputs)
        return counter.get_total_flops()

    found["flop_counter_mode"] = flop_counter_mode
    return found


def time_methods(name: str, runs: int) -> dict[str, float]:
    model, inputs = build(name)
    todo = methods(model, inputs)
    times: dict[str, list[float]] = {k: [] for k in todo}
    with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
        for k, fn in list(todo.items()):  # warm-up; a method that fails is dropped
            try:
                fn()
            except Exception as e:  # reported, and the method left out
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
        f"import sys, torch; sys.path.insert(0, {str(HERE)!r}); import vs_peers as c; "
        f"m, i = c.build({name!r}); f = c.methods(m, i)[{method!r}]\n"
        "open('/proc/self/clear_refs', 'w').write('5')\n"
        "with torch.no_grad(): f()\n"
        "print([int(l.split()[1]) / 1024 for l in open('/proc/self/status') if l.startswith('VmHWM')][0])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def llama70b_peak_gb() -> float:
    """Peak resident memory of benchmarks/llama70b_meta.py (the whole process), in GB."""
    out = subprocess.run([sys.executable, str(HERE / "llama70b_meta.py")], capture_output=True, text=True, check=False)
    found = re.search(r"peak resident memory: ([0-9.]+) GB", out.stdout)
    if found is None:
        raise RuntimeError(f"llama70b_meta.py printed no peak memory:\n{out.stdout}\n{out.stderr}")
    print(out.stdout.rstrip())
    return float(found.group(1))


class Targets:
    """The targets of docs/benchmarks.md, checked against this run's ratios."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def check(self, what: str, values: dict[str, float], ok: Callable[[float], bool], fmt: str = "{:.2f}") -> None:
        if not values:
            return
        missed = {k: v for k, v in values.items() if not ok(v)}
        shown = ", ".join(f"{k} {fmt.format(v)}" for k, v in values.items())
        verdict = "met" if not missed else f"MISSED on {', '.join(missed)}"
        self.lines.append(f"- {what}: {verdict} ({shown})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="resnet50 and the MLP stacks only, 3 runs")
    parser.add_argument("--memory", action="store_true", help="also peak memory, and the 70B decoder on meta")
    parser.add_argument("--models", nargs="*", choices=ALL)
    args = parser.parse_args()
    torch.set_num_threads(1)  # steadier timings on a shared machine
    names = args.models or (QUICK if args.quick else ALL)
    runs = 3 if args.quick and args.runs == 5 else args.runs
    print(f"seconds, median of {runs} runs after a warm-up; torch {torch.__version__}, 1 thread\n")
    print("| model | " + " | ".join(COLUMNS.values()) + " | jit / bare | fvcore / jit | fvcore / meta |")
    print("|---" * (len(COLUMNS) + 4) + "|")
    results: dict[str, dict[str, float]] = {}
    for name in names:
        t = results[name] = time_methods(name, runs)
        cells = [f"{t[k]:.3f}" if k in t else "n/a" for k in COLUMNS]
        ratios = [_ratio(t, "jit", "bare_jit"), _ratio(t, "fvcore", "jit"), _ratio(t, "fvcore", "meta")]
        print(f"| {name} | " + " | ".join(cells + [f"{r:.2f}" if r else "n/a" for r in ratios]) + " |", flush=True)

    targets = Targets()

    def per_model(a: str, b: str) -> dict[str, float]:
        return {n: r for n in names if (r := _ratio(results[n], a, b))}

    targets.check("opcount jit at most 1.1x bare jit tracing", per_model("jit", "bare_jit"), lambda r: r <= 1.1)
    faster = per_model("fvcore", "jit")
    targets.check("opcount jit faster than fvcore on every model", faster, lambda r: r > 1.0)
    if faster:
        targets.check(
            "... and at least 1.2x faster on the median",
            {"median": statistics.median(faster.values())},
            lambda r: r >= 1.2,
        )
    targets.check(
        "dispatch on meta (warm) at least 5x faster than fvcore", per_model("fvcore", "meta"), lambda r: r >= 5
    )
    targets.check(
        "dispatch on meta (cold) at least 5x faster than fvcore", per_model("fvcore", "meta_cold"), lambda r: r >= 5
    )
    if "mlp2000" in results and "mlp4000" in results:
        small, large = results["mlp2000"], results["mlp4000"]
        compared: tuple[str, ...] = ("bare_jit", "jit", "meta", "fvcore")
        linear = {k: large[k] / small[k] for k in compared if k in small and k in large}
        targets.check("cost linear in size: mlp4000 at most 2.1x mlp2000", linear, lambda r: r <= 2.1)
    if args.memory:
        print("\npeak resident memory (MB): | model | forward | opcount jit | analysis adds |")
        added = {}
        for name in [n for n in names if not n.startswith("mlp")][:3]:
            fwd, ours = peak_rss_mb(name, "forward"), peak_rss_mb(name, "jit")
            added[name] = 100 * (ours - fwd) / fwd
            print(f"| {name} | {fwd:.0f} | {ours:.0f} | {added[name]:+.1f}% |", flush=True)
        targets.check(
            "jit analysis adds at most 10% to a forward pass's peak memory", added, lambda p: p <= 10, "{:+.1f}%"
        )
        print()
        targets.check(
            "70B decoder on meta tensors under 2 GB peak resident memory",
            {"llama70b": llama70b_peak_gb()},
            lambda gb: gb < 2,
            "{:.2f} GB",
        )
    print("\ntargets (ratios of this run):\n" + "\n".join(targets.lines))


def _ratio(t: dict[str, float], a: str, b: str) -> float | None:
    return t[a] / t[b] if a in t and b in t else None


if __name__ == "__main__":
    main()
