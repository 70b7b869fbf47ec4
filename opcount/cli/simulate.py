"""``opcount simulate MODEL``: served traffic on one deployment (:mod:`opcount.llm.serve`), its flags parsed by
:mod:`opcount.cli.flags.simulate`, the model built as ``opcount MODEL`` builds it (:mod:`opcount.cli.llm`), and
the result rendered as a table or as JSON under ``vllm bench serve``'s names."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import TextIO

import torch

from .._version import __version__
from ..llm.serve.simulate import METRICS, PERCENTILES, Simulation, simulate
from .flags import deploy as deploy_flags
from .flags import llm as llm_flags
from .flags.simulate import parse
from .llm import build
from .options import LLMRun
from .progress import Progress
from .warning_capture import captured_warnings, note, warning_lines

LABELS = {"ttft": "TTFT", "tpot": "TPOT", "itl": "ITL", "e2el": "E2E latency"}


def run(argv: Sequence[str], stderr: TextIO) -> tuple[str, str | None]:
    """The command's report, and the file ``-o`` names (None: standard output)."""
    options = parse(argv)
    phase = options.phase
    if phase.llm is None:
        flags = llm_flags.options({})
        wanted = LLMRun(flags, llm_flags.check(flags, phase))
    else:
        wanted, flags = phase.llm, phase.llm.flags
    assert phase.hardware is not None  # refused by parse without it
    spinner = Progress(stderr, enabled=False if phase.debug else None)
    with captured_warnings(phase.debug, True) as caught:
        try:
            hardware = phase.hardware.resolve(spinner.update, note)
            deploy_flags.check(flags, True, hardware)
            llm, label = build(phase, wanted, spinner.update)
            draft = None
            if options.draft is not None:  # built as the model is: its dtypes and layout, none of its --hf-config
                bare = replace(phase, model=options.draft, inputs=replace(phase.inputs, hf_config=()))
                draft = build(bare, wanted, spinner.update)[0]
            torch.manual_seed(0)
            result = simulate(
                llm, options.workload, hardware, deploy_flags.layout(flags.deploy, {}),
                max_num_seqs=options.max_num_seqs, max_num_batched_tokens=flags.deploy.max_batched_tokens,
                block_size=options.block_size, gpu_memory_utilization=flags.deploy.gpu_memory_utilization,
                kernels=flags.kernels, flops_per_mac=phase.analysis.flops_per_mac,
                dispatch=deploy_flags.dispatch(flags.deploy), status=spinner.update,
                speculation=options.speculation, draft=draft,
            )  # fmt: skip
        finally:
            spinner.close()
    if not phase.quiet:
        stderr.writelines(f"opcount: {line}\n" for line in warning_lines(caught.take(), None, phase.verbose))
    if phase.rendering.format == "json":
        out = {"opcount": __version__, "model": phase.model, "hardware": hardware.name, "simulation": result.as_dict()}
        return json.dumps(out, indent=2), phase.output
    return table(result, label, hardware.name, flags.deploy.given), phase.output


def table(s: Simulation, label: str, hardware: str, layout: Sequence[str]) -> str:
    """The simulation as a summary and a table of latency percentiles (milliseconds)."""
    w, e, m = s.workload, s.engine, s.metrics
    sent = f"{w.concurrency} clients in a closed loop" if w.concurrency else f"{w.arrivals} arrivals at {w.rate:g}/s"
    lines = [
        f"{label} on {s.devices} x {hardware}: {w.requests:,} requests of {w.input_len:,} prompt + {w.output_len:,} "
        f"generated tokens, {sent}" + ("" if w.concurrency else f" (seed {w.seed})"),
        f"  engine: max_num_seqs {e.max_num_seqs}, max_num_batched_tokens {e.max_num_batched_tokens:,}, "
        f"block_size {e.block_size}, {e.num_blocks:,} KV blocks ({e.num_blocks * e.block_size:,} tokens)",
    ]
    if s.fit is not None:
        lines.append(
            f"  step cost: fitted from {s.fit.traces} traced phases (decode fit off by {s.fit.check_error:.2%} "
            "at its check point; a prompt chunk is a prompt's cost difference)"
        )
    if s.speculation is not None:
        spec = s.speculation
        drafter = "the model's MTP head" if spec.draft == "mtp" else spec.draft
        rates = ", ".join(f"{a:g}" for a in spec.acceptance)
        lines.append(
            f"  speculative decoding: {spec.tokens} draft token{'s' if spec.tokens > 1 else ''} a step by {drafter}, accepted at {rates}; "
            f"{m['mean_acceptance_length']:.4g} tokens a verify ({spec.expected_length:.4g} expected), "
            f"the draft {m['draft_time_share']:.1%} of the step time"
        )
    lines += [
        f"  ran {m['duration']:.4g} s: {m['steps']:,.0f} steps, {m['preemptions']:,.0f} preemptions, busy "
        f"{m['busy']:.0%}; KV cache in use {m['kv_utilization']:.1%} on average, {m['peak_kv_utilization']:.1%} at most",
        f"  throughput: {m['request_throughput']:.4g} requests/s, {m['output_throughput']:,.4g} output tokens/s "
        f"({m['output_throughput_per_device']:,.4g} per device), {m['total_token_throughput']:,.4g} tokens/s in all",
        "",
        f"  {'(ms)':<13}" + "".join(f"{h:>12}" for h in ("mean", *(f"p{p}" for p in PERCENTILES))),
    ]
    for name in METRICS:
        cells = [m[f"mean_{name}_ms"], *(m[f"p{p}_{name}_ms"] for p in PERCENTILES)]
        lines.append(f"  {LABELS[name]:<13}" + "".join(f"{c:>12,.4g}" for c in cells))
    if s.bound is not None:
        b = s.bound
        lines += [
            "",
            f"  bound (every step at its speed of light): TTFT p50 {b['p50_ttft_ms']:,.4g} ms, TPOT p50 "
            f"{b['p50_tpot_ms']:,.4g} ms, {b['output_throughput']:,.4g} output tokens/s",
        ]
    return "\n".join(lines)
