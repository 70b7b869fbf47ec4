"""What the 70B benchmarks (plan_70b.py, simulate_70b.py) share: each measurement runs in a fresh child process
that first imports the floor (torch, transformers and ``LlamaForCausalLM``, what any use of the model class
imports) and prints its figures as one JSON line, which the parent reads back."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def status_mb(field: str) -> float:
    """This process's VmRSS or VmHWM (Linux), in MB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 / 1e6 for line in status if line.startswith(field))


def import_floor() -> dict[str, Any]:
    """Import the floor; its seconds and the resident memory after it."""
    start = time.perf_counter()
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import LlamaForCausalLM  # noqa: F401

    figures: dict[str, Any] = {"import_s": time.perf_counter() - start, "import_rss_mb": status_mb("VmRSS")}
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's opcount, wherever installed
    return figures


def run_child(argv: list[str]) -> dict[str, Any]:
    """Run ``argv`` (a benchmark's ``--child`` command line) and read the JSON its last line prints."""
    done = subprocess.run([sys.executable, *argv], check=True, stdout=subprocess.PIPE, text=True)
    result: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return result
