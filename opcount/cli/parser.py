"""The ``opcount`` command's arguments: the parser, its help text, the argument types that
turn a flag's text into a value (a shape, a list of columns), and :func:`parse`, which makes the
command line, once, into the typed options everything below reads (:mod:`opcount.cli.options`).

The whole model's flags are here; the LLM path's groups (:mod:`opcount.cli.flags`) each add their
arguments, make their options group and check it, and this module composes them. A malformed argument
is refused in one line naming the flag (:class:`~opcount.cli.args.UsageError`), not with argparse's usage
block; the checks of several flags together run in :func:`parse`, before anything is built. Only this
module and the flag groups read argparse's namespace; none of them imports a module that runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, NoReturn

import torch

from .._version import __version__
from ..handles.presets import FLOP_PRESETS
from ..ir import DTYPE_BYTES
from ..report.columns import COLUMNS
from .args import (
    UsageError,
    check_compare,
    check_model,
    check_output_paths,
    check_recalibrate,
    natural_int,
    positive_int,
)
from .flags import deploy as deploy_flags
from .flags import llm as llm_flags
from .flags import training as training_flags
from .options import Analysis, CompareOptions, HardwareChoice, Inputs, LLMRun, Options, Rendering, roles_for

FORMATS = ("table", "tree", "json", "csv", "md", "repr", "html", "chrome-trace")
# -o FILE's format by the file's ending, longest ending first: the formats it may hold, its default
# first. An ending whose formats are not in FORMATS is ignored; any other ending gets the default
# text table. A new format that writes files of its own ending is one entry here.
OUTPUT_EXTENSIONS = {
    ".trace.json": ("chrome-trace", "json"),
    ".json": ("json", "chrome-trace"),
    ".csv": ("csv",),
    ".md": ("md",),
    ".html": ("html",),
    ".txt": ("table", "tree", "repr"),
}
# --dtype: the dtype of --input tensors, by the names torch prints and their aliases
DTYPES = {
    "float32": torch.float32,
    "float": torch.float32,
    "float16": torch.float16,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
    "double": torch.float64,
    "int64": torch.int64,
    "long": torch.int64,
    "int32": torch.int32,
    "int": torch.int32,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
COLUMN_ALIASES = {
    "acts": "activations",
    "read": "bytes_read",
    "write": "bytes_written",
    "ai": "intensity",
    "%": "percent",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not argparse's usage block
        raise UsageError(f"{message} (see {self.prog} --help)")


# Every form of the command, so that `opcount --help` names the subcommands (they are first
# words, not argparse subparsers: `opcount resnet50` stays as it is).
USAGE = """opcount [options] MODEL
       opcount compare [options] MODEL [MODEL ...]   several models side by side (opcount compare --help)
       opcount simulate [options] MODEL --rate R     served traffic on a deployment (opcount simulate --help)
       opcount plan [options] MODEL --rate R         the cheapest deployments meeting targets (opcount plan --help)
       opcount hardware [NAME]                       the --hardware presets, or one device's peaks"""
# The guides by title: a pip install has no docs/ folder and the project has no published
# documentation site, so --help names each guide, and the source distribution ships them.
DOCS = (
    "Guides (docs/ in the source distribution and the repository): tutorial.md (start here), "
    "glossary.md (the terms), reports.md (tables, exports and this command), roofline.md, hardware.md, "
    "llm.md (LLM inference), simulate.md (served traffic), plan.md (deployment planning), dispatch.md (meta tensors, training), sparsity.md, profiling.md."
)
# The flags `opcount compare` refuses (a model's totals have no depth, chart or profile): parsed, not in its --help
ONE_MODEL = ("depth", "no_param_shapes", "profile", "repeats", "plot")
NOT_FOR_COMPARE = (*ONE_MODEL, *llm_flags.FLAGS, *deploy_flags.FLAGS, *training_flags.FLAGS)


def parse(argv: Sequence[str]) -> Options | CompareOptions:
    """The command line as checked, typed options: ``opcount compare ...`` or ``opcount MODEL ...``."""
    if argv[:1] == ["compare"]:  # a first word, not a subparser: `opcount resnet50` stays as it is
        parser = build_parser(compare=True)
        return _compare_options(parser.parse_args(attached_shapes(argv[1:])), parser.prog)
    parser = build_parser()
    return _options(parser.parse_args(attached_shapes(argv)), parser.prog)


