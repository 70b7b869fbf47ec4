"""Argument checks before anything is built: the ``opcount`` command refuses a mistake in its
flags' own words, in one line, before it spends seconds (or all the memory) building a model.
They read the typed options (:mod:`opcount.cli.options`) that :func:`opcount.cli.parser.parse`
makes, and run there, before the options are handed on.

- flag combinations: ``--meta`` implies ``--tracer dispatch`` (``--tracer jit`` with it is
  refused), ``--mode train`` needs the dispatch tracer, the roofline flags need ``--hardware``,
  rendering flags must apply to the ``--format`` (no ``--depth`` with ``repr``, no ``--units`` with json);
- the analyses the columns declare they read (:func:`~opcount.cli.options.roles_for`): a time or
  sparsity column, ``--sparsity`` or ``--plot`` without ``--hardware`` is refused;
- ``opcount compare``: no flag of one model's report, no LLM phases, no model named twice;
- ``--input`` shapes and an ``hf:`` model's ``--seq-len``: positive sizes whose element count
  torch can index, and real tensors within :data:`REAL_BYTES` (on meta tensors any size goes);
- ``-o`` and ``--plot``: an existing folder, and a chart type matplotlib writes;
- ``--hf-config`` values: parsed with the type of the config field they override;
- transformers weights: a config is built on the meta device first and its parameters counted,
  so a model over :data:`REAL_BYTES` is refused before it is allocated.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..llm.models.fields import FieldError, check_field, defaults
from ..llm.models.limits import MAX_POSITIONS, SizeError, check_values
from ..messages import first_line, one_line
from .options import Analysis, CompareOptions, HardwareChoice, Inputs, LLMOptions, Options, Rendering, columns_needing

# Real tensors (inputs, or weights built from a config) above this are refused unless --meta:
# 2**31 float32 elements, about what a workstation can allocate and trace without swapping.
REAL_BYTES = 8 * 2**30
MAX_ELEMENTS = 2**63 - 1  # torch indexes tensors with int64
# Digits past a double's 17 are zeros (docs/reports.md): 100 is plenty; 10**11 overflowed Decimal's exponent.
MAX_DIGITS = 100
MAX_REPEATS = 10_000  # --profile keeps every pass's events in memory
META_HINT = "analyze it on meta tensors with --meta (implies --tracer dispatch), no memory needed"
COMPARE_FORMATS = ("table", "md")  # the text formats of opcount compare, beside json and csv


class UsageError(Exception):
    """A mistake in what the user asked for: printed as one line, exit status 2."""


def check_model(options: Options) -> None:
    """``opcount MODEL``: refuse contradictory flags, unwritable outputs and impossible or oversized
    inputs, then a flag missing the analysis it needs."""
    _check_tracer(options)
    _check_roofline_flags(options.analysis, options.hardware)
    _check_format_flags(options.rendering, options.profile, options.analysis.sparsity, options.hardware is not None)
    check_counts(options.rendering, options.repeats)
    _check_hf_flags(options.model, options.inputs)
    check_output_paths(options.rendering, options.output, options.plot)
    inputs = options.inputs
    shapes = [(f"--input {','.join(map(str, s))}", s, inputs.dtype) for s in inputs.shapes]
    if inputs.seq_len and options.model.startswith("hf:"):  # token ids (int64) or audio samples, 1 x N
        shapes.append((f"--seq-len {inputs.seq_len}", (inputs.seq_len,), torch.int64))
    _check_input_shapes(shapes, meta=inputs.meta)
    if inputs.seq_len and options.model.startswith("hf:") and inputs.seq_len > MAX_POSITIONS:
        # on meta too, where no budget applies: attention's seq x seq sizes overflow int64
        raise UsageError(f"--seq-len {inputs.seq_len}: more than {MAX_POSITIONS:,} positions (the limit)")
    check_roles(options.rendering, options.analysis, options.hardware, options.plot)


def check_compare(
    options: CompareOptions, llm: LLMOptions, depth: int | None, repeats: int, given: dict[str, bool]
) -> None:
    """``opcount compare``: refuse what applies to one model's report (``given``: flag -> whether it
    was given) or to LLM phases, counts past their limits, a model named twice, an unwritable ``-o``;
    then a flag missing the analysis it needs."""
    rendering = options.rendering
    if rendering.format not in (*COMPARE_FORMATS, "json", "csv"):
        raise UsageError(f"opcount compare prints table, md, json or csv, not {rendering.format}")
    refused = {"--depth": depth is not None, **given}
    if any(refused.values()):
        flags = [flag for flag, value in refused.items() if value]
        verb = "applies" if len(flags) == 1 else "apply"
        raise UsageError(
            f"opcount compare reports each model's totals: {', '.join(flags)} {verb} to one model's report"
        )
    _check_exact_formats(rendering)
    check_counts(rendering, repeats)
    named = [spec for spec in options.models if spec.startswith("llm:")] + list(llm.given)
    if named:
        raise UsageError(
            f"opcount compare analyzes whole models, not LLM phases ({', '.join(named)}): "
            "compare points with opcount llm:NAME --sweep KEY=V1,V2"
        )
    twice = sorted({spec for spec in options.models if options.models.count(spec) > 1})
    if twice:
        raise UsageError(f"model {', '.join(twice)} named twice")
    check_output_paths(
        options.rendering, options.output, None
    )  # as `opcount MODEL` does: a folder given to -o should not cost the analyses
    check_roles(options.rendering, options.analysis, options.hardware, None)


def check_recalibrate(hardware: HardwareChoice | None, recalibrate: bool) -> None:
    """``--recalibrate`` measures this machine again: without ``--hardware local`` it would do nothing."""
    if recalibrate and (hardware is None or hardware.local is None):
        raise UsageError("--recalibrate applies to --hardware local")


def check_roles(rendering: Rendering, analysis: Analysis, hardware: HardwareChoice | None, plot: str | None) -> None:
    """The analyses the columns and flags need (``analysis.roles``), refused when one needs ``--hardware``
    missing; ``--sparsity`` values read before anything is traced."""
    if hardware is None and "roofline" in analysis.roles:  # asked for by columns, then
        named = sorted(columns_needing("roofline", rendering.columns or ()))
        raise UsageError(f"columns {', '.join(named)} need --hardware")
    if hardware is None and "sparsity" in analysis.roles:
        raise UsageError(f"--sparsity and the columns {', '.join(columns_needing('sparsity'))} need --hardware")
    if analysis.sparsity:
        from ..sparsity.declared import parse_sparsity_args

        try:  # before tracing: a typo should not cost a trace
            parse_sparsity_args(analysis.sparsity)
        except ValueError as e:  # its messages name the value
            raise UsageError(f"--sparsity: {e}") from None
    if plot and hardware is None:
        raise UsageError("--plot needs --hardware")


def _check_tracer(options: Options) -> None:
    analysis = options.analysis
    if analysis.meta:
        if analysis.tracer == "jit":
            raise UsageError(
                "--meta needs the dispatch tracer: leave out --tracer jit (--meta implies --tracer dispatch)"
            )
        if options.profile:
            raise UsageError("--profile runs the model on real tensors: leave out --meta")
    mode = analysis.mode
    if mode != "eval" and analysis.tracer_for(options.model) != "dispatch":
        raise UsageError(f"--mode {mode} needs --tracer dispatch (the jit tracer records the forward pass only)")
    if mode != "eval" and options.profile:
        raise UsageError(f"--profile measures forward passes: leave out --mode {mode}")


def _check_roofline_flags(analysis: Analysis, hardware: HardwareChoice | None) -> None:
    if hardware is not None:
        return
    given = [
        flag
        for flag, value in (
            ("--roofline-dtype", analysis.roofline_dtype),
            ("--fuse", analysis.fuse),
            ("--tf32", analysis.tf32),
        )
        if value
    ]
    if given:
        raise UsageError(f"{given[0]} applies to the roofline: add --hardware NAME (e.g. --hardware h100-sxm)")


def _check_format_flags(rendering: Rendering, profile: bool, sparsity: tuple[str, ...], hardware: bool) -> None:
    # Rendering flags a format ignores: refused here rather than after the model is built and traced.
    fmt = rendering.format
    _check_exact_formats(rendering)
    if fmt == "repr" and (rendering.by_operator or rendering.depth is not None):
        raise UsageError("--by-operator and --depth do not apply to --format repr: it prints the whole model")
    numbers = rendering.units or rendering.decimals is not None or rendering.sig_figs is not None
    if fmt == "html" and (rendering.by_operator or numbers):
        raise UsageError(
            "--by-operator, --units, --decimals and --sig-figs do not apply to --format html: "
            "the page has both tables, to 3 significant figures (the exact number in each cell's tooltip)"
        )
    if fmt == "html" and profile:
        raise UsageError("--profile does not apply to --format html: its measured report prints as text, json or csv")
    if fmt == "html" and sparsity:
        raise UsageError("--sparsity does not apply to --format html yet: its report prints as text, json or csv")
    if fmt in ("tree", "chrome-trace") and rendering.by_operator:
        raise UsageError("--by-operator applies to table, csv and md")
    if fmt == "chrome-trace" and not hardware:
        raise UsageError(
            "--format chrome-trace lays out the roofline's times: add --hardware NAME (e.g. --hardware h100-sxm)"
        )
    if fmt == "chrome-trace" and sparsity:  # it laid out the dense times, saying nothing
        raise UsageError(
            "--sparsity does not apply to --format chrome-trace yet: the timeline holds the dense roofline's "
            "times; its sparse report prints as text, json or csv"
        )
    if fmt == "chrome-trace" and profile:
        raise UsageError("--profile's measured report is json, csv or text: leave out --format chrome-trace")


def check_counts(rendering: Rendering, repeats: int) -> None:
    """The counts a user types that are no model size (digits, profiled passes), within limits."""
    for flag, value, limit in (
        ("--decimals", rendering.decimals, MAX_DIGITS),
        ("--sig-figs", rendering.sig_figs, MAX_DIGITS),
        ("--repeats", repeats, MAX_REPEATS),
    ):
        if value is not None and value > limit:
            raise UsageError(f"{flag} {value}: more than {limit:,} (the limit)")


def _check_exact_formats(rendering: Rendering) -> None:
    if rendering.format in ("json", "csv") and (
        rendering.units or rendering.decimals is not None or rendering.sig_figs is not None
    ):
        raise UsageError("--units, --decimals and --sig-figs apply to text formats; json and csv are exact")


def _check_hf_flags(model: str, inputs: Inputs) -> None:
    # They shape a transformers model's config and inputs; any other model would silently ignore them.
    if model.startswith("hf:"):
        return
    given = [flag for flag, value in (("--seq-len", inputs.seq_len), ("--hf-config", inputs.hf_config)) if value]
    if given:
        raise UsageError(f"{given[0]} applies to hf: and llm: models, not to {model}: give its inputs with --input")


@contextmanager
def writing(flag: str, path: str) -> Iterator[None]:
    """Writing the file a flag names: a failure (read-only, a full disk, /proc) names the flag
    and the path, which the system's message alone does not."""
    try:
        yield
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write it ({e.strerror or one_line(e)})") from e


