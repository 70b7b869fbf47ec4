"""The training flags (``--optimizer``, ``--recompute``, ``--zero``, ``--tokens``, and the training layout's
``--cp``, ``--sequence-parallel``, ``--global-batch``, ``--virtual-stages`` beside the deployment's ``--tp --pp --ep
--dp --micro-batches``, and ``--max-micro-batch``, with ``--mode train``): their arguments, their :class:`~opcount.cli.options.TrainingOptions` with the defaults resolved, and the checks
before anything is built, for a whole model and for an LLM's training step (:mod:`opcount.cli.training`
prices and renders the step)."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Mapping
from typing import Any

from ...errors import OpcountError
from ...llm.precision.formats import ALIASES, TRAINABLE
from ...training.layout import MAX_DEGREE, TrainLayout
from ...training.saved import RECOMPUTE
from ...training.states import OPTIMIZERS
from ..args import positive_int
from ..options import LLMOptions, Options, TrainingOptions

# The flags by their argparse names (opcount compare's help hides them, as the LLM flags).
FLAGS = (
    "optimizer", "recompute", "zero", "tokens", "cp", "sequence_parallel", "global_batch", "virtual_stages",
    "max_micro_batch", "devices",
)  # fmt: skip
SWITCHES = ("sequence_parallel", "max_micro_batch")  # store_true: given when set
# --sweep keys only a training step has
TRAIN_ONLY = ("cp", "micro-batches", "virtual-stages", "zero", "recompute")
TRAIN_SWEEPABLE = ("tp", "pp", "cp", "ep", "dp", "micro-batches", "virtual-stages", "zero", "recompute")
MAX_POINTS = 1000  # each point is arithmetic on one trace
# the deployment's flags a training layout reads
LAYOUT = ("--tp", "--pp", "--ep", "--dp", "--micro-batches")
DEFAULT_OPTIMIZER = "adamw"
DEFAULT_RECOMPUTE = "none"
MAX_TOKENS = 10**16  # tokens of a run: far above any published one (Llama 3: 15T)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The training flags, in their own help group."""
    g = parser.add_argument_group("training (with --mode train; per device memory, step time, MFU: training.md)")
    g.add_argument("--optimizer", choices=OPTIMIZERS, help=f"whose states are counted (default {DEFAULT_OPTIMIZER})")
    g.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        help=f"activation recomputation: {DEFAULT_RECOMPUTE} (default), selective (the attention core), "
        "full (each layer)",
    )
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), help="ZeRO stage over the --dp devices (default 0: none)")
    g.add_argument(
        "--tokens", type=_tokens, metavar="N", help="llm: tokens to train on: the run's time (and cost with --price)"
    )
    g.add_argument(
        "--cp", type=positive_int, metavar="N", help="llm: context-parallel devices splitting each sequence (default 1)"
    )
    g.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="llm: with --tp, the norms' and dropouts' activations split over the sequence (Megatron-LM's name)",
    )
    g.add_argument(
        "--global-batch",
        type=positive_int,
        metavar="N",
        help="llm: sequences a step over every replica: --batch (the micro-batch) x --micro-batches x --dp",
    )
    g.add_argument(
        "--virtual-stages",
        type=positive_int,
        metavar="V",
        help="llm: with --pp, model chunks per device: the interleaved 1F1B schedule (default 1)",
    )
    g.add_argument(
        "--devices",
        type=positive_int,
        metavar="N",
        help="llm: search the layouts of N devices (tp, pp, cp, dp, recomputation): those that fit, fastest first",
    )
    g.add_argument(
        "--max-micro-batch",
        action="store_true",
        help="llm: the most sequences a micro-batch may hold with every device's memory within its capacity",
    )


def _tokens(text: str) -> int:
    try:
        number: float = int(text)  # exact, however large
    except ValueError:
        try:
            number = float(text)  # 2e9
        except ValueError:
            number = float("nan")
    if not float(number).is_integer():  # nan and inf too
        raise argparse.ArgumentTypeError(f"expected a number of tokens such as 2000000000 or 2e9, got {text!r}")
    if not 1 <= number <= MAX_TOKENS:
        raise argparse.ArgumentTypeError(f"expected 1 to {MAX_TOKENS:.0e} tokens, got {text}")
    return int(number)


def options(ns: Mapping[str, Any]) -> TrainingOptions:
    """The training flags of the parsed command line (argparse's names -> values), each default resolved:
    :data:`DEFAULT_OPTIMIZER`, no recomputation, no ZeRO, no run's tokens."""
    optimizer, recompute, zero = ns.get("optimizer"), ns.get("recompute"), ns.get("zero")
    given = [n for n in FLAGS if (ns.get(n) if n in SWITCHES else ns.get(n) is not None)]
    sweep = tuple(ns.get("sweep") or ())
    # a key only a training step sweeps, given without --mode train, is refused by check()
    given += [f"sweep {k}=..." for k, _ in sweep if k in TRAIN_ONLY]
    return TrainingOptions(
        optimizer=DEFAULT_OPTIMIZER if optimizer is None else optimizer,
        recompute=DEFAULT_RECOMPUTE if recompute is None else recompute,
        zero=0 if zero is None else zero,
        tokens=ns.get("tokens"),
        given=tuple(f"--{name.replace('_', '-')}" for name in given),
        cp=ns.get("cp") or 1,
        sequence_parallel=bool(ns.get("sequence_parallel")),
        global_batch=ns.get("global_batch"),
        virtual_stages=ns.get("virtual_stages") or 1,
        max_micro_batch=bool(ns.get("max_micro_batch")),
        sweep=sweep if ns.get("mode") == "train" else (),
        devices=ns.get("devices"),
    )


