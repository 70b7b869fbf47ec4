"""The command line's training step (``--mode train`` with ``--optimizer``, ``--recompute``, ``--zero``,
``--tokens``, as :mod:`opcount.cli.flags.training` parsed and checked them): the LLM training step priced
and reported (``opcount llm:NAME --mode train``) and the training memory added to a whole model's report
(``opcount MODEL --mode train``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import torch

from .. import report
from ..errors import OpcountError, OpcountValueError
from ..hardware.lookup import Hardware
from ..llm.causal_lm import CausalLM
from ..llm.moe.experts import expected_routing
from ..llm.precision.dtypes import footprint_weights
from ..llm.training import TrainingCost, train_step
from ..report.provenance import export_meta
from ..torch_internals import pytree
from ..training.saved import SavedActivations, effective, layers_of, measure
from ..training.states import ModelStates, states_of
from ..training.step import Throughput, forward_calls, recompute_time
from ..units import seconds, si, size
from . import training_sweep
from .deploy import cost_json
from .flags.training import layout as training_layout
from .options import LLMOptions, Options
from .render import write_csv_meta

Status = Callable[[str], None]


# ------------------------------------------------------------------------------------------------
# The LLM path
# ------------------------------------------------------------------------------------------------
def run(
    llm: CausalLM, options: Options, flags: LLMOptions, label: str, hardware: Hardware | None, status: Status
) -> str:
    """One training step of ``llm`` as the flags say, rendered."""
    train, deploy = options.training, flags.deploy
    if train.sweep or train.devices is not None:  # many points from one trace (opcount.cli.training_sweep)
        return training_sweep.run(
            llm, options, flags, label, hardware, status,
            lambda c: training_json(c, train.tokens, deploy.price, _max_micro_batch(c, options)),
        )  # fmt: skip
    status(f"tracing {label}: training step, batch {flags.batch}, {flags.seq_len} tokens")
    cost = train_step(
        llm,
        seq_len=flags.seq_len,
        batch=flags.batch,
        optimizer=train.optimizer,
        zero=train.zero,
        recompute=train.recompute,
        hardware=hardware,
        flops_per_mac=options.analysis.flops_per_mac,
        preset=options.analysis.preset,
        layout=training_layout(flags, train),
    )
    if options.rendering.format == "json":
        return llm_json(cost, llm, options, label, train.tokens, deploy.price)
    return llm_report(
        cost, options.rendering, label, options.model, llm.parameters, train.tokens, deploy.price,
        _max_micro_batch(cost, options),
    )  # fmt: skip


def _max_micro_batch(cost: TrainingCost, options: Options) -> int | None:
    capacity = _capacity(cost)
    return None if not options.training.max_micro_batch or capacity is None else cost.max_micro_batch(capacity)


def llm_json(
    cost: TrainingCost, llm: CausalLM, options: Options, label: str, tokens: int | None, price: float | None
) -> str:
    """The step's JSON: the report, ``llm`` with the keys an inference point has (``parameters``
    ``{total, active}``, ``memory`` with ``per_device``, the times of the step on its ``parallel``
    layout, ``communication``, ``cost``), ``memory`` (its copy) and ``training`` (the step's parts)."""
    rendering = options.rendering
    extra = {"roofline": cost.roofline} if cost.roofline is not None else None
    given = list(rendering.columns) if rendering.columns is not None else None
    meta = export_meta(cost.flops, model=options.model, roofline=cost.roofline)
    data = report.to_dict(cost.flops, columns=given, max_depth=rendering.depth, extra=extra, meta=meta)
    capacity = _capacity(cost)
    per_device = cost.memory()
    out: dict[str, Any] = {
        "model": label,
        "phase": "train",
        "batch": cost.batch,
        "seq_len": cost.seq_len,
        "precision": {"weight": cost.precision.weight, "act": cost.precision.act},
        "parameters": {"total": llm.parameters, "active": llm.active_parameters},
        "flops": cost.flops.total(),
        "flops_per_mac": cost.flops.flops_per_mac,
        "memory": {  # the model's, as an inference point's; then a device's (ZeRO partitions its states)
            "weights": footprint_weights(llm.model, llm.precision),
            "kv_cache": 0,
            "kv_cache_by_type": {},
            "activations": cost.activations,
            "per_device": per_device,
            "per_stage": [{"stage": st.stage, "layers": len(st.layers), **cost.stage_memory(st)} for st in cost.stages],
            "capacity": capacity,
            "fits": None if capacity is None else per_device["total"] <= capacity,
        },
    }
    rate, parallel = cost.throughput, cost.parallel
    if parallel is not None and rate is not None and cost.roofline is not None:  # the step on every device at once
        out |= {
            "hardware": cost.roofline.hardware.name,
            "kernels": "eager",  # a training step runs one kernel a call (opcount.llm.training)
            "time": parallel.time,
            "time_bound": parallel.time_bound,
            "bound": parallel.limited_by,
            "tokens_per_s": rate.tokens_per_s,
            "tokens_per_s_bound": rate.tokens_per_s_bound,
        }
    out["parallel"] = cost.layout.as_dict()
    if parallel is not None:  # the collectives and sends of one step on the slowest stage, as a deployment's own
        sent = parallel.stages[parallel.slowest].sent
        out["communication"] = {"bytes_per_device": sent, "time": parallel.communication}
    devices = cost.layout.devices
    if rate is not None and price is not None:
        per_million = {"trained": rate.cost(1e6, price)}
        bound = rate.tokens_per_s_bound
        at_bound = {"trained": 1e6 / bound / 3600 * devices * price} if bound else None
        out["cost"] = cost_json(per_million, at_bound, price, devices)
    data["llm"] = out
    data["memory"] = dict(out["memory"])  # the report's copy, as an inference point's
    data["training"] = training_json(cost, tokens, price, _max_micro_batch(cost, options))
    return json.dumps(data, indent=2)


def llm_report(
    cost: TrainingCost,
    rendering: Any,
    label: str,
    model: str,
    parameters: int,
    tokens: int | None,
    price: float | None,
    max_micro_batch: int | None = None,
) -> str:
    """The step's module table and summary, or its CSV."""
    extra = {"roofline": cost.roofline} if cost.roofline is not None else None
    given = list(rendering.columns) if rendering.columns is not None else None
    meta = export_meta(cost.flops, model=model, roofline=cost.roofline)
    columns = given or (["params", "flops", "time", "time_share", "bound"] if extra else ["params", "flops"])
    if rendering.format == "csv":
        write_csv_meta(rendering.csv_meta, meta)
        return report.to_csv(
            cost.flops, columns=columns, max_depth=rendering.depth, extra=extra, raw=rendering.csv_raw
        ).rstrip("\n")
    depth = 3 if rendering.depth is None else rendering.depth
    table = report.module_table(
        cost.flops, columns=columns, max_depth=depth, extra=extra, show_param_shapes=rendering.param_shapes
    )
    lines = llm_summary(cost, label, parameters, tokens, price)
    if max_micro_batch is not None:
        lines.append(
            f"  max micro-batch: {max_micro_batch} sequence{'s' if max_micro_batch != 1 else ''} of {cost.seq_len} tokens"
        )
    return table + "\n\n" + "\n".join(lines)


def llm_summary(cost: TrainingCost, label: str, parameters: int, tokens: int | None, price: float | None) -> list[str]:
    convention = f"1 multiply-add = {cost.flops.flops_per_mac} flop{'s' if cost.flops.flops_per_mac > 1 else ''}"
    lines = [
        f"{label}: training step, batch {cost.batch} x {cost.seq_len} tokens per device, {cost.precision.label(cache=False)}",
        f"  parameters {si(parameters)}, FLOPs {si(cost.flops.total())} per device (forward and backward; {convention})",
    ]
    layout = cost.layout
    if layout.devices > layout.dp or layout.micro_batches > 1:
        lines[0] = (
            f"{label}: training step, micro-batch {cost.batch} x {cost.seq_len} tokens, {layout.label()}, "
            f"{cost.precision.label(cache=False)}"
        )
        lines[1] = (
            f"  parameters {si(parameters)}, FLOPs {si(cost.flops.total())} per micro-batch of the whole model "
            f"(forward and backward; {convention})"
        )
        memory = cost.memory()
        lines.append(
            f"  memory per device (the fullest stage): weights {size(memory['weights'])}, gradients "
            f"{size(memory['gradients'])}, optimizer {size(memory['optimizer'])} ({cost.optimizer}"
            f"{f', ZeRO-{cost.zero}' if cost.zero else ''}), activations {size(memory['activations'])} (recompute "
            f"{cost.recompute}), backward's transient {size(memory['transient'])}, total {size(memory['total'])}"
        )
        if layout.pp > 1:
            per = ", ".join(f"{size(cost.stage_memory(s)['total'])}" for s in cost.stages)
            lines.append(f"  memory per stage: {per}")
    else:
        lines.extend(memory_lines(cost.states, cost.saved, cost.recompute, cost.optimizer))
        transient = cost.memory()["transient"]
        lines[-1] = lines[-1].replace(", total", f", backward's transient {size(transient)}, total")
        lines[-1] = lines[-1].rsplit("total ", 1)[0] + f"total {size(cost.memory()['total'])}"
    capacity = _capacity(cost)
    if capacity is not None:
        total = cost.memory()["total"]
        verdict = "fits" if total <= capacity else f"does not fit ({size(total)} > {size(capacity)})"
        lines.append(f"  capacity: {size(capacity)} per device: {verdict}")
    rate = cost.throughput
    if cost.parallel is not None and rate is not None and cost.roofline is not None:
        lines.extend(_time_lines(cost, rate, tokens, price))
    return lines


def _capacity(cost: TrainingCost) -> int | None:
    """The device's memory (the whole of it: a training step has no serving engine's reserve)."""
    memory = None if cost.roofline is None else cost.roofline.hardware.memory_bytes
    return None if memory is None else int(memory)


def memory_lines(states: ModelStates, saved: SavedActivations, recompute: str, optimizer: str) -> list[str]:
    """Per device: the model states and the saved activations, and the conventions they follow."""
    activations = saved.kept(recompute)
    total = states.total + activations
    zero = (
        f", ZeRO-{states.zero} over {states.dp} devices"
        if states.zero
        else (f", replicated on {states.dp} devices" if states.dp > 1 else "")
    )
    return [
        f"  memory per device: weights {size(states.weights)}, gradients {size(states.gradients)}, "
        f"optimizer {size(states.optimizer)} ({optimizer}{zero}), activations {size(activations)} "
        f"(saved for backward, recompute {recompute}), total {size(total)}"
    ]


def _time_lines(cost: TrainingCost, rate: Throughput, tokens: int | None, price: float | None) -> list[str]:
    parallel = cost.parallel
    assert parallel is not None and cost.roofline is not None
    hw, terms, devices = cost.roofline.hardware.name, parallel.terms, cost.layout.devices
    parts = f"kernels {seconds(terms['compute'])}"
    if terms["recompute"]:
        parts += f" + recompute {seconds(terms['recompute'])}"
    names = {
        "tensor_parallel": "tensor-parallel collectives",
        "context_parallel": "exposed ring exchange",
        "expert_parallel": "all-to-all",
        "pipeline": "pipeline sends",
        "bubble": f"bubble ({cost.layout.bubble_fraction():.1%})",
    }
    for key, name in names.items():
        if terms[key]:
            parts += f" + {name} {seconds(terms[key])}"
    if cost.layout.dp * cost.layout.cp > 1:
        sync = parallel.stages[parallel.slowest].data_parallel
        parts += (
            f" + exposed data-parallel collectives {seconds(terms['data_parallel'])} (of {seconds(sync)}, overlapped)"
        )
    lines = [
        f"  {hw}: step {seconds(parallel.time)} ({parts}), {rate.tokens_per_s:,.0f} tokens/s on {devices} "
        f"device{'s' if devices > 1 else ''} ({rate.tokens_per_s / devices:,.0f} per device), MFU {rate.mfu:.1%}",
        f"  speed of light: step {seconds(parallel.time_bound)} ({parallel.limited_by}-bound), "
        f"{rate.tokens_per_s_bound or 0:,.0f} tokens/s, MFU at the bound {rate.mfu_bound or 0:.1%}",
    ]
    if tokens is not None:
        run = f"  {si(tokens)} tokens: {_duration(rate.time_to_train(tokens))}"
        if price is not None:
            run += f", ${rate.cost(tokens, price):,.0f} at ${price:g} per device-hour"
        lines.append(run)
    return lines


def _duration(s: float) -> str:
    if s < 3600:
        return seconds(s)
    if s < 86400 * 2:
        return f"{s / 3600:,.1f} hours"
    return f"{s / 86400:,.1f} days"


def training_json(
    cost: TrainingCost, tokens: int | None, price: float | None, max_micro_batch: int | None = None
) -> dict[str, Any]:
    """``optimizer``, ``zero``, ``dp``, ``recompute``, the layout and its batch, and with hardware ``step_time``,
    ``step_time_bound``, ``bubble_fraction``, each term's seconds (``terms``), ``tokens_per_s``, ``mfu``,
    ``mfu_bound``, ``time_to_train`` and ``cost`` (None where not asked)."""
    layout = cost.layout
    out: dict[str, Any] = {
        "optimizer": cost.optimizer,
        "zero": cost.zero,
        "dp": cost.dp,
        "recompute": cost.recompute,
        "layout": layout.as_dict(),
        "micro_batch": cost.batch,
        "global_batch": cost.batch * layout.micro_batches * layout.dp,
        "tokens_per_step": cost.tokens,
        "bubble_fraction": layout.bubble_fraction(),
    }
    if max_micro_batch is not None:
        out["max_micro_batch"] = max_micro_batch
    parallel, rate = cost.parallel, cost.throughput
    if parallel is not None and rate is not None:
        terms = parallel.terms
        out |= {
            "step_time": parallel.time,
            "step_time_bound": parallel.time_bound,
            "bound": parallel.limited_by,
            "terms": dict(terms),
            "stages": [  # each stage's seconds for one micro-batch, its data-parallel collectives and bound a step
                {
                    "stage": st.stage,
                    "micro_batch_time": st.micro_batch,
                    "compute": st.compute,
                    "recompute": st.recompute,
                    "tensor_parallel": st.tensor_parallel,
                    "context_parallel": st.context_parallel,
                    "expert_parallel": st.expert_parallel,
                    "pipeline": st.pipeline,
                    "data_parallel": st.data_parallel,
                    "step_time_bound": st.bound,
                }
                for st in parallel.stages
            ],
            "compute_time": terms["compute"],
            "recompute_time": terms["recompute"],
            "bubble_time": terms["bubble"],
            "communication_time": parallel.communication,
            "exposed_communication_time": parallel.time - terms["compute"] - terms["recompute"] - terms["bubble"],
            "tokens_per_s": rate.tokens_per_s,
            "tokens_per_s_bound": rate.tokens_per_s_bound,
            "tokens_per_s_per_device": rate.tokens_per_s / layout.devices,
            "mfu": rate.mfu,
            "mfu_bound": rate.mfu_bound,
            "tokens": tokens,
            "time_to_train": None if tokens is None else rate.time_to_train(tokens),
            "cost": None if tokens is None or price is None else rate.cost(tokens, price),
        }
    return out


# ------------------------------------------------------------------------------------------------
# A whole model (opcount MODEL --mode train)
# ------------------------------------------------------------------------------------------------
def whole_model(analyses: Any, options: Options, text: str) -> str:
    """The training memory of the model traced in ``analyses`` (one device), added to its report
    ``text``: lines under a table or tree, ``memory.per_device`` and ``training`` in JSON; a CSV
    is left as it is (rows of modules)."""
    trace = analyses.flops.trace()
    model = trace.model
    flags = options.training
    optimizer, recompute = flags.optimizer, flags.recompute
    seq_len = _sequence_length(trace.inputs, trace.kwargs) if options.model.startswith("hf:") else None
    try:
        states = states_of(model, optimizer)
    except OpcountValueError as e:
        raise OpcountError(f"--mode train: {e}") from None
    # mixture-of-experts blocks route by expectation, as the trace did (opcount.cli.main)
    routing = expected_routing(model) if options.model.startswith("hf:") else nullcontext()
    with routing:
        saved = measure(model, _as_tuple(trace.inputs), dict(trace.kwargs or {}), seq_len=seq_len)
    activations = saved.kept(recompute)  # refuses full recomputation without layers
    memory = {
        "weights": states.weights,
        "activations": activations,
        "gradients": states.gradients,
        "optimizer": states.optimizer,
        "total": states.total + activations,
    }
    training: dict[str, Any] = {"optimizer": optimizer, "zero": 0, "dp": 1, "recompute": recompute}
    lines = memory_lines(states, saved, recompute, optimizer)
    report_ = analyses.roofline
    if report_ is not None:
        found = layers_of(model)
        layers = [f"{found[0]}.{i}" for i in range(len(found[1]))] if found is not None else []
        extra = recompute_time(report_, trace.calls, forward_calls(trace), layers, effective(saved, recompute), seq_len)
        step = report_.total_time + extra
        training |= {"step_time": step, "compute_time": report_.total_time, "recompute_time": extra}
        lines.append(
            f"  {report_.hardware.name}: step {seconds(step)} (compute {seconds(report_.total_time)}"
            + (f" + recompute {seconds(extra)})" if extra else ")")
        )
    if options.rendering.format == "json":
        data = json.loads(text)
        data.setdefault("memory", {})["per_device"] = memory
        data["training"] = training
        return json.dumps(data, indent=2)
    if options.rendering.format == "csv":
        return text
    return text + "\n\n" + f"training step ({options.model}), one device:\n" + "\n".join(lines)


def _sequence_length(inputs: Any, kwargs: Any) -> int | None:
    """An hf: model's sequence length: the last size of its first [batch, tokens] input (token ids)."""
    for t in pytree.tree_leaves((inputs, kwargs)):
        if isinstance(t, torch.Tensor) and t.dim() == 2:
            return int(t.shape[-1])
    return None


def _as_tuple(inputs: Any) -> tuple[Any, ...]:
    return inputs if isinstance(inputs, tuple) else (inputs,)
