"""The ``opcount`` command: what a model costs, as a table, a tree, JSON, CSV or markdown.

    opcount resnet50                          a torchvision model (built with weights=None)
    opcount mypkg.models:build --input 1,3,64,64
    opcount hf:GPT2Config --seq-len 128       a transformers model from its config class

Mistakes (an unknown model, a malformed shape, contradictory flags, a model that fails on the
input) print one line naming the problem and exit with status 2; ``--debug`` shows the traceback
instead. Flags are checked before any model is built (:mod:`opcount.cli.args`).

This module runs the command, each step handing the next what it needs and nothing coming back:
the flags are parsed once into frozen typed options (:func:`opcount.cli.parser.parse`,
:mod:`opcount.cli.options`), ``--hardware`` is resolved once (:meth:`HardwareChoice.resolve
<opcount.cli.options.HardwareChoice.resolve>`), the model is built from ``options.inputs``
(:mod:`opcount.cli.models`), analyzed as ``options.analysis`` says (:mod:`opcount.cli.analyze`),
rendered as ``options.rendering`` says (:mod:`opcount.cli.render`) and printed with the warnings
(:mod:`opcount.cli.warning_capture`); ``opcount llm:NAME`` goes to :mod:`opcount.cli.llm`,
``opcount compare`` to :mod:`opcount.cli.compare`, ``opcount simulate`` to :mod:`opcount.cli.simulate`,
``opcount plan`` to :mod:`opcount.cli.plan`, ``opcount calibrate`` to :mod:`opcount.cli.calibrate`.
"""

from __future__ import annotations

import gc
import sys
import traceback
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import TextIO

import torch

from ..errors import OpcountError
from ..files import printable, write_text
from ..hardware.lookup import Hardware
from ..llm.moe.experts import expected_routing
from ..messages import one_line
from . import llm as llm_command
from . import models as cli_models
from .analyze import Analyses, analyze
from .args import UsageError, writing
from .models import Loaded
from .options import CompareOptions, LLMRun, Options
from .parser import parse
from .progress import Progress
from .render import render, shown_columns
from .training import whole_model as training_whole_model
from .warning_capture import Collect, Unsupported, captured_warnings, note, unsupported, warning_lines


def main(argv: Sequence[str] | None = None) -> int:
    """The ``opcount`` command; returns the exit status."""
    stderr = sys.stderr
    command = argv is None  # the process's own command line: the process ends when this returns
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        if argv[:1] == ["hardware"]:  # a first word, as compare: its own flags
            from . import hardware as hardware_command

            text, output = hardware_command.run(argv[1:])
        elif argv[:1] == ["simulate"]:  # a first word too: the workload's flags, then a phase's
            from . import simulate as simulate_command

            text, output = simulate_command.run(argv[1:], stderr)
        elif argv[:1] == ["plan"]:  # a first word too: the plan's flags, then a phase's
            from . import plan as plan_command

            text, output = plan_command.run(argv[1:], stderr)
        elif argv[:1] == ["calibrate"]:  # a first word too: its own flags
            from . import calibrate as calibrate_command

            text, output = calibrate_command.run(argv[1:], stderr)
        else:
            options = parse(argv)
            if isinstance(options, CompareOptions):
                from .compare import compare

                text = compare(options, stderr)
            else:
                text = run(options, stderr)
            output = options.output
        if output:
            with writing("-o", output):
                write_text(output, text + "\n")  # whole, or the file as it was
        else:
            sys.stdout.write(printable(text + "\n", sys.stdout.encoding))
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
    finally:
        if not command:  # called in a process that goes on (run() froze what it found)
            gc.unfreeze()


def run(options: Options, stderr: TextIO) -> str:
    """``opcount MODEL`` (or ``llm:NAME``): the report as text; warnings go to ``stderr``."""
    torch.manual_seed(0)  # random inputs and weights: data-dependent models give the same counts
    # --debug output is read as a log: no line redrawn between its warnings
    spinner = Progress(stderr, enabled=False if options.debug else None)
    missed: Unsupported | None = None
    caught = Collect()
    # The libraries imported so far (torch, transformers: millions of objects) live as long as the
    # process: kept out of the collector, a full collection while tracing walks only what the
    # command made (a 70B sweep: a quarter of its time less); main() gives them back (or, as the
    # process's own command, leaves them out of the collection at exit: half a second)
    gc.freeze()
    try:
        with captured_warnings(options.debug, options.model.startswith(("hf:", "llm:"))) as caught:
            try:
                hardware = None if options.hardware is None else options.hardware.resolve(spinner.update, note)
                if options.llm is not None:
                    text = _llm(options, options.llm, hardware, spinner)
                else:
                    text, missed = _whole_model(options, hardware, spinner)
            finally:
                spinner.close()
    finally:  # before an error's line too: a library's warning may say why (transformers' rope_scaling check)
        if not options.quiet:
            lines = warning_lines(caught.take(), missed, options.verbose)
            stderr.writelines(f"opcount: {line}\n" for line in lines)
    return text


