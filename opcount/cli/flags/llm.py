"""The LLM inference flags: ``--phase``, ``--kv-len``, ``--batch``, ``--gen-len``, the dtypes per role, ``--sweep``
and ``--kernels``. Their arguments, their :class:`~opcount.cli.options.LLMOptions` with every default resolved
(with the deployment group's, :mod:`.deploy`), and the checks run before a model is built, the deployment's
and the training step's among them (:mod:`opcount.cli.llm` builds, traces and renders)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from typing import Any, TypeGuard

from ...errors import OpcountError
from ...llm import PHASES
from ...llm.cache.state_dtypes import STATE_DTYPES
from ...llm.kernels import MODES
from ...llm.models.limits import MAX_BATCH, MAX_POSITIONS
from ...llm.precision.assignments import WeightAssignmentError
from ...llm.precision.dtypes import ACT_DTYPES, KV_DTYPES, WEIGHT_DTYPES, Precision, canonical
from ...training.saved import RECOMPUTE
from ..args import check_counts, natural_int, positive_int
from ..options import LLMOptions, Options, Rendering, columns_needing
from . import deploy
from . import training as training_flags

# The flags by their argparse names (the parser hides them, and the deployment's, from opcount compare's help).
FLAGS = (
    "phase",
    "kv_len",
    "batch",
    "gen_len",
    "weight_dtype",
    "act_dtype",
    "kv_dtype",
    "state_dtype",
    "sweep",
    "kernels",
)
SWEEPABLE = {"batch": "batch", "seq-len": "seq_len", "kv-len": "kv_len", "gen-len": "gen_len", **deploy.SWEEPABLE}
TRAIN_SWEEPABLE = training_flags.TRAIN_SWEEPABLE  # --mode train's: a layout, ZeRO, recomputation from one trace
DEFAULT_PHASE = "prefill"
DEFAULT_SEQ_LEN = 128  # prompt tokens of a prefill, or of a training step
DEFAULT_DTYPE = "bfloat16"  # the weights' and the activations'
DEFAULT_KERNELS = "fused"
MAX_SWEEP_POINTS = 1000
HF_EXTRA = "pip install 'opcount[hf]'"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The LLM flags, in their own help group."""
    g = parser.add_argument_group(
        f"LLM inference (llm:NAME, or a causal LM from hf:; built on the meta device; needs the hf extra: {HF_EXTRA})"
    )
    g.add_argument("--phase", choices=PHASES, help="prefill (default: --seq-len prompt tokens) or decode")
    g.add_argument(
        "--kv-len",
        type=natural_int,
        metavar="L",
        help="tokens already in the KV cache per sequence: decode's context, or the cached prefix a prefill's "
        "--seq-len tokens follow (chunked prefill, prefix caching) (default 0)",
    )
    g.add_argument("--batch", type=positive_int, metavar="B", help="sequences per batch (default 1)")
    g.add_argument(
        "--gen-len", type=natural_int, metavar="N", help="a whole generation: prefill, then N decode steps of one token"
    )
    g.add_argument(
        "--weight-dtype",
        metavar="[PATTERN=]DTYPE",
        action=_Assignments,
        help=f"{', '.join(WEIGHT_DTYPES)} (default {DEFAULT_DTYPE}); PATTERN=DTYPE for the weights under matching "
        "modules (e.g. experts=mxfp4), repeatable (the LLM guide, llm.md)",
    )
    g.add_argument("--act-dtype", metavar="DTYPE", help=f"{', '.join(ACT_DTYPES)} (default {DEFAULT_DTYPE})")
    g.add_argument(
        "--kv-dtype",
        metavar="DTYPE",
        help=f"{', '.join(KV_DTYPES)} (default: the model's dtype, bfloat16 under 8- or 4-bit activations, as vLLM's "
        "--kv-cache-dtype auto)",
    )
    g.add_argument(
        "--state-dtype",
        metavar="DTYPE",
        help=f"a recurrent state's (SSM, linear attention): {', '.join(STATE_DTYPES)} (default: the config's "
        "mamba_ssm_cache_dtype or mamba_ssm_dtype, else the model's dtype, as vLLM's --mamba-ssm-cache-dtype auto)",
    )
    g.add_argument(
        "--sweep",
        action="append",
        metavar="KEY=V1,V2,...",
        type=_sweep,
        help=f"one row per point ({', '.join(SWEEPABLE)}; with --mode train {', '.join(TRAIN_SWEEPABLE)}); "
        "repeat for a grid",
    )
    g.add_argument(
        "--kernels",
        choices=MODES,
        help="the estimate's kernels: fused as serving engines run them (default; --fuse says the same) or eager, "
        "one per operator",
    )


