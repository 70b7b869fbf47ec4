"""Regenerate the worked examples of docs/sparsity.md: tables on stdout, charts in docs/img/.

    .venv/bin/python scripts/sparsity_examples.py

Random weights (weights=None), pruned by global magnitude with opcount.sparsity.prune; each
model is traced once and every pruned copy is measured against that trace (``weights=``).
The accuracies of the Sparsity Roofline chart are ILLUSTRATIVE (a made-up formula, printed
on the chart), not measurements: nothing here is trained.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import torchvision

from opcount import MemoryTrafficAnalysis, SparseSupport, prune, sparsity_roofline
from opcount.sparsity.plot import SparsityResult, sparsity_roofline_chart, speedup_chart

IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
HW, DTYPE = "h100-sxm", "float16"
LEVELS = (0.5, 0.75, 0.875, 0.9375)  # the Sparsity Roofline paper's levels (halving the non-zeros each step)
CONFIGS = [
    *(f"unstructured={lv}" for lv in LEVELS),
    *(f"block16={lv}" for lv in LEVELS),
    *(f"block4={lv}" for lv in LEVELS),
    "2:4",
]
# The Sparsity Roofline paper, section 4.2: sparse tensor cores that would also run 1:4, 2:8 and 2:16 at the same peak.
FUTURE = SparseSupport(nm=((2, 4), (1, 4), (2, 8), (2, 16)), nm_precisions=frozenset({"float16"}))
FUTURE_CONFIGS = ("1:4", "2:8", "2:16")
ILLUSTRATIVE = {
    "unstructured": (30, 4),
    "block 4": (40, 3),
    "block 16": (55, 2),
    "2:4": (12, 1),
    "future N:M": (16, 2),
}  # accuracy = 76 - a * level**p: made up, for the chart only


def illustrative_accuracy(series: str, level: float) -> float:
    a, p = ILLUSTRATIVE["future N:M" if series.startswith("future") else series]
    return 76.0 - a * level**p


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)  # the random initial weights decide what global magnitude pruning keeps
    x = torch.randn(1, 3, 224, 224)
    for name in ("resnet50", "vit_b_16"):
        start = time.time()
        model = getattr(torchvision.models, name)(weights=None).eval()
        with torch.no_grad():  # ViT's head starts all zeros: measured, it would already be "100% sparse"
            for p in model.parameters():
                if p.dim() >= 2 and not p.any():
                    p.normal_(0.0, 0.02)
        # Inference kernels fuse batch norm and activations into the convolution before them.
        traced = MemoryTrafficAnalysis(model, (x,), fuse=True)
        dense = sparsity_roofline(traced, hardware=HW, dtype=DTYPE)
        print(f"\n## {name} on {HW}, {DTYPE}, batch 1, fused epilogues\n\n{dense.summary()}\n")
        points: list[SparsityResult] = []
        rows = []
        for config in CONFIGS:
            pruned = prune(model, config)
            report = sparsity_roofline(traced, hardware=HW, dtype=DTYPE, weights=pruned)
            points.append(report.point(label=config.split("=")[0] if "=" not in config else ""))
            rows.append((config, report))
            if config == "unstructured=0.875":
                print(f"{config}: {report.summary()}\n")
                print(report.table(top=8), "\n")
                layer = sparsity_roofline(traced, hardware=HW, dtype=DTYPE, weights=prune(model, config, scope="layer"))
                print(f"same level per layer (scope='layer'): {layer.speedup:.3g}x\n")
            if config == "2:4":
                print(f"{config}: {report.summary()}\n")
                print(report.table(by="module", top=6), "\n")
        for config in FUTURE_CONFIGS:
            report = sparsity_roofline(traced, hardware=HW, dtype=DTYPE, weights=prune(model, config), support=FUTURE)
            points.append(report.point(series="future N:M", label=config))
            rows.append((f"{config} (future)", report))
        print("| configuration | zeros | FLOPs alone | speed of light | sparse formats |")
        print("|---|---|---|---|---|")
        for config, report in rows:
            formats = sorted({w.format.name for w in report.weights})
            print(
                f"| {config} | {100 * report.level:.4g}% | {report.flop_speedup:.3g}x | "
                f"{report.speedup:.3g}x | {', '.join(formats)} |"
            )
        speedup_chart(
            points,
            IMG / f"sparsity_speedup_{name}_{HW}_{DTYPE}.png",
            title=f"{name}, {HW} {DTYPE}, batch 1: speedup over dense by level",
        )
        if name == "resnet50":
            # Points nearer than the printed precision would overlap: the roofline chart takes one label each.
            plotted = [
                SparsityResult(
                    p.series, p.speedup, illustrative_accuracy(p.series, p.level), p.level, p.flop_speedup, p.label
                )
                for p in points
            ]
            sparsity_roofline_chart(
                plotted,
                IMG / f"sparsity_roofline_{name}_{HW}_{DTYPE}.png",
                dense_accuracy=76.0,
                accuracy_label="top-1 accuracy (%), ILLUSTRATIVE",
                title=f"Sparsity Roofline: {name}, {HW} {DTYPE}, batch 1",
                note="Accuracies are ILLUSTRATIVE (76 - a*level^p per pattern), not measured; speedups are computed.",
            )
        print(f"\n({name}: {time.time() - start:.0f} s)")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
