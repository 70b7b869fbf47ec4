"""Predicted beside measured on a CUDA GPU: opcount's speed of light against CUDA-event timings.

    python benchmarks/gpu_roofline.py [--hardware h100-sxm] [--out DIR] [--compile] [--cases resnet50:64 ...]

(with opcount installed, or from the repository root with PYTHONPATH=.)

Needs a CUDA device (the tests never run it). For each model and batch size it predicts the
float16 speed-of-light time with ``roofline()`` (traced on the meta device: no weights touched),
plain and with fused epilogues (``fuse=True``), then times the real float16 forward pass on the
GPU: eager, eager in channels-last memory format (CNNs), and replayed from a CUDA graph (no
Python or launch overhead), each the median of 20 passes after 5 warm-ups, timed with CUDA
events; with --compile also torch.compile's "reduce-overhead" mode (fused kernels replayed from
a CUDA graph), whose fusion the ``fuse=True`` prediction assumes. It also measures what the hardware preset assumes: a large float16 matrix product's
rate and a device-to-device copy's bandwidth. Last, ``profile()`` breaks one model down per
operator on the GPU, measured beside predicted. A markdown report goes to stdout and, with
--out, to DIR/gpu_roofline.md.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torchvision

from opcount import MemoryTrafficAnalysis, TensorShape, profile, roofline
from opcount.hardware.lookup import hardware as lookup_hardware

logging.disable(logging.WARNING)

CASES = [
    ("resnet50", 1),
    ("resnet50", 64),
    ("vit_b_16", 1),
    ("vit_b_16", 64),
    ("mobilenet_v3_large", 1),
    ("mobilenet_v3_large", 64),
]


def cuda_time(fn: Callable[[], object], repeats: int = 20, warmup: int = 5) -> float:
    """Median seconds of ``fn()`` on the current stream, timed with CUDA events."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def graphed(model: torch.nn.Module, x: torch.Tensor) -> Callable[[], object]:
    """The forward pass captured in a CUDA graph: replays the kernels without Python or launches."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        model(x)
    return graph.replay


def peaks() -> list[str]:
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    mm = cuda_time(lambda: a @ b, repeats=10, warmup=3)
    src = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    copy = cuda_time(lambda: dst.copy_(src), repeats=10, warmup=3)
    return [
        f"- float16 matrix product {n}^3: {2 * n**3 / mm / 1e12:.0f} TFLOP/s measured",
        f"- device-to-device copy of 1 GiB: {2 * 2**30 / copy / 1e12:.2f} TB/s measured (bytes read + written)",
    ]


def predict(name: str, batch: int, hw: str) -> tuple[float, float, float, float]:
    """Speed of light (s) plain and fused, and the model's FLOPs and bytes (plain)."""
    model = torchvision.models.get_model(name, weights=None).eval()
    x = TensorShape((batch, 3, 224, 224))
    plain = roofline(MemoryTrafficAnalysis(model, x, tracer="dispatch", device="meta"), hardware=hw, dtype="float16")
    fused = roofline(
        MemoryTrafficAnalysis(model, x, tracer="dispatch", device="meta", fuse=True), hardware=hw, dtype="float16"
    )
    return plain.total_time, fused.total_time, plain.total_flops, plain.total_bytes


def measure(name: str, batch: int, compiled: bool) -> dict[str, float]:
    model = torchvision.models.get_model(name, weights=None).eval().half().cuda()
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.float16)
    found = {}
    with torch.no_grad():
        found["eager"] = cuda_time(lambda: model(x))
        if name != "vit_b_16":
            model = model.to(memory_format=torch.channels_last)
            x = x.to(memory_format=torch.channels_last)
            found["channels_last"] = cuda_time(lambda: model(x))
        found["cuda_graph"] = cuda_time(graphed(model, x))
        if compiled:
            fast = torch.compile(model, mode="reduce-overhead")
            found["compiled"] = cuda_time(lambda: fast(x), warmup=8)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="h100-sxm")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compile", action="store_true", help="also time torch.compile(mode='reduce-overhead')")
    parser.add_argument(
        "--cases",
        nargs="*",
        help="model:batch pairs (default: resnet50, vit_b_16, mobilenet_v3_large at batch 1 and 64)",
    )
    parser.add_argument("--no-profile", action="store_true", help="skip the per-operator profile")
    args = parser.parse_args()
    cases = [(c.split(":")[0], int(c.split(":")[1])) for c in args.cases] if args.cases else CASES
    if not torch.cuda.is_available():
        sys.exit("no CUDA device: this benchmark measures a GPU")
    torch.backends.cudnn.benchmark = True
    props = torch.cuda.get_device_properties(0)
    hw = lookup_hardware(args.hardware)
    lines = [
        f"# Predicted beside measured: {props.name}, preset `{hw.name}`",
        "",
        (
            f"torch {torch.__version__}, torchvision {torchvision.__version__}, {props.multi_processor_count} SMs; "
            f"float16, eval, median of 20 passes timed with CUDA events."
        ),
        "",
        "What the preset assumes, measured:",
        "",
        *peaks(),
        "",
        (
            "| model | batch | GFLOP | MB moved | speed of light | fused | eager | channels last | CUDA graph | "
            "compiled | % of speed of light (fused / best) |"
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for name, batch in cases:
        start = time.perf_counter()
        sol, sol_fused, flops, nbytes = predict(name, batch, args.hardware)
        measured = measure(name, batch, args.compile)
        best = min(measured.values())
        cells = [
            f"{measured[k] * 1e6:.0f} us" if k in measured else "-"
            for k in ("eager", "channels_last", "cuda_graph", "compiled")
        ]
        row = (
            f"| {name} | {batch} | {flops / 1e9:.1f} | {nbytes / 1e6:.0f} | {sol * 1e6:.0f} us | "
            f"{sol_fused * 1e6:.0f} us | " + " | ".join(cells) + f" | {100 * sol_fused / best:.0f}% |"
        )
        lines.append(row)
        print(row + f"  ({time.perf_counter() - start:.0f} s)", flush=True)

    if args.no_profile:
        _write(args.out, lines)
        return
    # one model per operator: where the time goes, measured beside predicted
    model = torchvision.models.resnet50(weights=None).eval().half().cuda()
    x = torch.randn(64, 3, 224, 224, device="cuda", dtype=torch.float16)
    report = profile(model, x, hardware=args.hardware, dtype="float16", repeats=10)
    for text in (
        f"\n## resnet50, batch 64, per operator (profile())\n\n{report.summary()}\n",
        report.table(by="operator", top=10),
        report.table(max_depth=1),
    ):
        lines.append(text)
        print(text, flush=True)
    _write(args.out, lines)


def _write(out: Path | None, lines: list[str]) -> None:
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "gpu_roofline.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