def _options(ns: argparse.Namespace, prog: str) -> Options:
    fmt = output_format(ns)
    hardware = _hardware(ns, prog)
    flags = llm_flags.options(vars(ns))
    options = Options(
        model=ns.model,
        inputs=_inputs(ns),
        analysis=_analysis(ns, fmt, tracer=ns.tracer, hardware=hardware is not None),
        hardware=hardware,
        rendering=_rendering(ns, fmt),
        llm=None,
        profile=ns.profile,
        repeats=ns.repeats,
        output=ns.output,
        plot=ns.plot,
        quiet=ns.quiet,
        verbose=ns.verbose or ns.debug,
        debug=ns.debug,
        training=training_flags.options(vars(ns)),
    )
    if llm_flags.wanted(ns.model, flags):  # its own flags, checked before anything is built
        precision = llm_flags.check(flags, options)
        check_output_paths(options.rendering, options.output, options.plot)
        if options.plot and hardware is None:
            raise UsageError("--plot needs --hardware")
        options = replace(options, llm=LLMRun(flags, precision))
    else:
        check_model(options)  # before building: a typo should not cost a model
    check_recalibrate(hardware, ns.recalibrate)
    training_flags.check(options)
    return options


def _compare_options(ns: argparse.Namespace, prog: str) -> CompareOptions:
    fmt = output_format(ns)
    hardware = _hardware(ns, prog)
    options = CompareOptions(
        models=tuple(ns.models),
        inputs=_inputs(ns),
        # one tracer for every model (the export states it once): jit unless --tracer dispatch or --meta
        analysis=_analysis(
            ns, fmt, tracer=ns.tracer or ("dispatch" if ns.meta else "jit"), hardware=hardware is not None
        ),
        hardware=hardware,
        rendering=_rendering(ns, fmt),
        output=ns.output,
        quiet=ns.quiet,
        verbose=ns.verbose or ns.debug,
        debug=ns.debug,
    )
    given = {"--no-param-shapes": ns.no_param_shapes, "--profile": ns.profile, "--plot": ns.plot is not None}
    given |= dict.fromkeys(training_flags.options(vars(ns)).given, True)  # one model's training step
    check_compare(options, llm_flags.options(vars(ns)), ns.depth, ns.repeats, given)
    check_recalibrate(hardware, ns.recalibrate)
    return options


def _hardware(ns: argparse.Namespace, prog: str) -> HardwareChoice | None:
    """``--hardware``: a preset or file read now (a typo is refused as argparse refuses a bad value),
    or this machine, measured when the run starts."""
    from ..hardware.lookup import LOCAL, hardware

    if ns.hardware is None:
        return None
    key = ns.hardware.strip().lower()
    if key == LOCAL or key.startswith(LOCAL + ":"):
        # --profile runs on the CPU (the command builds models there): measure what it runs on
        local = key if ":" in key or not ns.profile else f"{LOCAL}:cpu"
        return HardwareChoice(local=local, recalibrate=ns.recalibrate)
    try:
        return HardwareChoice(spec=hardware(ns.hardware))
    except (LookupError, OSError, ValueError) as e:
        raise UsageError(f"argument --hardware: {str(e).splitlines()[0]} (see {prog} --help)") from None


def _inputs(ns: argparse.Namespace) -> Inputs:
    return Inputs(
        shapes=tuple(ns.input or ()),
        dtype_name=ns.dtype,
        dtype=DTYPES[ns.dtype],
        seq_len=ns.seq_len,
        hf_config=tuple(ns.hf_config),
        meta=ns.meta,
    )


def _analysis(ns: argparse.Namespace, fmt: str, tracer: str | None, hardware: bool) -> Analysis:
    sparsity = tuple(ns.sparsity or ())
    return Analysis(
        preset=ns.preset,
        flops_per_mac=ns.flops_per_mac,
        tracer=tracer,
        mode=ns.mode,
        meta=ns.meta,
        roofline_dtype=ns.roofline_dtype,
        fuse=ns.fuse,
        tf32=ns.tf32,
        sparsity=sparsity,
        roles=roles_for(ns.columns or (), fmt, hardware=hardware, sparsity=bool(sparsity)),
    )


