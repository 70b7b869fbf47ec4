"""The command line as typed values: what :func:`opcount.cli.parser.parse` makes of the flags, once,
and everything below the parser reads.

:class:`Options` is ``opcount MODEL`` (or ``llm:NAME``), :class:`CompareOptions` is ``opcount
compare``; both are frozen and made of groups, each read by one layer: :class:`Inputs` by the
model loader, :class:`Analysis` by the analyses, :class:`Rendering` by the renderer, :class:`LLMRun`
by the LLM mode. ``--hardware`` is a :class:`HardwareChoice`: a preset or file read by the parser,
or this machine, measured once when the run starts (:meth:`HardwareChoice.resolve`).

The LLM, deployment and training groups hold values with their defaults resolved (``batch`` is 1 when
``--batch`` is not given, ``kernels`` "fused", ``gpu_memory_utilization`` 0.9, ``optimizer`` adamw...), each worked out
once by its flag group (:mod:`opcount.cli.flags`), with ``given``, the flags as typed, for the messages
that name them. Nothing below reads ``None`` as "the default" but ``max_batched_tokens``, whose default
is vLLM's for the device, which ``--hardware local`` measures only after parsing.

This module holds values only: the checks that refuse a combination of flags are in
:mod:`opcount.cli.args` and the flag groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ..hardware.lookup import Hardware
from ..llm.engines.profile import EngineProfile
from ..llm.precision.dtypes import Precision
from ..report.columns import COLUMNS

# The analysis every report needs: the flop count also gives the model and its module tree.
BASE_ROLE = "flops"
# The columns a format shows whatever --columns says: the HTML page always has the bytes moved.
FORMAT_COLUMNS = {"html": ("bytes",)}


@dataclass(frozen=True, slots=True)
class Inputs:
    """How the model and its inputs are made: ``--input``, ``--dtype``, ``--seq-len``, ``--hf-config``, ``--meta``."""

    shapes: tuple[tuple[int, ...], ...]  # empty: the model's own inputs
    dtype_name: str  # as typed, for messages
    dtype: torch.dtype
    seq_len: int | None
    hf_config: tuple[str, ...]
    meta: bool


@dataclass(frozen=True, slots=True)
class HardwareChoice:
    """``--hardware``: a preset or file (``spec``, read by the parser), or this machine (``local``:
    ``local``, ``local:cpu`` or ``local:cuda``; with ``--profile`` a bare ``local`` is ``local:cpu``,
    the device the profile runs on, so that % of speed of light is against it)."""

    spec: Hardware | None = None
    local: str | None = None
    recalibrate: bool = False

    def resolve(self, status: Callable[[str], None], note: Callable[[str], None]) -> Hardware:
        """The hardware: the preset as read, or this machine measured (cached unless ``--recalibrate``;
        ``note`` says which, with the measurement's description)."""
        if self.spec is not None:
            return self.spec
        from ..hardware.lookup import hardware

        assert self.local is not None
        status(f"measuring this machine ({self.local})")
        found = hardware(self.local, recalibrate=self.recalibrate)
        # a cached calibration is reused silently otherwise: its date and spread say how far to trust it
        cached = "" if self.recalibrate else " (cached; --recalibrate measures again)"
        note(f"--hardware {self.local}: {found.description}{cached}")
        return found


@dataclass(frozen=True, slots=True)
class Analysis:
    """What is computed: ``--preset``, ``--flops-per-mac``, ``--tracer``, ``--mode``, ``--meta``, the
    roofline flags, ``--sparsity``, and ``roles``, the analyses the run needs (:func:`roles_for`)."""

    preset: str
    flops_per_mac: int
    tracer: str | None  # as given; None: by the model (:meth:`tracer_for`)
    mode: str
    meta: bool
    roofline_dtype: str | None
    fuse: bool
    tf32: bool
    sparsity: tuple[str, ...]
    roles: frozenset[str]

    def tracer_for(self, model: str) -> str:
        """The tracer for ``model``: ``--meta`` implies dispatch, and so do transformers models, whose
        attention masks are built with torch.vmap, which jit tracing cannot record."""
        if self.tracer is not None:
            return self.tracer
        return "dispatch" if self.meta or model.startswith(("hf:", "llm:")) else "jit"


@dataclass(frozen=True, slots=True)
class Rendering:
    """How the report looks: ``--format``, ``--columns`` (None: the format's default), ``--by-operator``,
    ``--depth``, ``--units``, ``--decimals``, ``--sig-figs``, ``--no-param-shapes``, ``--csv-meta``, ``--csv-raw``."""

    format: str
    columns: tuple[str, ...] | None
    by_operator: bool
    depth: int | None
    units: str | None
    decimals: int | None
    sig_figs: int | None
    param_shapes: bool
    csv_meta: str | None  # --csv-meta FILE: where a CSV export's meta goes (the CSV is a header and rows only)
    csv_raw: bool = False  # --csv-raw: text cells as they are, none prefixed with ' against spreadsheet formulas


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployOptions:
    """The deployment flags, each default resolved (:mod:`opcount.cli.flags.deploy`): a layout of ``tp x pp
    x dp`` devices, experts over ``ep`` of them with ``redundant_experts`` more slots, ``micro_batches`` in a
    pipeline; the experts' all-to-all (``dispatch_dtype``, None: the residual stream's; ``two_batch_overlap``);
    ``price`` (None: no cost asked for), ``max_batch``, ``gpu_memory_utilization``, ``max_batched_tokens`` (None:
    vLLM's default for the device); ``given``: the flags typed (``--tp``), for messages."""

    tp: int
    pp: int
    ep: int
    dp: int
    micro_batches: int
    redundant_experts: int
    dispatch_dtype: str | None
    two_batch_overlap: bool
    price: float | None  # dollars per device-hour
    max_batch: bool
    gpu_memory_utilization: float  # of a device's reported memory, taken by the engine
    max_batched_tokens: int | None  # tokens a step at most (chunked prefill)
    engine: EngineProfile | None  # --engine's built-in profile or --engine-profile's file (None: neither)
    given: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingOptions:
    """The training flags, each default resolved (:mod:`opcount.cli.flags.training`): ``optimizer``,
    ``recompute``, ``zero`` (0: none), ``tokens`` (None: no run's time asked for); ``given``: the flags
    typed, for messages; the training layout's own (``cp``, ``sequence_parallel``, ``global_batch``,
    ``virtual_stages``) and ``max_micro_batch``."""

    optimizer: str
    recompute: str
    zero: int
    tokens: int | None
    given: tuple[str, ...]
    cp: int = 1
    sequence_parallel: bool = False
    global_batch: int | None = None  # sequences a step over every replica (None: --micro-batches decides)
    virtual_stages: int = 1
    max_micro_batch: bool = False
    sweep: tuple[tuple[str, tuple[int | str, ...]], ...] = ()  # --sweep's keys under --mode train
    devices: int | None = None  # --devices N: the layouts of N devices searched


@dataclass(frozen=True, slots=True, kw_only=True)
class LLMOptions:
    """The LLM flags, each default resolved (:mod:`opcount.cli.flags.llm`); ``given``: the LLM and
    deployment flags typed (``--kv-len``), in the order of their help, for messages and for whether the
    run is an LLM one at all."""

    phase: str  # prefill or decode; a generation (gen_len) starts with its prefill
    kv_len: int
    batch: int
    seq_len: int  # --seq-len, else 1 (a new token per sequence) decoding, else 128 prompt tokens
    gen_len: int | None  # None: one phase, not a whole generation
    weight_dtype: tuple[str, ...]  # each --weight-dtype, in order
    act_dtype: str
    kv_dtype: str | None  # None: the model's dtype
    state_dtype: str | None  # None: the config's, else the model's dtype
    sweep: tuple[tuple[str, tuple[int, ...]], ...]
    kernels: str
    deploy: DeployOptions
    given: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LLMRun:
    """An LLM inference run: its flags and the dtypes they name, checked."""

    flags: LLMOptions
    precision: Precision


@dataclass(frozen=True, slots=True)
class Options:
    """``opcount MODEL``: one model, analyzed and rendered; ``llm`` set for an LLM inference run."""

    model: str
    inputs: Inputs
    analysis: Analysis
    hardware: HardwareChoice | None
    rendering: Rendering
    llm: LLMRun | None
    profile: bool
    repeats: int
    output: str | None
    plot: str | None
    quiet: bool
    verbose: bool  # -v, or --debug: warnings with their whole lists
    debug: bool
    training: TrainingOptions


@dataclass(frozen=True, slots=True)
class CompareOptions:
    """``opcount compare MODEL [MODEL ...]``: the flags every model shares."""

    models: tuple[str, ...]
    inputs: Inputs
    analysis: Analysis
    hardware: HardwareChoice | None
    rendering: Rendering
    output: str | None
    quiet: bool
    verbose: bool
    debug: bool


def roles_for(columns: Iterable[str], format: str, hardware: bool, sparsity: bool) -> frozenset[str]:
    """The analyses a run needs: what each column shown (``columns``, and those the ``format`` always
    shows) declares it reads (``Column.needs``), the roofline with ``--hardware``, the sparsity
    roofline with ``--sparsity``."""
    shown = [*columns, *FORMAT_COLUMNS.get(format, ())]
    roles = {BASE_ROLE, *(role for key in shown for role in COLUMNS[key].needs)}
    if hardware:
        roles.add("roofline")
    if sparsity:
        roles.add("sparsity")
    return frozenset(roles)


def columns_needing(role: str, columns: Iterable[str] | None = None) -> list[str]:
    """The columns (of ``columns``, or of every registered one) that read the analysis ``role``."""
    keys = COLUMNS if columns is None else columns
    return [key for key in keys if role in COLUMNS[key].needs]
