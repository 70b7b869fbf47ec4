"""``opcount simulate MODEL``: served traffic on one deployment (:mod:`opcount.llm.serve`), its flags parsed by
:mod:`opcount.cli.flags.simulate`, the model built as ``opcount MODEL`` builds it (:mod:`opcount.cli.llm`), and
the result rendered as a table, as JSON (``vllm bench serve``'s names and the summary in seconds) or as one CSV
row; goodput under the latency targets; and the files beside it: a CSV of one row a request, a chart of the
latencies over time, the schedule as a Chrome/Perfetto trace. A progress bar on stderr while the run goes (a
terminal only, not under --quiet or --debug)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TextIO

import torch

from .._version import __version__
from ..files import write_text
from ..llm.serve import outputs, timeline
from ..llm.serve.simulate import METRICS, PERCENTILES, Simulation, simulate
from .args import writing
from .flags import deploy as deploy_flags
from .flags import llm as llm_flags
from .flags.simulate import SimulateOptions, parse
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
    spinner = Progress(stderr, enabled=False if phase.debug or phase.quiet else None)
    schedule = timeline.Schedule() if options.schedule_trace else None
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
                block_size=options.block_size, enable_prefix_caching=options.enable_prefix_caching,
                gpu_memory_utilization=flags.deploy.gpu_memory_utilization,
                kernels=flags.kernels, flops_per_mac=phase.analysis.flops_per_mac,
                dispatch=deploy_flags.dispatch(flags.deploy), status=spinner.update, slos=options.slos,
                on_step=schedule, progress=_bar(spinner.update) if spinner.enabled else None,
                speculation=options.speculation, draft=draft, engine_profile=flags.deploy.engine,
            )  # fmt: skip
            _files(options, result, schedule, label, hardware.name, spinner.update)
        finally:
            spinner.close()
    if not phase.quiet:
        stderr.writelines(f"opcount: {line}\n" for line in warning_lines(caught.take(), None, phase.verbose))
    if phase.rendering.format == "json":
        out = {"opcount": __version__, "model": phase.model, "hardware": hardware.name, "simulation": result.as_dict()}
        return json.dumps(out, indent=2), phase.output
    if phase.rendering.format == "csv":
        return outputs.summary_csv(options.workload.as_dict(), result.metrics), phase.output
    return table(result, label, hardware.name, flags.deploy.given), phase.output


BAR = 24  # the progress bar's cells


def _bar(update: Callable[[str], None]) -> Callable[[int, int], None]:
    """The scheduler's progress (requests done of all) as a bar on the status line."""

    def show(done: int, total: int) -> None:
        full = BAR * done // total
        update(f"simulating |{'#' * full}{'.' * (BAR - full)}| {done:,} of {total:,} requests done")

    return show


def _files(
    options: SimulateOptions,
    result: Simulation,
    schedule: timeline.Schedule | None,
    label: str,
    hardware: str,
    status: Callable[[str], None],
) -> None:
    """The files asked for beside the report: the CSV a request, the schedule's trace, the latency chart."""
    if options.per_request:
        status(f"writing {options.per_request}")
        with writing("--per-request", options.per_request):
            write_text(options.per_request, outputs.per_request_csv(result.per_request))
    if options.schedule_trace and schedule is not None:
        status(f"writing {options.schedule_trace}")
        trace = timeline.chrome_trace(schedule, result.per_request, name=f"{label} on {hardware}")
        with writing("--schedule-trace", options.schedule_trace):
            write_text(options.schedule_trace, json.dumps(trace))
    if options.phase.plot:
        from ..llm.serve.plot import save_latency_chart

        status(f"plotting {options.phase.plot}")
        w = result.workload
        with writing("--plot", options.phase.plot):
            save_latency_chart(
                result.per_request, options.phase.plot,
                title=f"{label} on {result.devices} x {hardware}: {w.describe(sent=False)}",
            )  # fmt: skip


def table(s: Simulation, label: str, hardware: str, layout: Sequence[str]) -> str:
    """The simulation as a summary and a table of latency percentiles (milliseconds)."""
    w, e, m = s.workload, s.engine, s.metrics
    lines = [
        f"{label} on {s.devices} x {hardware}: {w.describe()}",
        f"  engine: max_num_seqs {e.max_num_seqs}, max_num_batched_tokens {e.max_num_batched_tokens:,}, "
        f"block_size {e.block_size}, {e.num_blocks:,} KV blocks ({e.num_blocks * e.block_size:,} tokens)"
        + (f", {e.blocks_per_sequence} a running sequence holds besides" if e.blocks_per_sequence else ""),
    ]
    if s.fit is not None:
        lines.append(
            f"  step cost: fitted from {s.fit.traces} traced phases (off by {s.fit.check_error:.2%} for decode, "
            f"{s.fit.chunk_error:.2%} for a prompt chunk over a cached prefix, at their check points)"
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
        f"{m['busy']:.0%}; KV cache in use {m['kv_utilization']:.1%} on average, {m['peak_kv_utilization']:.1%} at most"
        + (f"; prefix cache hit rate {m['prefix_cache_hit_rate']:.1%}" if "prefix_cache_hit_rate" in m else ""),
        f"  throughput: {m['request_throughput']:.4g} requests/s, {m['output_throughput']:,.4g} output tokens/s "
        f"({m['output_throughput_per_device']:,.4g} per device), {m['total_token_throughput']:,.4g} tokens/s in all",
        "",
        f"  {'(ms)':<13}" + "".join(f"{h:>12}" for h in ("mean", *(f"p{p}" for p in PERCENTILES))),
    ]
    for name in METRICS:
        cells = [m[f"mean_{name}_ms"], *(m[f"p{p}_{name}_ms"] for p in PERCENTILES)]
        lines.append(f"  {LABELS[name]:<13}" + "".join(f"{c:>12,.4g}" for c in cells))
    if s.goodput is not None:
        lines += ["", *goodput_lines(s.goodput)]
    if s.bound is not None:
        b = s.bound
        lines += [
            "",
            f"  bound (every step at its speed of light): TTFT p50 {b['p50_ttft_ms']:,.4g} ms, TPOT p50 "
            f"{b['p50_tpot_ms']:,.4g} ms, {b['output_throughput']:,.4g} output tokens/s",
        ]
    return "\n".join(lines)


def goodput_lines(g: outputs.Goodput) -> list[str]:
    """Goodput, and each target's percentile against it: met or missed."""
    share = g.good / g.completed if g.completed else 0.0
    lines = [
        f"  goodput: {g.requests_per_s:.4g} requests/s: {g.good:,} of {g.completed:,} requests ({share:.1%}) met "
        "every target"
    ]
    for c in g.checks:
        s = c.slo
        verdict = "met" if c.met else "missed"
        lines.append(
            f"    {LABELS[s.metric]} p{s.percentile:g} {_duration(c.value)} against {_duration(s.seconds)}: {verdict}"
        )
    return lines


def _duration(seconds: float) -> str:
    return f"{seconds:,.4g} s" if seconds >= 1 else f"{seconds * 1e3:.4g} ms"
