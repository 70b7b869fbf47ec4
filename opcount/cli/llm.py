"""The command line's LLM inference mode: ``opcount llm:NAME`` (or a causal ``hf:`` model) with
``--phase``, ``--kv-len``, ``--batch``, ``--gen-len``, the dtypes per role and ``--sweep``.

The model is always built on the meta device and traced by the dispatch tracer: nothing of the
weights' or inputs' size is allocated, so a 70B model runs on a laptop.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from .. import report
from ..errors import OpcountError
from ..hardware.lookup import Hardware
from ..llm.deploy import deployment as deploy_lib
from ..llm.models.build import is_causal_lm
from ..llm.models.catalogue import ALIASES, resolve
from ..llm.models.catalogue import config as catalogue_config
from ..llm.models.limits import MAX_BATCH, MAX_POSITIONS
from ..llm.models.local_config import looks_local, read_config, with_values
from ..llm.phases import PHASES, CausalLM, GenerationCost, PhaseCost, generation
from ..llm.precision.assignments import WeightAssignmentError
from ..llm.precision.dtypes import ACT_DTYPES, KV_DTYPES, WEIGHT_DTYPES, Precision
from ..llm.sweep.figures import GenerationPoint, PhasePoint
from ..report.provenance import export_meta
from ..units import si, size
from . import deploy
from . import training as training_cli
from .args import check_counts, check_kept, hf_overrides, invalid_config, natural_int, positive_int
from .llm_rows import SweepPoint, point_json, sweep_points, sweep_report
from .llm_times import (
    add_kernels_argument,
    by_operator,
    operator_rows_named,
    single_device_lines,
    table_columns,
    time_lines,
)
from .options import Analysis, Layout, LLMOptions, LLMRun, Options, columns_needing
from .render import write_csv_meta

SWEEPABLE = {"batch": "batch", "seq-len": "seq_len", "kv-len": "kv_len", "gen-len": "gen_len", **deploy.SWEEPABLE}
DEFAULT_SEQ_LEN = 128
# The LLM flags by their argparse names (the parser hides them from opcount compare's help).
LLM_FLAGS = (
    "phase",
    "kv_len",
    "batch",
    "gen_len",
    "weight_dtype",
    "act_dtype",
    "kv_dtype",
    "sweep",
    "kernels",
    *deploy.DEPLOY_FLAGS,
    *training_cli.TRAINING_FLAGS,
)
deploy_options = deploy.options
training_options = training_cli.options
check_training = training_cli.check_options
MAX_SWEEP_POINTS = 1000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The LLM flags, in their own help group."""
    g = parser.add_argument_group(
        f"LLM inference (llm:NAME, or a causal LM from hf:; built on the meta device; needs the hf extra: {HF_EXTRA})"
    )
    g.add_argument("--phase", choices=PHASES, help="prefill (default: --seq-len prompt tokens) or decode")
    g.add_argument("--kv-len", type=natural_int, metavar="L", help="decode: tokens already in the KV cache (default 0)")
    g.add_argument("--batch", type=positive_int, metavar="B", help="sequences per batch (default 1)")
    g.add_argument(
        "--gen-len", type=natural_int, metavar="N", help="a whole generation: prefill, then N decode steps of one token"
    )
    g.add_argument(
        "--weight-dtype",
        metavar="[PATTERN=]DTYPE",
        action=_Assignments,
        help=f"{', '.join(WEIGHT_DTYPES)} (default bfloat16); PATTERN=DTYPE for the weights under matching "
        "modules (e.g. experts=mxfp4), repeatable (the LLM guide, llm.md)",
    )
    g.add_argument("--act-dtype", metavar="DTYPE", help=f"{', '.join(ACT_DTYPES)} (default bfloat16)")
    g.add_argument("--kv-dtype", metavar="DTYPE", help=f"{', '.join(KV_DTYPES)} (default: the activations')")
    g.add_argument(
        "--sweep",
        action="append",
        metavar="KEY=V1,V2,...",
        type=_sweep,
        help=f"one row per point ({', '.join(SWEEPABLE)}); repeat for a grid",
    )
    add_kernels_argument(g)
    deploy.add_arguments(parser)
    training_cli.add_arguments(parser)


