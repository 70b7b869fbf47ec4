"""``opcount plan MODEL``: the cheapest deployments that meet latency targets (:mod:`opcount.llm.plan`), its flags
parsed by :mod:`opcount.cli.flags.plan`, one model built per weight dtype as ``opcount MODEL`` builds it
(:mod:`opcount.cli.llm`), and the ranking rendered as a table or as JSON. Nothing meeting the targets is an
answer, not an error: a plain line and the closest miss, exit 0."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, TextIO

import torch

from .._version import __version__
from ..errors import OpcountError
from ..llm.causal_lm import CausalLM
from ..llm.plan import frontier
from ..llm.plan.planner import plan
from ..llm.plan.points import Point
from ..llm.plan.search import Plan, Result, Search
from ..llm.precision.dtypes import Precision
from .args import writing
from .flags import deploy as deploy_flags
from .flags import llm as llm_flags
from .flags.plan import PlanOptions, parse
from .llm import build
from .options import LLMRun
from .progress import Progress
from .warning_capture import captured_warnings, warning_lines

SHOWN = 10  # the configurations a table lists; the JSON holds every one


def run(argv: Sequence[str], stderr: TextIO) -> tuple[str, str | None]:
    """The command's report, and the file ``-o`` names (None: standard output)."""
    options = parse(argv)
    phase = options.phase
    if phase.llm is None:
        flags = llm_flags.options({})
        wanted = LLMRun(flags, llm_flags.check(flags, phase))
    else:
        wanted, flags = phase.llm, phase.llm.flags
    spinner = Progress(stderr, enabled=False if phase.debug else None)
    with captured_warnings(phase.debug, True) as caught:
        try:
            for h in options.hardware:
                deploy_flags.check(flags, True, h)
            models: dict[str, CausalLM] = {}
            label = phase.model
            for name, precision in _precisions(options, wanted):
                models[name], label = build(phase, LLMRun(flags, precision), spinner.update)
            draft = None
            if options.draft is not None:  # built as simulate builds it: the dtypes, none of the --hf-config
                bare = replace(phase, model=options.draft, inputs=replace(phase.inputs, hf_config=()))
                draft = build(bare, wanted, spinner.update)[0]
            torch.manual_seed(0)
            search = Search(
                options.workload, options.slos, options.hardware, options.prices, options.max_devices,
                {
                    "max_num_seqs": options.max_num_seqs, "max_num_batched_tokens": flags.deploy.max_batched_tokens,
                    "block_size": options.block_size, "gpu_memory_utilization": flags.deploy.gpu_memory_utilization,
                    "kernels": flags.kernels, "flops_per_mac": phase.analysis.flops_per_mac,
                    "dispatch": deploy_flags.dispatch(flags.deploy), "engine_profile": flags.deploy.engine,
                },
                spinner.update, options.speculation, draft,
            )  # fmt: skip
            found = plan(search, models, disaggregate=options.disaggregate, concurrencies=options.concurrencies)
            if options.frontier:
                spinner.update(f"writing {options.frontier}")
                tpot = next((s.seconds for s in options.slos if s.metric == "tpot"), None)
                with writing("--frontier", options.frontier):
                    frontier.write(points(found), options.frontier, title=f"{label}: {_sent(options)}", slo_tpot_s=tpot)
        finally:
            spinner.close()
    if not phase.quiet:
        stderr.writelines(f"opcount: {line}\n" for line in warning_lines(caught.take(), None, phase.verbose))
    if phase.rendering.format == "json":
        out = {"opcount": __version__, "model": phase.model, "plan": as_dict(found, options)}
        return json.dumps(out, indent=2), phase.output
    return table(found, options, label), phase.output


def _precisions(options: PlanOptions, wanted: LLMRun) -> list[tuple[str, Precision]]:
    """The precisions tried, by their weights' name: each of ``--weight-dtypes`` with the other dtype flags, or
    the phase's own."""
    if not options.weight_dtypes:
        return [(str(wanted.precision.weight), wanted.precision)]
    f, found = wanted.flags, []
    for dtype in options.weight_dtypes:
        try:
            found.append((dtype, Precision(dtype, f.act_dtype or "bfloat16", f.kv_dtype, f.state_dtype)))
        except OpcountError as e:
            raise OpcountError(f"--weight-dtypes {dtype}: {e}") from None
    return found


def points(found: Plan) -> list[Point]:
    """Every configuration that ran, as the frontier reads it (:class:`opcount.llm.plan.points.Point`)."""
    return [r.point for r in (*found.met, *found.missed) if r.point is not None]


def _row(r: Result) -> dict[str, Any]:
    assert r.point is not None
    out: dict[str, Any] = {"precision": r.config.precision, **r.point.as_dict()}
    out["cost_per_m"] = r.cost
    out["device_hours_per_m_output_tokens"] = r.device_hours_per_m
    out["observed_s"] = r.observed
    return out | r.details


