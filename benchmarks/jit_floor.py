"""The floor under any counter built on torch.jit tracing: reading the traced graph.

A jit-based counter traces the model, then asks the graph, node by node through torch's pybind
API, for each operator's kind, its inputs and its outputs' shapes. This script times that
reading alone, with no other work, on graphs made by bare jit tracing, next to bare tracing
itself and opcount's whole jit analysis (median of --runs, interleaved, one thread):

    .venv/bin/python benchmarks/jit_floor.py                      # mlp1000, mlp2000, resnet50
    .venv/bin/python benchmarks/jit_floor.py --models mlp4000 --runs 9

- nodes: every node's kind (the walk that finds the operators);
- + inputs: each operator's input values (``inputsSize``, ``inputsAt``);
- + outputs: each operator's output values and their shapes and dtypes (``outputsSize``,
  ``outputsAt``, ``type``, ``sizes``, ``scalarType``).

The last is what any counter must read at least; the script prints it as a share of bare
tracing, against the 10% that the target "at most 1.1x bare jit tracing" leaves for the whole
analysis.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from vs_peers import build  # benchmarks/ is the script's directory, first on sys.path


def walk_nodes(graph: torch._C.Graph) -> None:
    for node in graph.nodes():
        node.kind()


def walk_inputs(graph: torch._C.Graph) -> None:
    for node in graph.nodes():
        if not node.kind().startswith("prim::"):
            list(map(node.inputsAt, range(node.inputsSize())))


def walk_outputs(graph: torch._C.Graph) -> None:
    for node in graph.nodes():
        if not node.kind().startswith("prim::"):
            list(map(node.inputsAt, range(node.inputsSize())))
            for value in map(node.outputsAt, range(node.outputsSize())):
                typ = value.type()
                if isinstance(typ, torch._C.TensorType):
                    typ.sizes()
                    typ.scalarType()


READS: dict[str, Callable[[torch._C.Graph], None]] = {
    "nodes": walk_nodes,
    "+ inputs": walk_inputs,
    "+ outputs": walk_outputs,
}


def measure(name: str, runs: int) -> dict[str, float]:
    import opcount

    model, inputs = build(name)
    times: dict[str, list[float]] = {k: [] for k in ("bare jit", *READS, "opcount jit")}

    def timed(key: str, fn: Callable[..., object], *args: object) -> None:
        start = time.perf_counter()
        fn(*args)  # what it returns is freed inside the timer, as a caller would
        times[key].append(time.perf_counter() - start)

    with torch.no_grad():
        for run in range(runs + 1):  # the first is a warm-up
            timed("bare jit", lambda: torch.jit._get_trace_graph(model, inputs))
            for key, read in READS.items():
                graph, _ = torch.jit._get_trace_graph(model, inputs)  # a fresh graph: nothing read yet
                timed(key, read, graph)
                del graph
            timed("opcount jit", lambda: opcount.FlopCountAnalysis(model, inputs).total())
            if run == 0:
                for values in times.values():
                    values.clear()
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--models", nargs="*", default=["mlp1000", "mlp2000", "resnet50"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"milliseconds, median of {args.runs} runs; in brackets, the share of bare jit tracing\n")
    print("| model | bare jit | " + " | ".join(READS) + " | opcount jit |")
    print("|---" * (len(READS) + 3) + "|")
    for name in args.models:
        t = measure(name, args.runs)
        bare = t["bare jit"]
        cells = [f"{1e3 * t[k]:.1f} ({t[k] / bare:.0%})" for k in (*READS, "opcount jit")]
        print(f"| {name} | {1e3 * bare:.1f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