class _Assignments(argparse.Action):
    """Each ``--weight-dtype`` appended to a tuple, in the order given."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        setattr(namespace, self.dest, (*(getattr(namespace, self.dest) or ()), values))


def _sweep(text: str) -> tuple[str, tuple[int | str, ...]]:
    key, sep, values = text.partition("=")
    key = key.strip().replace("_", "-")
    keys = (*SWEEPABLE, *(k for k in TRAIN_SWEEPABLE if k not in SWEEPABLE))
    if not sep or key not in keys:
        raise argparse.ArgumentTypeError(f"expected KEY=V1,V2 with KEY one of {', '.join(keys)}, got {text!r}")
    parts = values.split(",")
    if len(parts) > 1 and not parts[-1].strip():
        parts = parts[:-1]  # a trailing comma, as in a Python tuple
    if key == "recompute":
        modes = tuple(v.strip() for v in parts)
        if not modes or any(m not in RECOMPUTE for m in modes):
            raise argparse.ArgumentTypeError(f"recompute: expected values among {', '.join(RECOMPUTE)}, got {values!r}")
        return key, modes
    try:
        # An empty value ("1,,16") is a typo: int("") refuses it rather than the point being dropped.
        numbers = tuple(int(v) for v in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{key}: expected whole numbers, got {values!r}") from None
    low = 0 if key in ("kv-len", "gen-len", "zero") else 1
    if not numbers or min(numbers) < low:
        raise argparse.ArgumentTypeError(f"{key}: expected values >= {low}")
    if key == "zero" and max(numbers) > 3:
        raise argparse.ArgumentTypeError(f"zero: expected ZeRO stages 0 to 3, got {values!r}")
    return key, numbers


def _numbers(values: tuple[int | str, ...]) -> TypeGuard[tuple[int, ...]]:
    return all(isinstance(v, int) for v in values)


def options(ns: Mapping[str, Any]) -> LLMOptions:
    """The LLM and deployment flags of the parsed command line (argparse's names -> values), each default
    resolved: a prefill of :data:`DEFAULT_SEQ_LEN` tokens (decoding: one new token per sequence) for one
    sequence on an empty cache, :data:`DEFAULT_DTYPE` weights and activations, :data:`DEFAULT_KERNELS` kernels."""
    phase = ns.get("phase") or DEFAULT_PHASE
    seq_len = ns.get("seq_len") or (1 if phase == "decode" else DEFAULT_SEQ_LEN)
    deployment = deploy.options(ns)
    given = [f"--{name.replace('_', '-')}" for name in FLAGS if ns.get(name) is not None]
    return LLMOptions(
        phase=phase,
        kv_len=ns.get("kv_len") or 0,
        batch=ns.get("batch") or 1,
        seq_len=seq_len,
        gen_len=ns.get("gen_len"),
        weight_dtype=ns.get("weight_dtype") or (DEFAULT_DTYPE,),
        act_dtype=DEFAULT_DTYPE if ns.get("act_dtype") is None else ns["act_dtype"],
        kv_dtype=ns.get("kv_dtype"),
        state_dtype=ns.get("state_dtype"),
        # the inference sweep's keys; --mode train's are the training options' (opcount.cli.flags.training)
        sweep=tuple(
            (k, v) for k, v in ns.get("sweep") or () if ns.get("mode") != "train" and k in SWEEPABLE and _numbers(v)
        ),
        kernels=ns.get("kernels") or DEFAULT_KERNELS,
        deploy=deployment,
        given=(*given, *deployment.given),
    )


def wanted(model: str, flags: LLMOptions) -> bool:
    """Whether the run is an LLM inference analysis: an ``llm:`` model or any LLM flag."""
    return model.startswith("llm:") or bool(flags.given)


def require_transformers(spec: str) -> None:
    """``llm:`` and ``hf:`` models are transformers models: without the ``hf`` extra, one line saying so."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise OpcountError(
            f"{spec}: LLM models are built with transformers, which is not installed: the hf extra adds it ({HF_EXTRA})"
        ) from None