def check(options: Options) -> None:
    """Combinations refused before anything is built, each naming its flag (``options``: the run's)."""
    flags, mode = options.training, options.analysis.mode
    if mode != "train":
        if flags.given:
            raise OpcountError(f"{flags.given[0]} applies to a training step: add --mode train")
        return
    deploy = options.llm.flags.deploy if options.llm is not None else None
    dp = 1 if deploy is None else deploy.dp
    price = None if deploy is None else deploy.price
    if flags.tokens is not None and options.llm is None:
        raise OpcountError("--tokens counts the tokens of an LLM's run: llm: and causal hf: models")
    if flags.tokens is not None and options.hardware is None:
        raise OpcountError("--tokens needs --hardware (the step's time)")
    if price is not None and flags.tokens is None:
        raise OpcountError("--price with --mode train prices a run: give --tokens")
    layout_flags = ("--cp", "--sequence-parallel", "--virtual-stages")
    llm_only = [f for f in flags.given if f in (*layout_flags, "--global-batch", "--max-micro-batch", "--devices")]
    if llm_only and options.llm is None:
        raise OpcountError(f"{llm_only[0]}: a training layout is an LLM's (llm: and causal hf: models)")
    if flags.max_micro_batch and options.hardware is None:
        raise OpcountError("--max-micro-batch needs --hardware (the device's memory)")
    if flags.devices is not None and flags.devices > MAX_DEGREE:
        # the search enumerates the divisors of N: bounded here, before one layout of them is built
        raise OpcountError(f"--devices {flags.devices}: at most {MAX_DEGREE:,}")
    if flags.devices is not None and options.llm is not None:
        typed = (*options.llm.flags.deploy.given, *flags.given)
        fixed = [f for f in typed if f in (*LAYOUT, *layout_flags)]
        if fixed or flags.sweep:
            raise OpcountError(f"--devices searches the layouts: drop {fixed[0] if fixed else '--sweep'}")
        if options.hardware is None:
            raise OpcountError("--devices needs --hardware (what fits, and how fast)")
    if options.llm is not None:
        _check_sweep(options.llm.flags, flags)
        train = layout(options.llm.flags, flags)  # each misfit named by its flag, before anything is built
        dp *= train.cp
        spec = options.hardware.spec if options.hardware is not None else None
        if train.devices > train.dp and spec is not None and spec.interconnect is None:
            raise OpcountError(
                f"{spec.name} has no interconnect figures to price a training layout's communication "
                "(a hardware file can give them: hardware.md)"
            )
    # a sweep's points, and a search's layouts, are checked one by one
    searched = flags.devices is not None or {k for k, _ in flags.sweep} & {"dp", "cp"}
    if flags.zero and dp == 1 and not searched:
        raise OpcountError(
            f"--zero {flags.zero} partitions the model states over data-parallel devices: give --dp N with N > 1"
        )
    if flags.recompute == "selective" and not options.model.startswith(("llm:", "hf:")):
        raise OpcountError(
            "--recompute selective finds the attention scores by the sequence length: llm: and hf: models (--seq-len)"
        )
    if options.plot and options.llm is not None:
        raise OpcountError("--plot draws inference phases and whole models' rooflines, not an LLM training step")


# A serving engine's figures: a training step's capacity is the device's whole memory.
SERVING = ("--max-batch", "--gpu-memory-utilization", "--reserve", "--max-batched-tokens")


