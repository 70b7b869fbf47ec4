"""The command line's LLM inference mode: ``opcount llm:NAME`` (or a causal ``hf:`` model) with
``--phase``, ``--kv-len``, ``--batch``, ``--gen-len``, the dtypes per role and ``--sweep``, as
:mod:`opcount.cli.flags.llm` parsed and checked them: the config read, the model built, its points
traced and priced, the report.

The model is always built on the meta device and traced by the dispatch tracer: nothing of the
weights' or inputs' size is allocated, so a 70B model runs on a laptop.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import report
from ..errors import OpcountError
from ..hardware.lookup import Hardware
from ..llm.causal_lm import CausalLM
from ..llm.deploy import deployment as deploy_lib
from ..llm.deploy.figures import Fit
from ..llm.generation import GenerationCost, generate
from ..llm.models.build import is_causal_lm
from ..llm.models.catalogue import ALIASES, resolve
from ..llm.models.catalogue import config as catalogue_config
from ..llm.models.local_config import looks_local, read_config, with_values
from ..llm.phases import PhaseCost, PhaseRequest
from ..llm.precision.assignments import WeightAssignmentError
from ..llm.precision.dtypes import StateDtypeError
from ..llm.sweep.figures import GenerationValues, PhaseValues
from ..report.provenance import export_meta
from ..units import si, size
from . import deploy
from . import training as training_cli
from .args import check_kept, hf_overrides, invalid_config
from .flags.deploy import SWEEPABLE as LAYOUT_KEYS
from .flags.llm import SWEEPABLE, require_transformers
from .llm_rows import SweepRow, point_json, sweep_points, sweep_report
from .llm_times import by_operator, operator_rows_named, single_device_lines, table_columns, time_lines
from .options import LLMOptions, LLMRun, Options, Rendering
from .render import write_csv_meta


def config_of(spec: str, items: Sequence[str]) -> tuple[Any, str]:
    """The transformers config of ``llm:NAME`` or ``hf:ConfigClass`` / ``hf:ModelClass`` with the
    ``--hf-config KEY=VALUE`` items applied (each parsed with its field's type), and a label."""
    require_transformers(spec)
    import transformers

    if spec.startswith("llm:"):
        name = spec[4:].lower()
        _, arch = resolve(name)  # raises, naming the choices
        source = ALIASES[name][1] if name in ALIASES else arch.source
        overrides = hf_overrides(getattr(transformers, arch.config_class), items)
        try:
            config = catalogue_config(name, **overrides)
        except OpcountError as e:  # a value the constructor or the size limits refused, its message whole
            raise OpcountError(f"{spec}{' with --hf-config ' + ', '.join(items) if items else ''}: {e}") from None
        return check_kept(spec, config, overrides), f"{name} ({source.split(' ')[0]})"
    name = spec.removeprefix("hf:")
    base = read_config(name) if looks_local(name) else None  # a config.json or a downloaded model's folder
    cls: Any = type(base) if base is not None else getattr(transformers, name, None) if name.isidentifier() else None
    if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
        cls = cls.config_class
    if not (isinstance(cls, type) and issubclass(cls, transformers.PretrainedConfig)):
        raise OpcountError(f"{spec}: not a transformers config or model class")
    overrides = hf_overrides(cls, items)
    try:
        config = with_values(base, overrides) if base is not None else cls(**overrides)
    except Exception as e:  # any constructor failure is a bad config value
        raise invalid_config(spec, items, e) from None
    return check_kept(spec, config, overrides), name


def _check_causal(config: Any, model: str, flags: LLMOptions) -> None:
    """Refused before building: transformers would build a masked LM's causal head (BertLMHeadModel)
    and the phase would fail on meta tensors, far from the flag that asked for it."""
    if is_causal_lm(config):
        return
    given = flags.given or (model,)
    raise OpcountError(
        f"{given[0]} needs a causal LM; {type(config).__name__} is not one (a masked LM or an encoder-decoder): "
        f"leave out {', '.join(given)} to analyze the whole model"
    )


@dataclass
class PointCost:
    """One analyzed point: a phase, or a whole generation."""

    values: dict[str, int]
    phase: PhaseCost
    generation: GenerationCost | None = None
    deployment: deploy_lib.Deployment | None = None
    fit: Fit | None = None  # one device's, where no layout is given


def build(options: Options, wanted: LLMRun, status: Callable[[str], None]) -> tuple[CausalLM, str]:
    """The causal LM ``options`` name, built on meta with ``wanted``'s precision, and its label; a config,
    a precision or a layout the model cannot take refused naming the flag, before anything is traced."""
    flags, items = wanted.flags, options.inputs.hf_config
    cfg, label = config_of(options.model, items)
    _check_causal(cfg, options.model, flags)
    status(f"building {label} on the meta device")
    try:
        llm = CausalLM(cfg, wanted.precision)
    except WeightAssignmentError as e:  # a pattern no weight matches, a format a weight cannot take
        raise OpcountError(f"--weight-dtype: {e}") from None
    except StateDtypeError as e:  # a model with no recurrent state
        raise OpcountError(f"--state-dtype {flags.state_dtype}: {e}") from None
    except OpcountError as e:  # a config the model refuses: name the values that made it
        if not items:
            raise
        raise OpcountError(f"{options.model} with --hf-config {', '.join(items)}: {e}") from None
    if flags.kv_dtype is not None and not llm.precision.holds_kv:  # a dtype nothing would be held in
        raise OpcountError(
            f"--kv-dtype {flags.kv_dtype}: {options.model} holds no keys and values (no attention layer keeps a "
            "KV cache); its recurrent state's dtype is --state-dtype"
        )
    if options.analysis.mode != "train":  # a training layout is checked against the model before its trace
        deploy.check_model(llm, flags)  # a layout the model cannot run, before anything is traced
    return llm, label


def run(
    options: Options, wanted: LLMRun, hardware: Hardware | None, status: Callable[[str], None]
) -> tuple[str, list[PointCost] | list[SweepRow]]:
    """Analyze the LLM ``options`` describe (``wanted``: its LLM flags, checked; ``hardware``: resolved
    once by the caller); returns the rendered report and the points."""
    flags = wanted.flags
    llm, label = build(options, wanted, status)
    if options.analysis.mode == "train":  # one training step (opcount.cli.training)
        return training_cli.run(llm, options, flags, label, hardware, status), []
    base = {
        "batch": flags.batch,
        "seq_len": flags.seq_len,
        "kv_len": flags.kv_len,
    }
    if flags.gen_len is not None:
        base["gen_len"] = flags.gen_len
    axes = [(SWEEPABLE[k], v) for k, v in flags.sweep]
    analysis = options.analysis
    # what every point asks, whole: its own phase, batch and lengths come from the point
    request = PhaseRequest(
        phase=flags.phase or "prefill", hardware=hardware, flops_per_mac=analysis.flops_per_mac,
        preset=analysis.preset, kernels=flags.kernels,
    )  # fmt: skip
    # Every point from a few traces (opcount.llm.sweep.points), with or without hardware; a deployment is priced per point
    fitted = not flags.deploy.given and not {key for key, _ in axes} & set(LAYOUT_KEYS)
    if axes and fitted:
        combos = [
            {**base, **{key: v for (key, _), v in zip(axes, combo, strict=True)}}
            for combo in itertools.product(*(values for _, values in axes))
        ]
        status(f"tracing {label}: {len(combos)} points from a few traces")
        rows = sweep_points(llm, combos, request)
        return sweep_report(rows, options.rendering, label, options.model), rows
    points: list[PointCost] = []
    phases: dict[tuple[tuple[str, int], ...], PointCost] = {}
    for combo in itertools.product(*(values for _, values in axes)) if axes else [()]:
        values = {**base, **{key: v for (key, _), v in zip(axes, combo, strict=True)}}
        status(f"tracing {label}: {_describe(values, flags.phase)}")
        traced = tuple((k, v) for k, v in values.items() if k not in LAYOUT_KEYS)
        if traced not in phases:  # a layout is arithmetic on the same trace
            phases[traced] = _point(llm, values, request)
        point = replace(phases[traced], values=values)
        point.deployment = deploy.deployment(llm, point.phase, point.generation, values, flags, hardware)
        if point.deployment is None and not axes:  # one device judged as a layout's devices are
            point.fit = deploy.fit_alone(llm, point.phase, point.generation, flags, hardware)
        points.append(point)
    if axes:
        return sweep_report(
            [SweepRow.of(p.values, p.phase, p.generation, p.deployment) for p in points],
            options.rendering,
            label,
            options.model,
        ), points
    return _single_report(llm, points[0], options.rendering, label, options.model), points


def _point(llm: CausalLM, values: dict[str, int], request: PhaseRequest) -> PointCost:
    if "gen_len" in values:
        prefill = replace(request, phase="prefill").at(values["batch"], values["seq_len"], 0)
        gen = generate(llm, prefill, values["gen_len"])
        return PointCost(values, gen.prefill, gen)
    return PointCost(values, llm.cost(request.at(values["batch"], values["seq_len"], values["kv_len"])))


def _describe(values: dict[str, int], phase: str | None) -> str:
    if "gen_len" in values:
        return f"batch {values['batch']}, prompt {values['seq_len']}, {values['gen_len']} generated"
    if (phase or "prefill") == "prefill":
        cached = f" after {values['kv_len']} cached" if values["kv_len"] else ""
        return f"prefill, batch {values['batch']}, {values['seq_len']} tokens{cached}"
    return f"decode, batch {values['batch']}, {values['seq_len']} new token(s), {values['kv_len']} cached"


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------
def summary(llm_label: str, point: PointCost, parameters: int, active: int | None = None) -> str:
    """The phase in a few lines: what was analyzed, parameters (those one token touches where a
    mixture of experts routes it), FLOPs, memory, speed of light."""
    p, gen = point.phase, point.generation
    counted = si(parameters) if active in (None, parameters) else f"{si(parameters)} ({si(active)} active)"
    lines = [f"{llm_label}: {_describe(point.values, p.phase if gen is None else None)}, {p.precision.label()}"]
    convention = f"1 multiply-add = {p.flops.flops_per_mac} flop{'s' if p.flops.flops_per_mac > 1 else ''}"
    if gen is None:
        lines.append(f"  parameters {counted}, FLOPs {si(p.flops.total())} ({convention})")
    else:  # the table above is the prefill's; the generation adds its decode steps
        lines.append(
            f"  parameters {counted}, FLOPs {si(gen.flops)}: prefill {si(p.flops.total())} (the table), "
            f"{gen.gen_len} decode steps {si(gen.decode_flops)} ({convention})"
        )
    m = p.memory if gen is None else gen.memory
    by_type = ", ".join(f"{kind} {size(n)}" for kind, n in m.kv_cache_by_type.items())
    lines.append(
        f"  memory: weights {size(m.weights)}, KV cache {size(m.kv_cache)}"
        f"{f' ({by_type})' if len(m.kv_cache_by_type) > 1 else ''}, "
        f"activations (peak) {size(m.activations)}, total {size(m.total)}"
    )
    lines += time_lines(p, gen, point.deployment)  # the layout's under one
    if point.deployment is not None:
        lines += deploy.summary_lines(point.deployment) + single_device_lines(p, gen, point.deployment)
    elif point.fit is not None:
        lines.append(deploy.capacity_line(point.fit, p.roofline.hardware.name if p.roofline is not None else None))
    return "\n".join(lines)


def _single_report(llm: CausalLM, point: PointCost, rendering: Rendering, label: str, model: str) -> str:
    p = point.phase
    single = point.deployment is not None  # the table's times are then one device's, named so
    # with hardware the times are the chosen kernels' estimate by module, headed by the mode (llm_times)
    columns, extra = table_columns(p, rendering.columns, single)
    given = columns if rendering.columns is not None else None
    # the model as typed (llm:gpt2), not the class it builds (GPT2LMHeadModel); device: meta
    meta = export_meta(p.flops, model=model, roofline=p.roofline)
    if rendering.format == "json":
        data = report.to_dict(p.flops, columns=given, max_depth=rendering.depth, extra=extra, meta=meta)
        gen = None if point.generation is None else GenerationValues.of(point.generation)
        data["llm"] = point_json(
            point.values, PhaseValues.of(p), gen, label, llm.parameters, llm.active_parameters, point.deployment
        )
        deploy.add_fit_json(data["llm"], point.fit)
        data["memory"] = dict(data["llm"]["memory"])  # the report's copy, as a whole model's
        if rendering.by_operator:
            data["llm"]["by_operator"] = operator_rows_named(p, single)
        return json.dumps(data, indent=2)
    if rendering.by_operator:
        return by_operator(p, rendering, meta, single) + (
            "" if rendering.format == "csv" else "\n\n" + summary(label, point, llm.parameters)
        )
    depth = 3 if rendering.depth is None else rendering.depth
    if rendering.format == "csv":
        write_csv_meta(rendering.csv_meta, meta)
        return report.to_csv(
            p.flops, columns=columns, max_depth=rendering.depth, extra=extra, raw=rendering.csv_raw
        ).rstrip("\n")
    table = report.module_table(
        p.flops, columns=columns, max_depth=depth, extra=extra, show_param_shapes=rendering.param_shapes
    )
    return table + "\n\n" + summary(label, point, llm.parameters, llm.active_parameters)
