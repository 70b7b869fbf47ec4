"""The ``opcount`` command: what a model costs, as a table, a tree, JSON, CSV or markdown.

    opcount resnet50                          a torchvision model (built with weights=None)
    opcount mypkg.models:build --input 1,3,64,64
    opcount hf:GPT2Config --seq-len 128       a transformers model from its config class

Mistakes (an unknown model, a malformed shape, contradictory flags, a model that fails on the
input) print one line naming the problem and exit with status 2; ``--debug`` shows the traceback
instead. Flags are checked before any model is built (:mod:`opcount.cli.args`).

This module runs the command: it parses (:mod:`opcount.cli.parser`), builds the model
(:mod:`opcount.cli.models`), analyzes it (:mod:`opcount.cli.analyze`), renders the report
(:mod:`opcount.cli.render`) and prints it with the warnings (:mod:`opcount.cli.warning_capture`);
``opcount llm:NAME`` goes to :mod:`opcount.cli.llm`, ``opcount compare`` to
:mod:`opcount.cli.compare`.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, TextIO

import torch

from ..errors import OpcountError
from ..llm.model import expected_routing
from ..messages import one_line
from . import llm as llm_command
from . import models as cli_models
from .analyze import analyze, local_hardware, roles_needed
from .args import UsageError, check_arguments, check_output_paths
from .models import Loaded, input_dtype
from .parser import attached_shapes, build_parser, output_format
from .progress import Progress
from .render import render
from .warning_capture import Collect, Unsupported, captured_warnings, unsupported, warning_lines


@contextmanager
def writing(flag: str, path: str) -> Iterator[None]:
    """Writing the file a flag names: a failure (read-only, a full disk, /proc) names the flag
    and the path, which the system's message alone does not."""
    try:
        yield
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write it ({e.strerror or one_line(e)})") from e


def _profiled(loaded: Loaded, analyses: dict[str, Any], args: argparse.Namespace, spinner: Progress, text: str) -> str:
    """--profile: measured times beside the roofline already computed; json/csv: the measured report alone."""
    from ..profiling import profile

    spinner.update(f"profiling {loaded.label} ({args.repeats} passes)")
    measured = profile(
        loaded.model, loaded.inputs, loaded.kwargs, repeats=args.repeats, predicted=analyses.get("roofline")
    )
    if args.plot:
        path = Path(args.plot)
        with writing("--plot", args.plot):
            measured.plot(path.with_name(f"{path.stem}.profile{path.suffix}"))
    if args.format == "json":
        return measured.to_json()
    if args.format == "csv":
        return measured.to_csv("operators" if args.by_operator else "modules").rstrip("\n")
    depth = 3 if args.depth is None else args.depth
    return "\n\n".join([text, measured.summary(), measured.table(max_depth=depth), measured.table(by="operator")])


def _llm(args: argparse.Namespace, spinner: Progress) -> str:
    """LLM inference phases (opcount.cli.llm): built and traced on the meta device."""
    text, points = llm_command.run(args, args.hf_config, spinner.update)
    if args.plot:
        if args.hardware is None:
            raise UsageError("--plot needs --hardware")
        from ..llm.plot import save_llm_chart

        spinner.update(f"plotting {args.plot}")
        with writing("--plot", args.plot):
            save_llm_chart(points, args, args.plot)
    return text


def run(args: argparse.Namespace, stderr: TextIO) -> str:
    """``opcount MODEL`` (or ``llm:NAME``): the report as text; warnings go to ``stderr``."""
    torch.manual_seed(0)  # random inputs and weights: data-dependent models give the same counts
    # --debug output is read as a log: no line redrawn between its warnings
    spinner = Progress(stderr, enabled=False if args.debug else None)
    llm = llm_command.wanted(args)
    if llm:  # its own flags, checked before anything is built
        llm_command.check(args)
        check_output_paths(args)
    else:
        check_arguments(args, input_dtype(args))
        roles_needed(args)  # before building: a typo should not cost a model
    missed: Unsupported | None = None
    caught = Collect()
    try:
        with captured_warnings(args.debug, str(args.model).startswith(("hf:", "llm:"))) as caught:
            try:
                if isinstance(args.hardware, str):
                    args.hardware = local_hardware(args, spinner)
                elif getattr(args, "recalibrate", False):
                    raise UsageError("--recalibrate applies to --hardware local")
                if llm:
                    text = _llm(args, spinner)
                else:
                    text, missed = _whole_model(args, spinner)
            finally:
                spinner.close()
    finally:  # before an error's line too: a library's warning may say why (transformers' rope_scaling check)
        if not args.quiet:
            lines = warning_lines(caught.take(), missed, args.verbose or args.debug)
            stderr.writelines(f"opcount: {line}\n" for line in lines)
    return text