def check_output_paths(rendering: Rendering, output: str | None, plot: str | None) -> None:
    """``-o`` and ``--plot`` are written after the analysis: a wrong folder or format should not
    cost one."""
    if rendering.csv_meta and rendering.format != "csv":
        raise UsageError(
            f"--csv-meta describes a CSV export: add --format csv (the {rendering.format} format has none)"
        )
    if rendering.csv_raw and rendering.format != "csv":
        raise UsageError(f"--csv-raw writes CSV cells as they are: add --format csv (not {rendering.format})")
    for flag, value in (("-o", output), ("--plot", plot), ("--csv-meta", rendering.csv_meta)):
        if value is not None and not value.strip():  # -o "" (an unset shell variable) was taken as no -o at all
            raise UsageError(f"{flag} needs a file name, got {value!r}")
        if value and not Path(value).resolve().parent.is_dir():
            if Path(value).is_symlink():  # written through, as a shell's > would: its target's folder is missing
                target = Path(os.path.realpath(value))
                raise UsageError(
                    f"{flag} {value}: a link to {os.readlink(value)}, whose folder {str(target.parent)!r} does not exist"
                )
            raise UsageError(f"{flag} {value}: no folder {str(Path(value).parent)!r} to write it in")
        if value and Path(value).is_dir():
            raise UsageError(f"{flag} {value}: a folder, not a file: name a file in it")
    _check_distinct_outputs(output, plot, rendering.csv_meta)
    if plot:
        try:  # only when a chart is asked for
            from matplotlib.backend_bases import FigureCanvasBase
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install 'opcount[plot]'") from None
        kinds = sorted(FigureCanvasBase.get_supported_filetypes())
        if Path(plot).suffix.lstrip(".").lower() not in kinds:
            raise UsageError(f"--plot {plot}: name a chart file ending in .png or .svg (or {', '.join(kinds)})")