def _whole_model(options: Options, hardware: Hardware | None, spinner: Progress) -> tuple[str, Unsupported]:
    """The report of ``opcount MODEL`` and the operators its shown columns miss."""
    spinner.update(f"building {options.model}")
    loaded = cli_models.load(options.model, options.inputs)
    # mixture-of-experts blocks route by expectation: random weights route at random, and meta
    # tensors cannot route at all (docs/llm.md)
    routing = expected_routing(loaded.model) if options.model.startswith("hf:") else nullcontext()
    with torch.no_grad(), routing:
        analyses = analyze(loaded, options.model, options.analysis, hardware, spinner)
    text = render(analyses, options.rendering, options.model)
    if options.analysis.mode == "train":  # the step's memory per device (opcount.cli.training)
        text = training_whole_model(analyses, options, text)
    missed = unsupported(analyses, shown_columns(analyses, options.rendering) or ["params", "flops"])
    if options.profile:
        text = _profiled(loaded, analyses, options, spinner, text)
    if options.plot:
        from ..roofline.plot import save_charts

        assert analyses.roofline is not None  # --plot needs --hardware: refused before building
        spinner.update(f"plotting {options.plot}")
        with writing("--plot", options.plot):
            save_charts(analyses.roofline, options.plot)
            if analyses.sparsity is not None:  # the case --sparsity asks about, beside the dense charts
                sparse, path = analyses.sparsity, Path(options.plot)
                subject = f"sparse weights ({sparse.series}, {sparse.level:.0%} zeros, {sparse.speedup:.2f}x dense)"
                save_charts(sparse.sparse, path.with_name(f"{path.stem}.sparse{path.suffix}"), subject=subject)
    return text, missed


def _profiled(loaded: Loaded, analyses: Analyses, options: Options, spinner: Progress, text: str) -> str:
    """--profile: measured times beside the roofline already computed; json/csv: the measured report alone."""
    from ..profiling import profile

    spinner.update(f"profiling {loaded.label} ({options.repeats} passes)")
    measured = profile(loaded.model, loaded.inputs, loaded.kwargs, repeats=options.repeats, predicted=analyses.roofline)
    if options.plot:
        path = Path(options.plot)
        with writing("--plot", options.plot):
            measured.plot(path.with_name(f"{path.stem}.profile{path.suffix}"))
    rendering = options.rendering
    if rendering.format == "json":
        return measured.to_json()
    if rendering.format == "csv":
        return measured.to_csv("operators" if rendering.by_operator else "modules", raw=rendering.csv_raw).rstrip("\n")
    depth = 3 if rendering.depth is None else rendering.depth
    return "\n\n".join([text, measured.summary(), measured.table(max_depth=depth), measured.table(by="operator")])


def _llm(options: Options, wanted: LLMRun, hardware: Hardware | None, spinner: Progress) -> str:
    """LLM inference phases (opcount.cli.llm): built and traced on the meta device."""
    text, points = llm_command.run(options, wanted, hardware, spinner.update)
    if options.plot:
        from ..llm.report.plot import save_llm_chart

        spinner.update(f"plotting {options.plot}")
        with writing("--plot", options.plot):
            save_llm_chart(points, options.plot, model=options.model, sweep=[key for key, _ in wanted.flags.sweep])
    return text


if __name__ == "__main__":
    raise SystemExit(main())


# The Python API's errors name its keyword arguments; on the command line they are flags.
_FLAGS = {"tracer='dispatch'": "--tracer dispatch"}


def _in_flags(message: str) -> str:
    """An error message of the Python API in the command line's words."""
    for keyword, flag in _FLAGS.items():
        message = message.replace(keyword, flag)
    return message
