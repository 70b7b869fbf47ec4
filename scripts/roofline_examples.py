"""Regenerate the worked examples of docs/roofline.md: tables on stdout, charts in docs/img/.

    .venv/bin/python scripts/roofline_examples.py

Random weights (weights=None): costs depend on shapes only.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torchvision

from opcount import MemoryTrafficAnalysis, roofline
from opcount.roofline.plot import roofline_chart, time_chart

IMG = Path(__file__).resolve().parent.parent / "docs" / "img"
CASES = (("h100-sxm", "float16"), ("xeon-8480-2s", "float32"))


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    x = torch.randn(1, 3, 224, 224)
    for name in ("resnet50", "vit_b_16"):
        model = getattr(torchvision.models, name)(weights=None).eval()
        memory = MemoryTrafficAnalysis(model, x)  # one trace, shared by every hardware below
        fused = MemoryTrafficAnalysis(model, x, fuse=True)
        for hw, dtype in CASES:
            report = roofline(memory, hardware=hw, dtype=dtype)
            print(f"\n## {name} on {hw}, {dtype}\n\n{report.summary()}\n")
            print(f"fuse=True: {roofline(fused, hardware=hw, dtype=dtype).summary()}\n")
            print(report.table(by="operator", top=8), "\n")
            print(report.table(by="module", top=8), "\n")
            print(report.table(by="module", max_depth=1, top=8), "\n")
            if hw == "h100-sxm":
                roofline_chart(report, IMG / f"roofline_{name}_{hw}_{dtype}.png", by="layer", label_top=4)
                within = "encoder.layers.encoder_layer_0" if name == "vit_b_16" else ""
                time_chart(report, IMG / f"time_{name}_{hw}_{dtype}.png", top=12, within=within)
                if within:
                    print(report.table(by="module", within=within), "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