class _Assignments(argparse.Action):
    """Each ``--weight-dtype`` appended to a tuple, in the order given."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, (*(getattr(namespace, self.dest) or ()), values))


def _sweep(text: str) -> tuple[str, tuple[int, ...]]:
    key, sep, values = text.partition("=")
    key = key.strip().replace("_", "-")
    if not sep or key not in SWEEPABLE:
        raise argparse.ArgumentTypeError(f"expected KEY=V1,V2 with KEY one of {', '.join(SWEEPABLE)}, got {text!r}")
    parts = values.split(",")
    if len(parts) > 1 and not parts[-1].strip():
        parts = parts[:-1]  # a trailing comma, as in a Python tuple
    try:
        # An empty value ("1,,16") is a typo: int("") refuses it rather than the point being dropped.
        numbers = tuple(int(v) for v in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key}: expected whole numbers, got {values!r}") from None
    if not numbers or min(numbers) < (0 if key in ("kv-len", "gen-len") else 1):
        raise argparse.ArgumentTypeError(f"{key}: expected values >= {0 if key in ('kv-len', 'gen-len') else 1}")
    return key, numbers


def wanted(model: str, flags: LLMOptions) -> bool:
    """Whether the run is an LLM inference analysis: an ``llm:`` model or any LLM flag."""
    return model.startswith("llm:") or bool(flags.given())


def check(flags: LLMOptions, options: Options) -> Precision:
    """Flag combinations, before anything is built (``options``: the run's other flags); the dtypes
    of ``--weight-dtype``, ``--act-dtype`` and ``--kv-dtype``."""
    if not options.model.startswith(("llm:", "hf:")):  # a factory's model was looked up as a transformers class
        raise OpcountError(
            f"--phase, --batch, --kv-len, --gen-len, --sweep and the dtype flags price LLM inference phases of "
            f"llm: and hf: models, not {options.model}: give its inputs with --input"
        )
    require_transformers(options.model)  # no other flag is worth checking without it
    analysis, layout = options.analysis, options.layout
    if analysis.tracer == "jit":
        raise OpcountError("LLM phases run on the meta device with the dispatch tracer: drop --tracer jit")
    if options.inputs.dtype_name != "float32":  # its default; any other value would be ignored, not priced
        raise OpcountError(
            f"--dtype {options.inputs.dtype_name} does not apply to LLM runs: give --weight-dtype and --act-dtype"
        )
    if analysis.mode == "train":  # one training step instead of an inference phase
        training_cli.check_llm(flags, options.model)
    if options.inputs.shapes:
        raise OpcountError("LLM phases take --seq-len, --batch and --kv-len, not --input shapes")
    phase = flags.phase or "prefill"
    if phase == "prefill" and flags.kv_len:
        raise OpcountError("--kv-len is for --phase decode (prefill starts from an empty cache)")
    if flags.gen_len is not None and flags.phase == "decode":
        raise OpcountError("--gen-len covers prefill and decode: drop --phase decode")
    for key, _ in flags.sweep:
        if key == "gen-len" and flags.gen_len is None:
            raise OpcountError("--sweep gen-len=... needs --gen-len")
        if key == "kv-len" and phase != "decode":
            raise OpcountError("--sweep kv-len=... needs --phase decode")
    if len({k for k, _ in flags.sweep}) != len(flags.sweep):
        raise OpcountError("--sweep: each key once")
    _check_sizes(flags, options.inputs.seq_len)
    check_counts(layout, options.repeats)
    for flag, given in (("profile", options.profile), ("sparsity", analysis.sparsity)):
        if given:
            raise OpcountError(f"--{flag} does not apply to LLM phases (the model is on the meta device)")
    if analysis.fuse and flags.kernels == "eager":
        raise OpcountError("--fuse and --kernels eager contradict each other: give one")
    for flag, value in (("roofline-dtype", analysis.roofline_dtype), ("tf32", analysis.tf32)):
        if value:
            raise OpcountError(
                f"--{flag} does not apply to LLM phases: they are priced in the dtypes of "
                "--weight-dtype, --act-dtype and --kv-dtype"
            )
    if layout.format in ("tree", "md", "repr", "html", "chrome-trace"):
        raise OpcountError("LLM phases print table, json or csv (tree/md/repr/html/chrome-trace are for whole models)")
    if layout.by_operator and flags.sweep:
        raise OpcountError("--by-operator shapes one point's table, not a --sweep's rows")
    _check_columns(layout, options.hardware is not None, bool(flags.sweep))
    deploy.check(flags, options.hardware is not None, options.hardware.spec if options.hardware else None)
    try:
        return Precision(flags.weight_dtype or "bfloat16", flags.act_dtype or "bfloat16", flags.kv_dtype)
    except WeightAssignmentError as e:
        raise OpcountError(f"--weight-dtype: {e}") from None
    except OpcountError as e:
        raise OpcountError(f"{e} (--weight-dtype, --act-dtype, --kv-dtype)") from None


def _check_sizes(flags: LLMOptions, seq_len: int | None) -> None:
    """Each size flag (its largest --sweep value too) within opcount.llm.models.limits, and the positions
    of a sequence together, before a model is built: past them torch's int64 sizes overflow."""
    swept = dict(flags.sweep)
    points = math.prod(len(values) for values in swept.values())
    if points > MAX_SWEEP_POINTS:  # each point is priced (opcount.llm.sweep.points)
        raise OpcountError(f"--sweep: {points:,} points, more than {MAX_SWEEP_POINTS:,} (the limit)")
    given = {"batch": flags.batch, "seq-len": seq_len, "kv-len": flags.kv_len, "gen-len": flags.gen_len}
    largest = {
        key: max((value, *swept.get(key, ()))) if value is not None else max(swept.get(key, (0,)))
        for key, value in given.items()
    }
    for key, value in largest.items():
        limit = MAX_BATCH if key == "batch" else MAX_POSITIONS
        if value > limit:
            what = "sequences" if key == "batch" else "positions per sequence"
            flag = f"--{key} {value}" if value == given[key] else f"--sweep {key}={value}"
            raise OpcountError(f"{flag}: more than {limit:,} {what} (the limit)")
    seq_len = largest["seq-len"] or (1 if flags.phase == "decode" else DEFAULT_SEQ_LEN)
    positions = seq_len + largest["kv-len"] + largest["gen-len"]
    if positions > MAX_POSITIONS:
        raise OpcountError(
            f"--seq-len, --kv-len and --gen-len: {positions:,} positions per sequence, more than {MAX_POSITIONS:,} "
            "(the limit)"
        )


def _check_columns(layout: Layout, hardware: bool, sweep: bool) -> None:
    columns = layout.columns or ()
    sparse = columns_needing("sparsity", columns)
    if sparse:
        raise OpcountError(
            f"columns {', '.join(sorted(sparse))} do not apply to LLM phases (the model is on the meta device)"
        )
    timed = columns_needing("roofline", columns)
    if timed and not hardware:
        raise OpcountError(f"columns {', '.join(sorted(timed))} need --hardware")
    if sweep and (layout.columns or layout.depth is not None or not layout.param_shapes):
        # a sweep prints one row per point, not a module table: these would be silently ignored
        raise OpcountError("--columns, --depth and --no-param-shapes shape one point's table, not a --sweep's rows")


HF_EXTRA = "pip install 'opcount[hf]'"


def require_transformers(spec: str) -> None:
    """``llm:`` and ``hf:`` models are transformers models: without the ``hf`` extra, one line saying so."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise OpcountError(
            f"{spec}: LLM models are built with transformers, which is not installed: the hf extra adds it ({HF_EXTRA})"
        ) from None


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
        except Exception as e:  # the constructor refused a value, as for hf: below
            raise invalid_config(spec, items, e) from None
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
    given = flags.given() or [model]
    raise OpcountError(
        f"{given[0]} needs a causal LM; {type(config).__name__} is not one (a masked LM or an encoder-decoder): "
        f"leave out {', '.join(given)} to analyze the whole model"
    )


@dataclass
class Point:
    """One analyzed point: a phase, or a whole generation."""

    values: dict[str, int]
    phase: PhaseCost
    generation: GenerationCost | None = None
    deployment: deploy_lib.Deployment | None = None


def run(
    options: Options, wanted: LLMRun, hardware: Hardware | None, status: Callable[[str], None]
) -> tuple[str, list[Point] | list[SweepPoint]]:
    """Analyze the LLM ``options`` describe (``wanted``: its LLM flags, checked; ``hardware``: resolved
    once by the caller); returns the rendered report and the points."""
    flags, items = wanted.flags, options.inputs.hf_config
    cfg, label = config_of(options.model, items)
    _check_causal(cfg, options.model, flags)
    status(f"building {label} on the meta device")
    try:
        llm = CausalLM(cfg, wanted.precision)
    except WeightAssignmentError as e:  # a pattern no weight matches, a format a weight cannot take
        raise OpcountError(f"--weight-dtype: {e}") from None
    except OpcountError as e:  # a config the model refuses: name the values that made it
        if not items:
            raise
        raise OpcountError(f"{options.model} with --hf-config {', '.join(items)}: {e}") from None
    deploy.check_model(llm, flags)  # a layout the model cannot run, before anything is traced
    if options.analysis.mode == "train":  # one training step (opcount.cli.training)
        return training_cli.run(llm, options, flags, label, hardware, status), []
    base = {
        "batch": flags.batch or 1,
        "seq_len": options.inputs.seq_len or (1 if flags.phase == "decode" else DEFAULT_SEQ_LEN),
        "kv_len": flags.kv_len or 0,
    }
    if flags.gen_len is not None:
        base["gen_len"] = flags.gen_len
    axes = [(SWEEPABLE[k], v) for k, v in flags.sweep]
    analysis = options.analysis
    # Every point from a few traces (opcount.llm.sweep.points), with or without hardware; a deployment is priced per point
    fitted = not flags.deploy.given() and not {key for key, _ in axes} & set(deploy.SWEEPABLE)
    if axes and fitted:
        combos = [
            {**base, **{key: v for (key, _), v in zip(axes, combo, strict=True)}}
            for combo in itertools.product(*(values for _, values in axes))
        ]
        status(f"tracing {label}: {len(combos)} points from a few traces")
        rows = sweep_points(llm, combos, flags.phase, hardware, analysis, flags.kernels or "fused")
        return sweep_report(rows, options.layout, label, options.model), rows
    points: list[Point] = []
    phases: dict[tuple[tuple[str, int], ...], Point] = {}
    for combo in itertools.product(*(values for _, values in axes)) if axes else [()]:
        values = {**base, **{key: v for (key, _), v in zip(axes, combo, strict=True)}}
        status(f"tracing {label}: {_describe(values, flags.phase)}")
        traced = tuple((k, v) for k, v in values.items() if k not in deploy.SWEEPABLE)
        if traced not in phases:  # a layout is arithmetic on the same trace
            phases[traced] = _point(llm, values, flags.phase, hardware, analysis, flags.kernels or "fused")
        point = replace(phases[traced], values=values)
        point.deployment = deploy.deployment(llm, point.phase, point.generation, values, flags, hardware)
        points.append(point)
    if axes:
        return sweep_report(
            [SweepPoint.of(p.values, p.phase, p.generation, p.deployment) for p in points],
            options.layout,
            label,
            options.model,
        ), points
    return _single_report(llm, points[0], options.layout, label, options.model), points


def _point(
    llm: CausalLM,
    values: dict[str, int],
    phase: str | None,
    hardware: Hardware | None,
    analysis: Analysis,
    kernels: str = "fused",
) -> Point:
    common: dict[str, Any] = {
        "batch": values["batch"],
        "hardware": hardware,
        "flops_per_mac": analysis.flops_per_mac,
        "preset": analysis.preset,
        "kernels": kernels,
    }
    if "gen_len" in values:
        gen = generation(llm, values["seq_len"], values["gen_len"], **common)
        return Point(values, gen.prefill, gen)
    phase = phase or "prefill"
    kv_len = values["kv_len"] if phase == "decode" else 0
    return Point(values, llm.phase(phase, seq_len=values["seq_len"], kv_len=kv_len, **common))


def _describe(values: dict[str, int], phase: str | None) -> str:
    if "gen_len" in values:
        return f"batch {values['batch']}, prompt {values['seq_len']}, {values['gen_len']} generated"
    if (phase or "prefill") == "prefill":
        return f"prefill, batch {values['batch']}, {values['seq_len']} tokens"
    return f"decode, batch {values['batch']}, {values['seq_len']} new token(s), {values['kv_len']} cached"


# ------------------------------------------------------------------------------------------------
# Reports
# ------------------------------------------------------------------------------------------------
def summary(llm_label: str, point: Point, parameters: int, active: int | None = None) -> str:
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
    return "\n".join(lines)


def _single_report(llm: CausalLM, point: Point, layout: Layout, label: str, model: str) -> str:
    p = point.phase
    single = point.deployment is not None  # the table's times are then one device's, named so
    # with hardware the times are the chosen kernels' estimate by module, headed by the mode (llm_times)
    columns, extra = table_columns(p, layout.columns, single)
    given = columns if layout.columns is not None else None
    # the model as typed (llm:gpt2), not the class it builds (GPT2LMHeadModel); device: meta
    meta = export_meta(p.flops, model=model, roofline=p.roofline)
    if layout.format == "json":
        data = report.to_dict(p.flops, columns=given, max_depth=layout.depth, extra=extra, meta=meta)
        gen = None if point.generation is None else GenerationPoint.of(point.generation)
        data["llm"] = point_json(
            point.values, PhasePoint.of(p), gen, label, llm.parameters, llm.active_parameters, point.deployment
        )
        data["memory"] = dict(data["llm"]["memory"])  # the report's copy, as a whole model's
        if layout.by_operator:
            data["llm"]["by_operator"] = operator_rows_named(p, single)
        return json.dumps(data, indent=2)
    if layout.by_operator:
        return by_operator(p, layout, meta, single) + (
            "" if layout.format == "csv" else "\n\n" + summary(label, point, llm.parameters)
        )
    depth = 3 if layout.depth is None else layout.depth
    if layout.format == "csv":
        write_csv_meta(layout.csv_meta, meta)
        return report.to_csv(p.flops, columns=columns, max_depth=layout.depth, extra=extra).rstrip("\n")
    table = report.module_table(
        p.flops, columns=columns, max_depth=depth, extra=extra, show_param_shapes=layout.param_shapes
    )
    return table + "\n\n" + summary(label, point, llm.parameters, llm.active_parameters)