def _check_distinct_outputs(output: str | None, plot: str | None, csv_meta: str | None) -> None:
    # Two outputs on one path: the second written replaced the first and the run said nothing.
    chart = Path(plot) if plot else None
    files = [
        ("-o", output),
        ("--plot", plot),
        ("--plot's time chart", chart and str(chart.with_name(f"{chart.stem}.time{chart.suffix}"))),
        ("--csv-meta", csv_meta),
    ]
    seen: dict[Path, str] = {}
    for flag, value in files:
        if not value:
            continue
        path = Path(value).resolve()
        if path in seen:
            raise UsageError(f"{flag} {value}: {seen[path]} writes the same file: give each output its own")
        seen[path] = flag


def _check_input_shapes(shapes: Sequence[tuple[str, tuple[int, ...], torch.dtype]], meta: bool) -> None:
    """``shapes``: (the flag as typed, the shape, the dtype) of each input to be made."""
    total = 0
    for flag, shape, dtype in shapes:
        if any(d == 0 for d in shape):
            raise UsageError(f"{flag}: sizes must be positive")
        elements = math.prod(shape)
        if elements * dtype.itemsize > MAX_ELEMENTS:  # torch sizes a tensor's storage in int64 bytes
            raise UsageError(
                f"{flag}: {elements:.3g} elements of {dtype.itemsize} bytes, more than torch can index (2**63 - 1 bytes)"
            )
        total += elements * dtype.itemsize
        if not meta and total > REAL_BYTES:
            raise UsageError(
                f"{flag}: {elements:,} elements ({_bytes(elements * dtype.itemsize)} as {_name(dtype)}), "
                f"over the {_bytes(REAL_BYTES)} budget for real inputs; {META_HINT}"
            )