def _whole_model(args: argparse.Namespace, spinner: Progress) -> tuple[str, Unsupported]:
    """The report of ``opcount MODEL`` and the operators its columns miss."""
    spinner.update(f"building {args.model}")
    loaded = cli_models.load(args.model, args)
    # mixture-of-experts blocks route by expectation: random weights route at random, and meta
    # tensors cannot route at all (docs/llm.md)
    routing = expected_routing(loaded.model) if args.model.startswith("hf:") else nullcontext()
    with torch.no_grad(), routing:
        analyses = analyze(loaded, args, spinner)
    text = render(analyses, args)
    missed = unsupported(analyses, args.columns or ["params", "flops"])
    if args.profile:
        text = _profiled(loaded, analyses, args, spinner, text)
    if args.plot:
        from ..roofline.plot import save_charts

        spinner.update(f"plotting {args.plot}")
        with writing("--plot", args.plot):
            save_charts(analyses["roofline"], args.plot)
            if "sparsity" in analyses:  # the case --sparsity asks about, beside the dense charts
                sparse, path = analyses["sparsity"], Path(args.plot)
                subject = f"sparse weights ({sparse.series}, {sparse.level:.0%} zeros, {sparse.speedup:.2f}x dense)"
                save_charts(sparse.sparse, path.with_name(f"{path.stem}.sparse{path.suffix}"), subject=subject)
    return text, missed


def main(argv: Sequence[str] | None = None) -> int:
    """The ``opcount`` command; returns the exit status."""
    stderr = sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if argv[:1] == ["compare"]:  # a first word, not a subparser: `opcount resnet50` stays as it is
            from .compare import compare

            args = build_parser(compare=True).parse_args(attached_shapes(argv[1:]))
            args.format = output_format(args)
            text = compare(args, stderr)
        elif argv[:1] == ["hardware"]:
            from . import hardware as hardware_command

            text, args = hardware_command.run(argv[1:])
        else:
            args = build_parser().parse_args(attached_shapes(argv))
            args.format = output_format(args)
            text = run(args, stderr)
        if args.output:
            with writing("-o", args.output):
                Path(args.output).write_text(text + "\n", encoding="utf-8")
        else:
            sys.stdout.write(text + "\n")
        return 0
    except SystemExit as e:  # --help and --version
        return int(e.code or 0)
    except KeyboardInterrupt:
        stderr.write("opcount: interrupted\n")
        return 130
    except (UsageError, OpcountError, ValueError, OSError) as e:
        # Mistakes in what was asked: a bad argument, a model that fails on its input.
        if debug:
            traceback.print_exc()
        message = str(e) if isinstance(e, (UsageError, OpcountError)) else one_line(e)
        stderr.write(f"opcount: error: {_in_flags(message.splitlines()[0]) if message else type(e).__name__}\n")
        return 2
    except Exception as e:
        if debug:
            traceback.print_exc()
        stderr.write(f"opcount: internal error: {one_line(e)} (run with --debug for the traceback)\n")
        return 1


if __name__ == "__main__":
    raise SystemExit(main())


# The Python API's errors name its keyword arguments; on the command line they are flags.
_FLAGS = {"tracer='dispatch'": "--tracer dispatch"}


def _in_flags(message: str) -> str:
    """An error message of the Python API in the command line's words."""
    for keyword, flag in _FLAGS.items():
        message = message.replace(keyword, flag)
    return message