def _rendering(ns: argparse.Namespace, fmt: str) -> Rendering:
    return Rendering(
        format=fmt,
        columns=None if ns.columns is None else tuple(ns.columns),
        by_operator=ns.by_operator,
        depth=ns.depth,
        units=ns.units,
        decimals=ns.decimals,
        sig_figs=ns.sig_figs,
        param_shapes=not ns.no_param_shapes,
        csv_meta=ns.csv_meta,
        csv_raw=ns.csv_raw,
    )


def build_parser(compare: bool = False) -> argparse.ArgumentParser:
    """The command's arguments; ``compare``: those of ``opcount compare MODEL [MODEL ...]``."""
    p = _Parser(
        prog="opcount compare" if compare else "opcount",
        usage=None if compare else USAGE,
        description="What a PyTorch model costs, module by module and operator by operator."
        if not compare
        else "Several models side by side: one row per model, or per operator with --by-operator.",
        epilog="Models run in eval mode on random inputs (seed 0). Examples: "
        + (
            "opcount compare resnet50 vit_b_16 --hardware h100-sxm; "
            "opcount compare resnet18 mobilenet_v3_small --by-operator --format csv. "
            if compare
            else "opcount resnet50; opcount resnet50 --format tree --depth 2; "
            "opcount hf:GPT2Config --seq-len 128 --format json; "
            "opcount mypkg.models:build --input 1,3,64,64 --columns params,flops,percent; "
            "opcount compare resnet50 vit_b_16 --hardware h100-sxm. "
        )
        + DOCS,
    )
    p.add_argument(
        "models" if compare else "model",
        nargs="+" if compare else None,
        metavar="MODEL",
        help="a torchvision model name (resnet50; the vision extra), module.path:factory or file.py:factory "
        "(returning a model, (model, inputs) or (model, inputs, kwargs)), hf:ConfigOrModelClass"
        + ("" if compare else ", or llm:NAME, a published LLM architecture (llm:llama-3-8b; the LLM guide, llm.md)")
        + f"; hf:{'' if compare else ' and llm:'} need{'s' if compare else ''} the hf extra ({llm_flags.HF_EXTRA})",
    )
    g = p.add_argument_group("inputs")
    g.add_argument(
        "--input",
        action="append",
        metavar="SHAPE",
        type=parse_shape,
        help="input shape such as 1,3,224,224; repeat for several positional inputs",
    )
    g.add_argument(
        "--dtype",
        default="float32",
        choices=sorted(DTYPES),
        help="dtype of --input tensors; a float dtype also converts the model and a factory's own float inputs "
        "(default float32)",
    )
    g.add_argument(
        "--seq-len",
        type=positive_int,
        metavar="N",
        help="hf: sequence length (default 128; audio models: samples, default 16000)",
    )
    g.add_argument(
        "--hf-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="hf: override a config field, e.g. num_hidden_layers=2 (repeatable)",
    )
    g = p.add_argument_group("analysis")
    g.add_argument(
        "--preset",
        default="default",
        choices=FLOP_PRESETS,
        help="flop formulas: every one (default), exactly fvcore's, or multiply-adds only",
    )
    g.add_argument(
        "--flops-per-mac",
        type=int,
        default=1,
        choices=(1, 2),
        help="flops per multiply-add (fvcore: 1, FlopCounterMode and vendor peaks: 2)",
    )
    g.add_argument(
        "--tracer",
        choices=("jit", "dispatch"),
        help="jit tracing (default; hf: models and --meta take dispatch) or the dispatch tracer (guide: dispatch.md)",
    )
    g.add_argument(
        "--mode",
        default="eval",
        choices=("eval", "train"),
        help="dispatch tracer: the forward pass (default) or a training step, forward and backward",
    )
    g.add_argument(
        "--meta",
        action="store_true",
        help="analyze on meta tensors, without the weights or arithmetic (implies --tracer dispatch)",
    )
    g = p.add_argument_group("roofline")
    g.add_argument(
        "--hardware",
        metavar="NAME_OR_FILE",
        help="speed-of-light time per module on a preset (h100-sxm, a100-sxm, l4, t4, rtx-4090, "
        "h200, b200, mi300x, a10g, l40s, xeon-8480-2s, ...), 'local' (this machine, measured once and cached) "
        "or a .toml/.json hardware file; adds columns time, bound",
    )
    g.add_argument(
        "--recalibrate", action="store_true", help="--hardware local: measure this machine again, not from the cache"
    )
    g.add_argument(
        "--roofline-dtype",
        metavar="DTYPE",
        choices=sorted(DTYPE_BYTES),
        help="dtype the roofline assumes (bytes scaled, peaks chosen); default: the model's dtype",
    )
    g.add_argument("--fuse", action="store_true", help="roofline: fuse elementwise epilogues into their producers")
    g.add_argument("--tf32", action="store_true", help="roofline: float32 multiply-adds run as TF32 on tensor units")
    g.add_argument(
        "--plot",
        metavar="FILE",
        help="roofline: write the roofline chart (.png/.svg) to FILE and the "
        "per-module time chart beside it (FILE.time.png); with --sparsity, the sparse case's too "
        "(FILE.sparse.png, FILE.sparse.time.png); needs --hardware",
    )
    g.add_argument(
        "--sparsity",
        action="append",
        metavar="PATTERN[@NAME]",
        help="sparsity roofline (needs --hardware): 'measured' (the weights' own zeros), '2:4', "
        "'unstructured=0.9', 'block16=87.5%%', or PATTERN@NAME for the weights of modules NAME (a glob); "
        "repeatable; adds columns sparse_flops, sparse_time, speedup, sparsity",
    )
    g = p.add_argument_group("measured")
    g.add_argument(
        "--profile",
        action="store_true",
        help="also run the model: measured time per module and operator (torch.profiler), beside the "
        "prediction with --hardware (%% of speed-of-light); json/csv then hold the measured report; "
        "with --plot, measured vs predicted per module in FILE.profile.png",
    )
    g.add_argument(
        "--repeats",
        type=positive_int,
        default=10,
        metavar="N",
        help="--profile: profiled forward passes after 2 warm-up passes (default 10)",
    )
    llm_flags.add_arguments(p)
    deploy_flags.add_arguments(p)
    training_flags.add_arguments(p)
    g = p.add_argument_group("output")
    g.add_argument(
        "--format",
        choices=FORMATS,
        help="default: by -o FILE's ending (.json, .csv, .md, .html, .txt, .trace.json: chrome-trace), else "
        "table (fvcore's layout); repr: the model as print(model) shows it, the columns inline; html: one "
        "self-contained page (collapsible tree, sortable operator table, charts); chrome-trace: the roofline "
        "as a timeline for Perfetto (needs --hardware)",
    )
    g.add_argument(
        "--columns",
        type=_column_list,
        metavar="LIST",
        help=f"comma-separated: {', '.join(COLUMNS)} (aliases: acts, read, write); "
        "default params,flops (json/csv: every exact statistic computed)",
    )
    g.add_argument(
        "--by-operator",
        action="store_true",
        help="the module x operator breakdown instead of one row per module (table, csv, md)",
    )
    g.add_argument(
        "--depth", type=natural_int, metavar="N", help="module levels shown (default 3; json/csv: every level)"
    )
    g.add_argument(
        "--units",
        default=None,
        choices=("auto", "exact", "1", "K", "M", "G", "T", "P"),
        help="auto: K/M/G/T by magnitude; exact: unrounded; or one fixed unit (1: none)",
    )
    digits = g.add_mutually_exclusive_group()
    digits.add_argument("--decimals", type=natural_int, metavar="N", help="decimals after scaling (table default 3)")
    digits.add_argument("--sig-figs", type=positive_int, metavar="N", help="significant figures (tree/md default 3)")
    g.add_argument("--no-param-shapes", action="store_true", help="table: leave out the parameter rows")
    g.add_argument(
        "-o", "--output", metavar="FILE", help="write the report to FILE instead of stdout (its ending picks --format)"
    )
    g.add_argument(
        "--csv-meta", metavar="FILE", help="csv: write what the numbers were computed from (JSON's meta) to FILE"
    )
    g.add_argument("--csv-raw", action="store_true", help="csv: cells as they are (default: ' before = + - @)")
    # -q and -v contradict each other: argparse refuses the pair in one line
    diagnostics = p.add_argument_group("diagnostics")
    g = diagnostics.add_mutually_exclusive_group()
    g.add_argument("-q", "--quiet", action="store_true", help="no warnings (unsupported operators, uncalled modules)")
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="warnings with their whole lists (every uncalled module, every unsupported operator), "
        "not one line per kind",
    )
    diagnostics.add_argument(
        "--debug", action="store_true", help="show tracebacks and every warning (implies --verbose)"
    )
    p.add_argument("--version", action="version", version=f"opcount {__version__}")
    if compare:
        _hide(p, NOT_FOR_COMPARE)
        _hide_choices(p, "format", ("table", "md", "json", "csv"))
    return p