def check_real_weights(label: str, on_meta: nn.Module, hint: str) -> None:
    """Refuse a model whose weights and buffers, built for real, would exceed :data:`REAL_BYTES`.

    ``on_meta``: the same model built on the meta device (no storage), where counting is free.
    """
    params = {id(p): p for p in on_meta.parameters()}.values()
    count = sum(p.numel() for p in params)
    # buffers are built for real too: GPT-Neo's causal mask is max_position_embeddings^2 booleans
    buffers = {id(b): b for b in on_meta.buffers()}.values()
    nbytes = sum(t.numel() * t.element_size() for t in (*params, *buffers))
    if nbytes > REAL_BYTES:
        raise UsageError(
            f"{label}: {count:,} parameters, with the buffers {_bytes(nbytes)}, over the {_bytes(REAL_BYTES)} "
            f"budget for weights built for real; add --meta to analyze it without weights, or shrink it ({hint})"
        )


# ----- --hf-config ------------------------------------------------------------------------------
def hf_overrides(config_class: type, items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` items as keyword arguments of ``config_class``, each value parsed with the
    type of the field's default (``n_layer=2`` -> 2, ``n_layer=abc`` refused)."""
    default = defaults(config_class)  # None: a config without defaults, whose values stay Python literals
    found: dict[str, Any] = {}
    typed: dict[str, str] = {}  # each field's item as typed, for its message
    owner = config_class.__name__
    for item in items:
        key, sep, text = (s.strip() for s in item.partition("="))
        outer, dot, inner = key.partition(".")
        nested = getattr(default, outer, None) if outer.isidentifier() else None
        if sep and dot and inner.isidentifier() and hasattr(nested, "to_dict"):  # a sub-config: a dict builds it
            example = json.dumps({inner: _literal(text)})
            raise UsageError(f"--hf-config {item}: a nested config's field is set as a dict: {outer}={example}")
        if not sep or not key.isidentifier():
            raise UsageError(f"malformed --hf-config {item!r}: expected KEY=VALUE")
        value = _parse_value(owner, key, text, getattr(default, key, None))
        try:  # a method, a private name, a misspelt field, a field that selects code: refused, named
            check_field(config_class, key, value, default)
        except FieldError as e:
            raise UsageError(
                f"--hf-config {item}: {e}" + (": --hf-config sets the config's data fields" if e.data_only else "")
            ) from None
        found[key] = value
        typed[key] = item
    for key, item in typed.items():
        try:  # a zero size, before the constructor divides by it
            check_values(config_class, found, default, keys=[key])
        except SizeError as e:
            raise UsageError(f"--hf-config {item}: {e}") from None
    return found


def invalid_config(where: str, items: Sequence[str], e: BaseException) -> UsageError:
    """A config the constructors refused, in one line naming the ``--hf-config`` values that made it."""
    given = f" with --hf-config {', '.join(items)}" if items else ""
    return UsageError(f"{where}{given}: invalid config: {first_line(e, type(e).__name__)}")


def _literal(text: str) -> Any:
    """``text`` as the Python literal it spells (``2``, ``true``), else as itself."""
    try:
        return ast.literal_eval({"true": "True", "false": "False"}.get(text, text))
    except (ValueError, SyntaxError):
        return text


def check_kept(where: str, config: Any, overrides: dict[str, Any]) -> Any:
    """``config``, refused where it does not hold a value ``--hf-config`` set: a config that derives a field
    from others (LongcatFlashConfig: ``num_hidden_layers`` is twice ``num_layers``) rounds it silently, and
    the model counted would not be the one asked for."""
    for key, value in overrides.items():
        held = getattr(config, key, value)
        if isinstance(value, (bool, int, float, str)) and type(held) is type(value) and held != value:
            raise UsageError(
                f"{where}: --hf-config {key}={value}: {type(config).__name__} makes it {held} (it derives {key} from "
                "other fields: see its documentation)"
            )
    return config


def _parse_value(owner: str, key: str, text: str, default: Any) -> Any:
    kind = type(default)
    try:
        if kind is bool:
            return {"true": True, "1": True, "false": False, "0": False}[text.lower()]
        if kind is int:
            value = int(text)
            if value < 0 < default:  # a size or a count (layers, heads, vocabulary): the model would build empty
                raise UsageError(
                    f"--hf-config {key}={text}: {owner}.{key} takes a whole number >= 0 (default {default})"
                )
            return value
        if kind is float:
            return float(text)
    except (KeyError, ValueError):
        expected = {bool: "true or false", int: "an integer", float: "a number"}[kind]
        raise UsageError(f"--hf-config {key}={text}: {owner}.{key} takes {expected} (default {default!r})") from None
    if kind is str:
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text  # a plain string such as gelu_new


# ----- numbers in messages ----------------------------------------------------------------------
def _bytes(n: float) -> str:
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} bytes"


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    return _integer(text, 1, "a positive integer")


def natural_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    return _integer(text, 0, "a non-negative integer")


def _integer(text: str, minimum: int, expected: str) -> int:
    # one message per flag whatever the wrong value: -3 and 0 both miss "a positive integer"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value