def as_dict(found: Plan, options: PlanOptions) -> dict[str, Any]:
    closest = found.closest() if not found.met else None
    return {
        "workload": options.workload.as_dict() | ({"concurrency": list(options.concurrencies)} if
                                                    len(options.concurrencies) > 1 else {}),
        "targets": [{"metric": s.metric, "percentile": s.percentile, "seconds": s.seconds} for s in options.slos],
        "hardware": {h.name: options.prices.get(h.name) for h in options.hardware},
        "max_devices": options.max_devices,
        "simulations": found.simulations,
        "cost_convention": "the run's device-hours x price per device-hour, over its output, input or all tokens",
        "energy_convention": "each device at its board power (power_w, TDP) for the run, per output token",
        "met": [_row(r) for r in found.met],
        "closest_miss": None if closest is None else _row(closest),
        "missed": [_row(r) for r in found.missed if r.point is not None],
        "rejected": [
            {"hardware": r.config.hardware, "layout": r.config.label(), "precision": r.config.precision, "reason": r.rejected}
            for r in found.missed if r.point is None
        ],
    }  # fmt: skip


def _cells(r: Result, n: int, clients: bool) -> str:
    p = r.point
    assert p is not None
    layout = f"{p.layout} @{p.concurrency}" if clients else p.layout
    cost = "-" if r.cost is None else f"{r.cost['output']:.3g}/{r.cost['input']:.3g}/{r.cost['blended']:.3g}"
    joules = "-" if p.joules_per_token is None else f"{p.joules_per_token:.3g}"
    return (
        f"  {n:>3}  {p.hardware:<18} {layout:<30} {p.devices:>4} {r.config.precision:<7} "
        f"{p.ttft_p50_s * 1e3:>8,.4g} {p.ttft_p90_s * 1e3:>8,.4g} {p.tpot_p50_s * 1e3:>7.3g} {p.tpot_p90_s * 1e3:>7.3g} "
        f"{p.tokens_per_s_per_device:>9,.4g} {cost:>20} {joules:>6}  {p.binds}"
    )


HEADER = (
    f"  {'#':>3}  {'hardware':<18} {'layout':<30} {'dev':>4} {'weights':<7} {'TTFT p50':>8} {'p90':>8} "
    f"{'TPOT p50':>7} {'p90':>7} {'tok/s/dev':>9} {'$/M out/in/all':>20} {'J/tok':>6}  binds"
)


def _sent(options: PlanOptions) -> str:
    w, listed = options.workload, options.concurrencies
    if len(listed) > 1:
        return f"{', '.join(map(str, listed))} clients in a closed loop (each searched; layout @clients)"
    if w.concurrency:
        return f"{w.concurrency} clients in a closed loop"
    return f"{w.rate:g} requests/s ({w.arrivals})" if w.rate else "at the trace's own times"


def table(found: Plan, options: PlanOptions, label: str) -> str:
    """The ranking: a summary, the configurations meeting the targets cheapest first (or the closest miss)."""
    w = options.workload
    sent = _sent(options)
    clients = len(options.concurrencies) > 1
    targets = ", ".join(str(s) for s in options.slos) or "none (every configuration that runs)"
    priced = "$ per device-hour " + ", ".join(f"{k} {v:g}" for k, v in options.prices.items()) if options.prices else (
        "no prices: ranked by device-hours per million output tokens"
    )  # fmt: skip
    rejected = [r for r in found.missed if r.point is None]
    lines = [
        f"{label}: {w.describe(sent=False)}, {sent}",
        f"  targets: {targets}",
        f"  searched: {', '.join(h.name for h in options.hardware)} up to {options.max_devices} devices"
        + (", prefill/decode pools" if options.disaggregate else "")
        + f"; {found.simulations} configurations simulated, {len(found.met)} meet the targets, "
        f"{len(rejected)} engines do not fit or cannot serve",
        f"  {priced}; cost = the run's device-hours x price over its output / input / all tokens; "
        "energy at board power (TDP)",
        "",
    ]
    if found.met:
        lines += [HEADER + "   (times in ms)"]
        lines += [_cells(r, i + 1, clients) for i, r in enumerate(found.met[:SHOWN])]
        if len(found.met) > SHOWN:
            lines.append(f"  ... {len(found.met) - SHOWN} more meet the targets (--format json lists every one)")
        return "\n".join(lines)
    closest = found.closest()
    lines.append(f"No configuration meets {targets}.")
    if closest is None:
        reasons = sorted({r.rejected for r in rejected})[:3]
        lines += ["  none of them could serve the workload:", *(f"  - {r}" for r in reasons)]
        return "\n".join(lines)
    missed = ", ".join(
        f"{s} (got {closest.observed[str(s)]:.3g} s)" for s in options.slos if not s.met(closest.observed[str(s)])
    )
    lines += [f"  the closest misses {missed}:", HEADER + "   (times in ms)", _cells(closest, 1, clients)]
    return "\n".join(lines)