def _hide(p: argparse.ArgumentParser, dests: Sequence[str]) -> None:
    """Flags parsed but left out of --help (argparse drops a group left empty)."""
    for action in p._actions:  # argparse keeps no public list of a parser's actions
        if action.dest in dests:
            action.help = argparse.SUPPRESS


def _hide_choices(p: argparse.ArgumentParser, dest: str, shown: Sequence[str]) -> None:
    """--help shows ``shown`` as the choices; the others still parse, for a refusal that says why."""
    for action in p._actions:
        if action.dest == dest:
            action.metavar = "{" + ",".join(shown) + "}"
            action.help = f"{', '.join(shown)} (default: table)"


def attached_shapes(argv: Sequence[str]) -> list[str]:
    """``--input -1,3,8,8`` as ``--input=-1,3,8,8``: argparse takes a value that starts with '-' for
    a flag and says only "expected one argument"; attached, the shape's own check says what is wrong."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--input" and arg[:1] == "-" and arg[1:2].isdigit():
            out[-1] = f"--input={arg}"
        else:
            out.append(arg)
    return out


def parse_shape(text: str) -> tuple[int, ...]:
    """``"1,3,224,224"`` (or ``1x3x224x224``) -> ``(1, 3, 224, 224)``."""
    body = text.replace(" ", "").strip("()[]")
    parts = body.split("," if "," in body else "x")
    if len(parts) > 1 and parts[-1] == "":
        parts = parts[:-1]  # "(5,)": Python's spelling of a one-element tuple
    try:
        # An empty size ("1,3,,4") is a typo, not a dimension to drop: int("") refuses it.
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"malformed shape {text!r}: expected integers like 1,3,224,224") from None
    if not shape or any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"malformed shape {text!r}: expected positive sizes like 1,3,224,224")
    return shape


def _column_list(text: str) -> list[str]:
    keys = [COLUMN_ALIASES.get(k.strip(), k.strip()) for k in text.split(",") if k.strip()]
    unknown = [k for k in keys if k not in COLUMNS]
    if unknown or not keys:
        raise argparse.ArgumentTypeError(
            f"unknown column {', '.join(unknown) or text!r}; choose from {', '.join(COLUMNS)}"
        )
    twice = [k for k in dict.fromkeys(keys) if keys.count(k) > 1]
    if twice:  # an alias and its name count as one column (acts, activations)
        raise argparse.ArgumentTypeError(f"column {', '.join(twice)} named twice in {text!r}")
    return keys


def output_format(args: argparse.Namespace) -> str:
    """The report's format: ``--format``, else the one ``-o FILE``'s ending names, else table.
    ``--format`` and an ending that cannot hold it (``--format csv -o x.json``) are refused."""
    given = args.format
    path = str(args.output or "").lower()
    ending = next((e for e in OUTPUT_EXTENSIONS if path.endswith(e)), None)
    formats = [f for f in OUTPUT_EXTENSIONS.get(ending or "", ()) if f in FORMATS]
    if given is None:
        return formats[0] if formats else "table"
    if formats and given not in formats:
        raise UsageError(f"--format {given} -o {args.output}: a {ending} file holds {' or '.join(formats)}")
    return str(given)


def command_parser(**kwargs: Any) -> argparse.ArgumentParser:
    """An argument parser whose mistakes are one line, as the main one's: for a subcommand's own flags."""
    return _Parser(**kwargs)
