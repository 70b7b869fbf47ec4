"""Every ```python block of README.md and docs/*.md runs.

A page's blocks run in order in one namespace, as a reader would paste them, in a temporary
directory (files they write land there). Code a page assumes but does not show (a model ``model``
and its input ``x``, the tiny model of tests/fixtures/report_models.py, a hardware file) is set up by
``PRELUDES`` below. A comment on the line before a block marks it:

- ``<!-- slow: why -->``: run only under ``pytest -m slow`` (a full-size model, a calibration);
- ``<!-- no-run: why -->``: never run here (needs a CUDA GPU, the network, your own data).

The default run executes a page's quick blocks; the slow run executes every block but the no-run ones.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)
MARKER = re.compile(r"<!--\s*(slow|no-run)\s*:\s*([^>]*?)\s*-->\s*\Z")

_SMALL_MODEL = """
import torch
from torch import nn
model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.Softplus(), nn.Flatten(), nn.Linear(8 * 30 * 30, 10)).eval()
x = torch.randn(2, 3, 32, 32)
"""

PRELUDES: dict[str, str] = {
    "docs/dispatch.md": _SMALL_MODEL
    + """
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM
y = torch.randint(0, 10, (2,))
config = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2)
""",
    "docs/hardware.md": """
from pathlib import Path
Path("my-npu.toml").write_text('name = "my-npu"\\nbandwidth = 64e9\\n[peak.tensor]\\nfloat16 = 4.096e12\\n')
""",
    "docs/profiling.md": """
import torch, torchvision
from torch import nn
from opcount import profile
""",
    "docs/reports.md": """
import torch
from pathlib import Path
from opcount import FlopCountAnalysis
from opcount.report import to_csv
from tests.fixtures.report_models import tiny  # the page defines its own before using it
x = torch.randn(1, 3, 224, 224)
Path("resnet50.csv").write_text(to_csv(FlopCountAnalysis(*tiny())))
""",
    "docs/roofline.md": """
import torch
from torch import nn
lenet = nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2), nn.Flatten(),
                      nn.Linear(800, 500), nn.ReLU(), nn.Linear(500, 10)).eval()
x = torch.randn(1, 1, 28, 28)
""",
    "docs/sparsity.md": """
my_measured_accuracies = {"2:4": 75.9, "unstructured=0.875": 73.4}  # made up, as the page says
""",
    "docs/tracing.md": _SMALL_MODEL,
}


@dataclass(frozen=True)
class Block:
    line: int
    code: str
    marker: str  # "", "slow" or "no-run"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip()
        marker = MARKER.search(before)
        found.append(Block(text.count("\n", 0, match.start()) + 1, match.group(1), marker.group(1) if marker else ""))
    return found


def _name(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def run_page(page: Path, markers: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from opcount import report

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OPCOUNT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.syspath_prepend(str(ROOT))  # `from tests.fixtures.report_models import tiny`
    columns, threads = dict(report.COLUMNS), torch.get_num_threads()
    namespace: dict[str, object] = {"__name__": "__doc_example__"}
    try:
        exec(compile(PRELUDES.get(_name(page), ""), f"{_name(page)} (prelude)", "exec"), namespace)
        for block in blocks(page):
            if block.marker in markers:
                exec(compile(block.code, f"{_name(page)}:{block.line}", "exec"), namespace)
    finally:  # what an example changes for the whole process
        report.COLUMNS.clear()
        report.COLUMNS.update(columns)
        torch.set_num_threads(threads)


QUICK = [p for p in PAGES if any(b.marker == "" for b in blocks(p))]
SLOW = [p for p in PAGES if any(b.marker == "slow" for b in blocks(p))]


@pytest.mark.parametrize("page", QUICK, ids=_name)
def test_quick_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page(page, {""}, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW, ids=_name)
def test_every_example_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_page(page, {"", "slow"}, tmp_path, monkeypatch)


def test_markers_are_recognised() -> None:
    """A misspelt marker would silently run (or skip) a block: every marker comment before a
    block must be one of the two."""
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip().rsplit("\n", 1)[-1]
            if before.startswith("<!--"):
                assert MARKER.search(before), f"{_name(page)}: unknown marker {before!r}"


def test_hardware_file_example_loads_every_field(tmp_path: Path) -> None:
    """hardware.md's TOML example, as printed: a key written after a table header belongs to that
    table, so ``memory_bytes`` once landed in ``[peak.vector]`` and the file was refused."""
    from opcount.hardware.lookup import hardware

    text = (Path(__file__).parents[2] / "docs" / "hardware.md").read_text()
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "my-npu.toml"
    path.write_text(block)
    hw = hardware(path)
    assert hw.name == "my-npu" and hw.memory_bytes == 32e9  # the file's own figure
    assert hw.interconnect is not None and hw.interconnect.devices_per_node == 8
