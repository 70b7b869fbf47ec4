"""The training flags (``--optimizer``, ``--recompute``, ``--zero``, ``--tokens``, with ``--mode train``): their
arguments, their :class:`~opcount.cli.options.TrainingOptions` with the defaults resolved, and the checks
before anything is built, for a whole model and for an LLM's training step (:mod:`opcount.cli.training`
prices and renders the step)."""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from ...errors import OpcountError
from ...llm.precision.formats import ALIASES, TRAINABLE
from ...training.saved import RECOMPUTE
from ...training.states import OPTIMIZERS
from ..options import LLMOptions, Options, TrainingOptions

# The flags by their argparse names (opcount compare's help hides them, as the LLM flags).
FLAGS = ("optimizer", "recompute", "zero", "tokens")
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
    return TrainingOptions(
        optimizer=DEFAULT_OPTIMIZER if optimizer is None else optimizer,
        recompute=DEFAULT_RECOMPUTE if recompute is None else recompute,
        zero=0 if zero is None else zero,
        tokens=ns.get("tokens"),
        given=tuple(f"--{name}" for name in FLAGS if ns.get(name) is not None),
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
    if flags.zero and dp == 1:
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


def check_llm(flags: LLMOptions) -> None:
    """``--mode train`` on the LLM path: one step of ``--batch`` x ``--seq-len`` tokens, no inference flag."""
    inference = [
        f for f in flags.given if f in ("--phase", "--kv-len", "--gen-len", "--kv-dtype", "--state-dtype", "--sweep")
    ]
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
    layout = [f for f in flags.deploy.given if f in ("--tp", "--pp", "--ep", "--micro-batches")]
    if layout:
        raise OpcountError(
            f"{layout[0]}: --mode train prices data parallelism (--dp, --zero); tensor, pipeline and expert "
            "parallel training are not modelled"
        )
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
