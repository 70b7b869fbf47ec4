"""One model, traced once, and every analysis the run needs built on that one trace: the flop
count always, activations and bytes for their columns, the roofline and the sparsity roofline
with ``--hardware``. Shared by ``opcount MODEL`` and ``opcount compare``.

Which analyses a run needs (``Analysis.roles``) was worked out once from the columns' own
declarations when the flags were read (:func:`opcount.cli.options.roles_for`); what they return
is an :class:`Analyses`, one field per analysis.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .. import report
from ..analysis import ActivationCountAnalysis, FlopCountAnalysis
from ..errors import OpcountError
from ..hardware.lookup import Hardware
from ..messages import first_failure
from .args import UsageError
from .models import Loaded
from .options import Analysis
from .progress import Progress

if TYPE_CHECKING:
    from ..memory import MemoryTrafficAnalysis
    from ..roofline import RooflineReport
    from ..sparsity import SparsityReport


@dataclass(frozen=True, slots=True)
class Analyses:
    """What one run computed on its one trace; None: not asked for."""

    flops: FlopCountAnalysis
    activations: ActivationCountAnalysis | None = None
    memory: MemoryTrafficAnalysis | None = None
    roofline: RooflineReport | None = None
    sparsity: SparsityReport | None = None

    def get(self, role: str) -> Any:
        """The analysis a column's ``needs`` names, by its role; None when not computed."""
        return getattr(self, role, None)

    def sources(self) -> report.Sources:
        """The analyses as a report reads them."""
        extra: dict[str, Any] = {"roofline": self.roofline} if self.roofline is not None else {}
        if self.sparsity is not None:
            extra["sparsity"] = self.sparsity
        return report.Sources(self.flops, self.activations, self.memory, extra)


def analyze(loaded: Loaded, model: str, analysis: Analysis, hardware: Hardware | None, spinner: Progress) -> Analyses:
    """Every analysis ``analysis.roles`` names, of ``loaded`` (``model``: its spec, which picks the
    tracer). ``hardware``: resolved once by the caller; a roofline role has it (checked before building)."""
    counts, traffic = _traced(loaded, model, analysis, spinner)
    if traffic is None:
        return counts
    assert hardware is not None
    dense, sparse = _rooflines(traffic, analysis, hardware, spinner)
    return replace(counts, roofline=dense, sparsity=sparse)


# The counts of a trace, and the bytes the roofline prices (None: no roofline role).
_Counts = tuple[Analyses, "MemoryTrafficAnalysis | None"]


def _traced(loaded: Loaded, model: str, analysis: Analysis, spinner: Progress) -> _Counts:
    """The counts of one trace, with the loader's inputs or, when tracing with them fails, its
    alternatives in turn (the first failure is the one reported). A mistake found after the
    trace (the roofline's) is not a reason to trace again."""
    attempts = [(loaded.inputs, loaded.kwargs), *loaded.alternatives]
    first_error: Exception | None = None
    for inputs, kwargs in attempts:
        try:
            spinner.update(f"tracing {loaded.label}")
            return _counts(loaded, model, analysis, spinner, inputs, kwargs)
        except OpcountError as e:
            first_error = e if first_error is None else first_failure(first_error, e)
    assert first_error is not None
    raise first_error


def _counts(loaded: Loaded, model: str, analysis: Analysis, spinner: Progress, inputs: Any, kwargs: Any) -> _Counts:
    """Trace the model once and count on that one trace: flops, and as the roles ask activations,
    the bytes of the bytes columns and the bytes of the roofline (with ``--fuse``, fewer)."""
    # --tracer/--mode/--meta; mode and device are refused by the jit tracer with a clear error
    options: dict[str, Any] = {"tracer": analysis.tracer_for(model)}
    if analysis.mode != "eval":
        options["mode"] = analysis.mode
    if analysis.meta:
        options["device"] = "meta"
    flops = FlopCountAnalysis(
        loaded.model, inputs, kwargs, preset=analysis.preset, flops_per_mac=analysis.flops_per_mac, **options
    )
    traced = flops.trace()  # the one forward pass of this run
    roles = analysis.roles
    activations = ActivationCountAnalysis(traced) if "activations" in roles else None
    memory = traffic = None
    if "memory" in roles or "roofline" in roles:
        from ..memory import MemoryTrafficAnalysis  # the costlier import, only when asked for

        memory = MemoryTrafficAnalysis(traced) if "memory" in roles else None
        traffic = MemoryTrafficAnalysis(traced, fuse=analysis.fuse) if "roofline" in roles else None
    found = {"flops": flops, "activations": activations, "memory": memory, "roofline": traffic}
    counted = {role: a for role, a in found.items() if a is not None}
    for a in counted.values():  # run() warns once per operator, naming the columns it misses
        a.unsupported_ops_warnings(False)
    for role, a in counted.items():
        spinner.update(f"{role}: analyzing {loaded.label}")
        a.by_module()  # analyses are lazy: do the work here, under the spinner
    return Analyses(flops, activations, memory), traffic


def _rooflines(
    traffic: MemoryTrafficAnalysis, analysis: Analysis, hardware: Hardware, spinner: Progress
) -> tuple[RooflineReport, SparsityReport | None]:
    """The roofline of the traced bytes on ``hardware``, and with a sparsity role the sparsity roofline."""
    from ..roofline import roofline

    spinner.update(f"roofline on {hardware.name}")
    dense = roofline(traffic, hardware=hardware, dtype=analysis.roofline_dtype, allow_tf32=analysis.tf32)
    if "sparsity" not in analysis.roles:
        return dense, None
    from ..sparsity import parse_sparsity_args, sparsity_roofline

    spinner.update(f"sparsity roofline on {hardware.name}")
    try:
        sparse = sparsity_roofline(
            traffic,
            hardware=hardware,
            sparsity=parse_sparsity_args(analysis.sparsity),
            dtype=analysis.roofline_dtype,
            allow_tf32=analysis.tf32,
            flops_per_mac=analysis.flops_per_mac,
        )
    except ValueError as e:  # a name that matches no weight layer of this model
        raise UsageError(f"--sparsity {' '.join(analysis.sparsity or ('measured',))}: {e}") from None
    return dense, sparse