def check(flags: LLMOptions, options: Options) -> Precision:
    """Flag combinations, before anything is built (``options``: the run's other flags); the dtypes
    of ``--weight-dtype``, ``--act-dtype``, ``--kv-dtype`` and ``--state-dtype``."""
    if not options.model.startswith(("llm:", "hf:")):  # a factory's model was looked up as a transformers class
        raise OpcountError(
            f"--phase, --batch, --kv-len, --gen-len, --sweep and the dtype flags price LLM inference phases of "
            f"llm: and hf: models, not {options.model}: give its inputs with --input"
        )
    require_transformers(options.model)  # no other flag is worth checking without it
    analysis, rendering = options.analysis, options.rendering
    if analysis.tracer == "jit":
        raise OpcountError("LLM phases run on the meta device with the dispatch tracer: drop --tracer jit")
    if options.inputs.dtype_name != "float32":  # its default; any other value would be ignored, not priced
        raise OpcountError(
            f"--dtype {options.inputs.dtype_name} does not apply to LLM runs: give --weight-dtype and --act-dtype"
        )
    if analysis.mode == "train":  # one training step instead of an inference phase
        training_flags.check_llm(flags)
    if options.inputs.shapes:
        raise OpcountError("LLM phases take --seq-len, --batch and --kv-len, not --input shapes")
    if flags.gen_len is not None and flags.phase == "decode":
        raise OpcountError("--gen-len covers prefill and decode: drop --phase decode")
    swept = {key for key, _ in flags.sweep}
    if flags.gen_len is not None and (flags.kv_len or "kv-len" in swept):
        raise OpcountError(
            "--kv-len with --gen-len: a generation starts from an empty cache (a prefill over a cached prefix is "
            "--phase prefill --kv-len alone)"
        )
    if "gen-len" in swept and flags.gen_len is None:
        raise OpcountError("--sweep gen-len=... needs --gen-len")
    if len({k for k, _ in flags.sweep}) != len(flags.sweep):
        raise OpcountError("--sweep: each key once")
    _check_sizes(flags, options.inputs.seq_len)
    check_counts(rendering, options.repeats)
    for flag, given in (("profile", options.profile), ("sparsity", analysis.sparsity)):
        if given:
            raise OpcountError(f"--{flag} does not apply to LLM phases (the model is on the meta device)")
    if analysis.fuse and flags.kernels == "eager":
        raise OpcountError("--fuse and --kernels eager contradict each other: give one")
    for flag, value in (("roofline-dtype", analysis.roofline_dtype), ("tf32", analysis.tf32)):
        if value:
            raise OpcountError(
                f"--{flag} does not apply to LLM phases: they are priced in the dtypes of "
                "--weight-dtype, --act-dtype, --kv-dtype and --state-dtype"
            )
    if rendering.format in ("tree", "md", "repr", "html", "chrome-trace"):
        raise OpcountError("LLM phases print table, json or csv (tree/md/repr/html/chrome-trace are for whole models)")
    if rendering.by_operator and flags.sweep:
        raise OpcountError("--by-operator shapes one point's table, not a --sweep's rows")
    _check_columns(rendering, options.hardware is not None, bool(flags.sweep))
    if analysis.mode != "train":  # a training layout is checked by opcount.cli.flags.training
        deploy.check(flags, options.hardware is not None, options.hardware.spec if options.hardware else None)
    for flag, value, allowed, role in (
        ("--act-dtype", flags.act_dtype, ACT_DTYPES, "activation"),
        ("--kv-dtype", flags.kv_dtype, KV_DTYPES, "KV cache"),
    ):
        if value is None:
            continue
        try:  # each named by its flag; an empty one ('', an unset shell variable) is no dtype, as for --weight-dtype
            canonical(value, allowed, role)
        except OpcountError as e:
            raise OpcountError(f"{flag}: {e}") from None
    try:
        precision = Precision(flags.weight_dtype, flags.act_dtype, flags.kv_dtype, flags.state_dtype)
    except WeightAssignmentError as e:
        raise OpcountError(f"--weight-dtype: {e}") from None
    except OpcountError as e:
        raise OpcountError(f"{e} (--weight-dtype, --act-dtype, --kv-dtype, --state-dtype)") from None
    spec = options.hardware.spec if options.hardware else None
    refused = None if spec is None else spec.refuses_products_in(precision.act)
    if refused is not None:  # refused before a model is built, naming the flag
        raise OpcountError(f"--act-dtype {flags.act_dtype}: {refused}; choose another --act-dtype or --hardware")
    return precision


def _check_sizes(flags: LLMOptions, seq_len: int | None) -> None:
    """Each size flag (its largest --sweep value too) within opcount.llm.models.limits, and the positions
    of a sequence together, before a model is built: past them torch's int64 sizes overflow
    (``seq_len``: ``--seq-len`` as given)."""
    swept = dict(flags.sweep)
    points = math.prod(len(values) for values in swept.values())
    if points > MAX_SWEEP_POINTS:  # each point is priced (opcount.llm.sweep.points)
        raise OpcountError(f"--sweep: {points:,} points, more than {MAX_SWEEP_POINTS:,} (the limit)")
    given = {
        "batch": flags.batch if "--batch" in flags.given else None,
        "seq-len": seq_len,
        "kv-len": flags.kv_len if "--kv-len" in flags.given else None,
        "gen-len": flags.gen_len,
    }
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
    positions = (largest["seq-len"] or flags.seq_len) + largest["kv-len"] + largest["gen-len"]
    if positions > MAX_POSITIONS:
        raise OpcountError(
            f"--seq-len, --kv-len and --gen-len: {positions:,} positions per sequence, more than {MAX_POSITIONS:,} "
            "(the limit)"
        )


def _check_columns(rendering: Rendering, hardware: bool, sweep: bool) -> None:
    columns = rendering.columns or ()
    sparse = columns_needing("sparsity", columns)
    if sparse:
        raise OpcountError(
            f"columns {', '.join(sorted(sparse))} do not apply to LLM phases (the model is on the meta device)"
        )
    timed = columns_needing("roofline", columns)
    if timed and not hardware:
        raise OpcountError(f"columns {', '.join(sorted(timed))} need --hardware")
    if sweep and (rendering.columns or rendering.depth is not None or not rendering.param_shapes):
        # a sweep prints one row per point, not a module table: these would be silently ignored
        raise OpcountError("--columns, --depth and --no-param-shapes shape one point's table, not a --sweep's rows")
