"""One model, traced once, and every analysis the flags ask for built on that one trace: the flop
count always, activations and bytes for their columns, the roofline and the sparsity roofline
with ``--hardware`` (``local``: this machine, measured). Shared by ``opcount MODEL`` and
``opcount compare``.

A flag that needs another (``--plot``, ``--sparsity`` or a time column without ``--hardware``) is
refused before anything is traced.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..analysis import ActivationCountAnalysis, FlopCountAnalysis
from ..errors import OpcountError
from ..messages import first_failure
from .args import ROOFLINE_COLUMNS, SPARSITY_COLUMNS, UsageError
from .models import Loaded
from .progress import Progress

MEMORY_COLUMNS = {"bytes_read", "bytes_written", "bytes", "intensity"}


def roles_needed(args: argparse.Namespace) -> set[str]:
    """The analyses the flags and columns ask for; a flag missing what it needs is refused."""
    columns = set(args.columns or ())
    roles = {"flops"}
    if "activations" in columns:
        roles.add("activations")
    if columns & MEMORY_COLUMNS or args.format == "html":  # the page shows the bytes moved
        roles.add("memory")
    if args.hardware is not None or columns & ROOFLINE_COLUMNS:
        if args.hardware is None:
            raise UsageError(f"columns {', '.join(sorted(columns & ROOFLINE_COLUMNS))} need --hardware")
        roles.add("roofline")
    if _wants_sparsity(args) and args.hardware is None:
        raise UsageError("--sparsity and the columns sparse_flops, sparse_time, speedup, sparsity need --hardware")
    if getattr(args, "sparsity", None):
        from ..sparsity import parse_sparsity_args

        try:  # before tracing: a typo should not cost a trace
            parse_sparsity_args(args.sparsity)
        except ValueError as e:  # its messages name the value
            raise UsageError(f"--sparsity: {e}") from None
    if args.plot and args.hardware is None:
        raise UsageError("--plot needs --hardware")
    return roles


def _wants_sparsity(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "sparsity", None)) or bool(set(args.columns or ()) & SPARSITY_COLUMNS)


def _analyses(loaded: Loaded, args: argparse.Namespace, roles: set[str], inputs: Any, kwargs: Any) -> dict[str, Any]:
    """Trace the model once and build every analysis the output needs on that one trace."""
    # --tracer/--mode/--meta; mode and device are refused by the jit tracer with a clear error
    options: dict[str, Any] = {"tracer": getattr(args, "tracer", None) or "jit"}
    if getattr(args, "mode", "eval") != "eval":
        options["mode"] = args.mode
    if getattr(args, "meta", False):
        options["device"] = "meta"
    flops = FlopCountAnalysis(
        loaded.model, inputs, kwargs, preset=args.preset, flops_per_mac=args.flops_per_mac, **options
    )
    traced = flops.trace()  # the one forward pass of this run
    found: dict[str, Any] = {"flops": flops}
    if "activations" in roles:
        found["activations"] = ActivationCountAnalysis(traced)
    if "memory" in roles:
        from ..memory import MemoryTrafficAnalysis  # the costlier import, only when asked for

        found["memory"] = MemoryTrafficAnalysis(traced)
    if "roofline" in roles:
        from ..memory import MemoryTrafficAnalysis

        # analyze() turns it into the roofline report
        found["roofline"] = MemoryTrafficAnalysis(traced, fuse=args.fuse)
    for analysis in found.values():  # run() warns once per operator, naming the columns it misses
        analysis.unsupported_ops_warnings(False)
    return found


def analyze(loaded: Loaded, args: argparse.Namespace, spinner: Progress) -> dict[str, Any]:
    """Run every analysis the output needs; on a trace failure try the loader's alternatives."""
    roles = roles_needed(args)  # a mistake in the arguments is reported before any tracing
    found = _traced(loaded, args, roles, spinner)
    if "roofline" in found:
        from ..roofline import roofline

        spinner.update(f"roofline on {args.hardware.name}")
        traced = found["roofline"]
        found["roofline"] = roofline(
            traced,
            hardware=args.hardware,
            dtype=args.roofline_dtype,
            allow_tf32=args.tf32,
        )
        if _wants_sparsity(args):
            from ..sparsity import parse_sparsity_args, sparsity_roofline

            spinner.update(f"sparsity roofline on {args.hardware.name}")
            try:
                found["sparsity"] = sparsity_roofline(
                    traced,
                    hardware=args.hardware,
                    sparsity=parse_sparsity_args(args.sparsity or []),
                    dtype=args.roofline_dtype,
                    allow_tf32=args.tf32,
                    flops_per_mac=args.flops_per_mac,
                )
            except ValueError as e:  # a name that matches no weight layer of this model
                raise UsageError(f"--sparsity {' '.join(args.sparsity or ['measured'])}: {e}") from None
    return found


def _traced(loaded: Loaded, args: argparse.Namespace, roles: set[str], spinner: Progress) -> dict[str, Any]:
    """The analyses of one trace, with the loader's inputs or, when tracing with them fails, its
    alternatives in turn (the first failure is the one reported). A mistake found after the
    trace (the roofline's) is not a reason to trace again."""
    attempts = [(loaded.inputs, loaded.kwargs), *loaded.alternatives]
    first_error: Exception | None = None
    for inputs, kwargs in attempts:
        try:
            spinner.update(f"tracing {loaded.label}")
            found = _analyses(loaded, args, roles, inputs, kwargs)
            for role, analysis in found.items():
                spinner.update(f"{role}: analyzing {loaded.label}")
                analysis.by_module()  # analyses are lazy: do the work here, under the spinner
            return found
        except OpcountError as e:
            first_error = e if first_error is None else first_failure(first_error, e)
    assert first_error is not None
    raise first_error


def local_hardware(args: argparse.Namespace, spinner: Progress) -> Any:
    """--hardware local: this machine's device; with --profile, the one the profile runs on (the CPU:
    the command builds models there), so that % of speed of light is against it."""
    from ..hardware.lookup import hardware

    name = args.hardware if ":" in args.hardware or not getattr(args, "profile", False) else "local:cpu"
    spinner.update(f"measuring this machine ({name})")
    return hardware(name, recalibrate=getattr(args, "recalibrate", False))