def layout(flags: LLMOptions, training: TrainingOptions, point: Mapping[str, int | str] | None = None) -> TrainLayout:
    """The training layout the flags give (``point``: a sweep's values in their place), ``--micro-batches`` from
    ``--global-batch`` where that is given (Megatron-LM's ``global batch = micro-batch x micro-batches x dp``);
    each misfit names its flag."""
    values = dict(point or {})
    d = flags.deploy

    def degree(key: str, given: int) -> int:
        value = values.get(key, given)
        assert isinstance(value, int)
        return value

    dp, micro = degree("dp", d.dp), degree("micro-batches", d.micro_batches)

    def name(key: str) -> str:  # the flag, or the sweep key, that gave a value
        return f"--sweep {key}={values[key]}" if key in values else f"--{key} {dp if key == 'dp' else micro}"

    micro_given = "--micro-batches" in d.given or "micro-batches" in values
    if training.global_batch is not None:
        per_replica, left = divmod(training.global_batch, dp)
        if left:
            raise OpcountError(f"--global-batch {training.global_batch}: does not divide over {name('dp')}")
        if micro_given:
            if per_replica % micro:
                raise OpcountError(
                    f"{name('micro-batches')}: does not divide --global-batch {training.global_batch} "
                    f"({per_replica} sequences per replica over {name('dp')})"
                )
            if per_replica // micro != flags.batch:
                raise OpcountError(
                    f"--global-batch {training.global_batch} over {name('dp')} in {name('micro-batches')} is a "
                    f"micro-batch of {per_replica // micro} sequences, not --batch {flags.batch}"
                )
        elif per_replica % flags.batch:
            raise OpcountError(
                f"--global-batch {training.global_batch}: not a whole number of micro-batches of --batch "
                f"{flags.batch} on each of {name('dp')} replicas"
            )
        micro = per_replica // flags.batch
        if micro > MAX_DEGREE:  # the layout would name --micro-batches, which the user did not type
            raise OpcountError(
                f"--global-batch {training.global_batch}: {micro:,} micro-batches of --batch {flags.batch} on each "
                f"of {name('dp')} replicas, more than {MAX_DEGREE:,}"
            )
    tp = degree("tp", d.tp)
    if training.sequence_parallel and tp == 1:
        raise OpcountError("--sequence-parallel splits what tensor parallelism keeps whole: give --tp")
    try:
        return TrainLayout(
            tp=tp, pp=degree("pp", d.pp), cp=degree("cp", training.cp), ep=degree("ep", d.ep), dp=dp,
            sequence_parallel=training.sequence_parallel, micro_batches=micro,
            virtual_stages=degree("virtual-stages", training.virtual_stages),
        )  # fmt: skip
    except OpcountError as e:
        where = ", ".join(f"{k}={v}" for k, v in values.items())
        raise OpcountError(f"{e} (--sweep point {where})" if where else str(e)) from None


def sweep_points(training: TrainingOptions) -> list[dict[str, int | str]]:
    """Every combination of ``--sweep``'s values under ``--mode train`` (one empty point without a sweep)."""
    keys = [k for k, _ in training.sweep]
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*(v for _, v in training.sweep))]


def _check_sweep(flags: LLMOptions, training: TrainingOptions) -> None:
    keys = [k for k, _ in training.sweep]
    other = [k for k in keys if k not in TRAIN_SWEEPABLE]
    if other:
        raise OpcountError(
            f"--sweep {other[0]}=...: --mode train sweeps {', '.join(TRAIN_SWEEPABLE)} (one trace of --batch x "
            "--seq-len prices them all)"
        )
    if len(set(keys)) != len(keys):
        raise OpcountError("--sweep: each key once")
    if not keys:
        return
    points = sweep_points(training)
    if len(points) > MAX_POINTS:
        raise OpcountError(f"--sweep: {len(points):,} points, more than {MAX_POINTS:,} (the limit)")
    for point in points:
        zero, here = point.get("zero", training.zero), layout(flags, training, point)
        if zero and here.dp * here.cp == 1:
            given = f"--sweep zero={zero}" if "zero" in point else f"--zero {zero}"
            raise OpcountError(f"{given}: ZeRO partitions over data-parallel devices: give --dp N > 1 (or sweep it)")


def check_llm(flags: LLMOptions) -> None:
    """``--mode train`` on the LLM path: one step of ``--batch`` x ``--seq-len`` tokens, no inference flag."""
    inference = [f for f in flags.given if f in ("--phase", "--kv-len", "--gen-len", "--kv-dtype", "--state-dtype")]
    if inference:
        raise OpcountError(
            f"{inference[0]} is for inference phases: --mode train traces one training step of --batch x --seq-len tokens"
        )
    serving = [f for f in flags.deploy.given if f in SERVING]
    if serving:  # a serving engine's figures: a training step's capacity is the device's whole memory
        raise OpcountError(
            f"{serving[0]} applies to inference (a serving engine's batch and workspace): --mode train fits the "
            "device's whole memory"
        )
    other = [f for f in flags.deploy.given if f in ("--ep-num-redundant-experts", "--dispatch-dtype",
                                                     "--enable-two-batch-overlap")]  # fmt: skip
    if other:
        raise OpcountError(f"{other[0]} applies to serving: --mode train's experts run over --ep as Megatron-LM's do")
    # --weight-dtype may be repeated, per module: one plain dtype here
    names: dict[str, str] = {}
    for flag, dtype in (("--weight-dtype", ",".join(flags.weight_dtype)), ("--act-dtype", flags.act_dtype)):
        text = dtype.strip().lower()
        names[flag] = ALIASES.get(text, text)
        if names[flag] not in TRAINABLE:
            raise OpcountError(f"{flag} {dtype}: --mode train trains {', '.join(TRAINABLE)} weights and activations")
    if names["--weight-dtype"] != names["--act-dtype"]:
        raise OpcountError(
            f"--weight-dtype {names['--weight-dtype']} with --act-dtype {names['--act-dtype']}: a training step "
            "computes in its weights' dtype (mixed precision keeps a float32 master copy with the optimizer): "
            "give them alike"
        )
