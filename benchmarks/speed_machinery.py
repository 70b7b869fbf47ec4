"""What each piece of opcount's speed machinery buys: time with it and without, side by side.

    .venv/bin/python benchmarks/speed_machinery.py               # every piece, 5 runs
    .venv/bin/python benchmarks/speed_machinery.py --runs 9 --pieces gc replay

Each piece is switched off by a temporary patch made here, in the benchmark alone (no option of
the package): the analysis then takes the path it would take without that piece. Runs with and
without alternate, one intra-op thread, after a warm-up of each (the meta path's process-wide
caches of operator recipes and module templates are warm, as in any analysis after the first);
the table gives the median of ``--runs`` and the ratio without / with, so 1.25 means the piece
takes a fifth off the time. The machine's load average is printed: on a shared machine only the
ratios of interleaved runs mean anything. Pieces that bought under 10% on every model, and
that no target needs, were removed from the package, and their rows from this script
(docs/benchmarks.md keeps the table).

Models: torchvision resnet50 and vit_b_16 (weights=None, 1x3x224x224) and a transformers GPT-2
(12 layers, 256 tokens, logits only) under the jit tracer, the same three on meta tensors
(what ``benchmarks/vs_peers.py``'s meta column measures), and a 70B-parameter Llama-style decoder
built on the meta device (``benchmarks/llama70b_meta.py``, 2048 tokens) under the dispatch tracer.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import re
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]  # this checkout's opcount, whatever is installed
logging.disable(logging.WARNING)

import llama70b_meta  # noqa: E402
import vs_peers  # noqa: E402 -- benchmarks/vs_peers.py: its models

import opcount  # noqa: E402
from opcount import TensorShape  # noqa: E402
from opcount.tracers import dispatch, jit, scoping, tensor_kinds  # noqa: E402

Patch = Callable[[], contextlib.AbstractContextManager[None]]


@contextlib.contextmanager
def patched(*changes: tuple[Any, str, Any]) -> Iterator[None]:
    """Set each ``(owner, name, value)`` for the block, then put the originals back."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in changes]
    for owner, name, value in changes:
        setattr(owner, name, value)
    try:
        yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


def _no_gc_pause() -> contextlib.AbstractContextManager[None]:
    from opcount import analysis

    return patched(*((m, "gc_paused", contextlib.nullcontext) for m in (jit, dispatch, analysis)))


def _no_replay() -> contextlib.AbstractContextManager[None]:
    return patched((tensor_kinds.ShapeTensors, "replayer", lambda self, recorder: None))


def _no_shape_tensors() -> contextlib.AbstractContextManager[None]:
    return patched((dispatch, "ShapeTensors", tensor_kinds.FakeTensors))


def _jit_no_call() -> contextlib.AbstractContextManager[None]:
    # every module marked by a _slow_forward of its own, as modules with hooks are
    return patched((jit, "torch_call", lambda module: False))


def _one_mark_per_event() -> contextlib.AbstractContextManager[None]:
    """jit: a mark node at every module start and end, none shared."""

    def start(self: Any, graph: Any) -> None:
        create, insert = graph.create, graph.insertNode
        events, cuts = self.events, self.cuts

        def event(what: int) -> None:
            events.append(what)
            insert(create(jit._MARK, 0))
            cuts.append(len(events))

        self._event = event

    return patched((jit._Marks, "start", start))


def _dispatch_no_call() -> contextlib.AbstractContextManager[None]:
    # every module scoped by a forward pre/post hook pair, as modules with hooks are; replay
    # needs the replaced __call__, so both sides of this row run without it (see PIECES)
    return patched(
        (scoping, "has_hooks", lambda module: True), (tensor_kinds.ShapeTensors, "replayer", lambda s, r: None)
    )


def _counter_init() -> contextlib.AbstractContextManager[None]:
    """The roll-up's empty Counters made by ``Counter()``."""
    from collections import Counter

    from opcount import rollup

    return patched((rollup, "_counter", Counter))


# piece -> (what it is, the patch it runs with, the patch it runs without, where it applies)
PIECES: dict[str, tuple[str, Patch, Patch, str]] = {
    "replay": ("leaf-module replay (tracers/replay.py)", contextlib.nullcontext, _no_replay, "meta"),
    "shapes": (
        "shape-only tensors vs fake tensors (tracers/shapes.py)",
        contextlib.nullcontext,
        _no_shape_tensors,
        "meta",
    ),
    "jit_call": (
        "jit: replaced nn.Module.__call__ vs _slow_forward on every module",
        contextlib.nullcontext,
        _jit_no_call,
        "jit",
    ),
    "marks": ("jit: module marks shared between events", contextlib.nullcontext, _one_mark_per_event, "jit"),
    "dispatch_call": (
        "dispatch: replaced nn.Module.__call__ vs hooks (replay off on both sides)",
        _no_replay,
        _dispatch_no_call,
        "meta",
    ),
    "gc": ("garbage collector paused (_runtime.gc_paused)", contextlib.nullcontext, _no_gc_pause, "all"),
    "counter": ("empty Counters without Counter.__init__", contextlib.nullcontext, _counter_init, "all"),
}

MODELS = ["resnet50", "vit_b_16", "gpt2", "llama70b"]


def analyses(models: list[str]) -> Iterator[tuple[str, Callable[[], object]]]:
    """(label, one analysis) for every model and tracer measured."""
    for name in models:
        if name == "llama70b":
            yield "llama70b meta", _llama70b_meta()
            continue
        model, inputs = vs_peers.build(name)
        yield f"{name} jit", functools.partial(_jit, model, inputs)
        yield f"{name} meta", functools.partial(_meta, model, inputs)


def _jit(model: torch.nn.Module, inputs: tuple[Any, ...]) -> object:
    return opcount.FlopCountAnalysis(model, inputs).total()


def _meta(model: torch.nn.Module, inputs: tuple[Any, ...]) -> object:
    return opcount.FlopCountAnalysis(model, inputs, tracer="dispatch", device="meta").total()


def _llama70b_meta() -> Callable[[], object]:
    llama = llama70b_meta.llama70b()
    ids = (TensorShape((1, 2048), dtype=torch.long),)

    def analysis() -> object:
        return opcount.FlopCountAnalysis(llama, ids, kwargs={"use_cache": False}, tracer="dispatch").total()

    return analysis


def measure(fn: Callable[[], object], on: Patch, off: Patch, runs: int) -> tuple[float, float, float]:
    """Median seconds with the piece (under ``on``) and without it (under ``off``), runs
    interleaved, the order swapped every round: what one run leaves to the next (garbage the
    paused collector defers) falls on both sides alike. Also the ratio of the total times, which
    counts the rare slow run (a full collection) that a median leaves out. The totals must agree."""
    totals: list[object] = []
    times: tuple[list[float], list[float]] = ([], [])
    for round in range(runs + 1):  # the first round is a warm-up
        for side, patch in ((0, on), (1, off)) if round % 2 else ((1, off), (0, on)):
            with patch():
                start = time.perf_counter()
                totals.append(fn())
                times[side].append(time.perf_counter() - start)
    if len(set(map(repr, totals))) != 1:
        raise AssertionError(f"the piece changed the result: {sorted(set(map(repr, totals)))}")
    with_piece, without = times[0][1:], times[1][1:]
    return statistics.median(with_piece), statistics.median(without), sum(without) / sum(with_piece)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--pieces", nargs="+", choices=list(PIECES), default=list(PIECES))
    parser.add_argument("--models", nargs="+", default=MODELS, help=f"of {MODELS}, mobilenet_v3_large, mlpN")
    args = parser.parse_args()
    for name in args.models:
        if name not in (*MODELS, "mobilenet_v3_large") and not re.fullmatch(r"mlp[0-9]+", name):
            parser.error(f"unknown model {name!r}: choose from {MODELS}, mobilenet_v3_large or mlpN")
    torch.set_num_threads(1)
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("| piece | model | with (s) | without (s) | without / with | total without / with |")
    print("|---|---|---|---|---|---|")
    with torch.no_grad():
        for label, fn in analyses(args.models):
            tracer = label.rsplit(" ", 1)[1]
            for piece in args.pieces:
                title, on, off, where = PIECES[piece]
                if where not in ("all", tracer):
                    continue
                with_piece, without, total = measure(fn, on, off, args.runs)
                print(
                    f"| {title} | {label} | {with_piece:.4f} | {without:.4f} | {without / with_piece:.2f} | {total:.2f} |",
                    flush=True,
                )
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
