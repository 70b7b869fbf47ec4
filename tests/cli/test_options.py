"""The command line read once into frozen, typed options (``opcount.cli.parser.parse``,
``opcount.cli.options``): what the flags become, the analyses the columns declare they need,
``--hardware`` resolved once, and the analyses returned as one typed ``Analyses``."""

from __future__ import annotations

import dataclasses
import io
import re
from pathlib import Path

import pytest
import torch

import opcount
from opcount import MemoryTrafficAnalysis, report
from opcount.cli import main
from opcount.cli.analyze import Analyses, analyze
from opcount.cli.models import load
from opcount.cli.options import CompareOptions, HardwareChoice, Options, TrainingOptions, roles_for
from opcount.cli.parser import parse
from opcount.cli.progress import Progress
from opcount.hardware import calibrate
from opcount.roofline import roofline
from tests.fixtures.report_models import tiny

TINY = "tests.fixtures.report_models:tiny"
CLI = Path(opcount.__file__).parent / "cli"


def test_the_flags_become_frozen_typed_options(nothing_built: None) -> None:
    options = parse([TINY, "--hardware", "h100-sxm", "--fuse", "--columns", "flops,read", "--input", "2,3,16,16"])
    assert isinstance(options, Options)
    assert options.hardware == HardwareChoice(spec=opcount.hardware("h100-sxm"))
    assert options.analysis.fuse and options.inputs.shapes == ((2, 3, 16, 16),)
    assert options.rendering.columns == ("flops", "bytes_read")  # the alias read as its column
    assert options.analysis.roles == {"flops", "memory", "roofline"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.model = "resnet50"  # type: ignore[misc]
    assert not hasattr(options, "__dict__")  # slots: no attribute can be added either
    compared = parse(["compare", TINY, "resnet18", "--format", "csv"])
    assert isinstance(compared, CompareOptions) and compared.models == (TINY, "resnet18")


@pytest.mark.parametrize(
    ("columns", "fmt", "hardware", "sparsity", "roles"),
    [
        ((), "table", False, False, {"flops"}),  # params and flops: the flop count gives both
        (("params",), "table", False, False, {"flops"}),
        (("activations", "percent"), "table", False, False, {"flops", "activations"}),
        (("intensity",), "table", False, False, {"flops", "memory"}),  # flops over bytes moved
        ((), "html", False, False, {"flops", "memory"}),  # the page always shows the bytes moved
        (("time",), "table", True, False, {"flops", "roofline"}),
        ((), "table", True, True, {"flops", "roofline", "sparsity"}),
        (("sparse_flops",), "table", True, False, {"flops", "roofline", "sparsity"}),
    ],
)
def test_the_roles_are_what_the_shown_columns_declare(
    columns: tuple[str, ...], fmt: str, hardware: bool, sparsity: bool, roles: set[str]
) -> None:
    assert roles_for(columns, fmt, hardware=hardware, sparsity=sparsity) == roles


def test_a_registered_column_brings_its_own_role(monkeypatch: pytest.MonkeyPatch) -> None:
    # No hand-kept list of roles: a new column's declaration is enough for the command to compute it.
    column = report.Column("widgets", "#widgets", ("flops", "widgets"), lambda s: {})
    monkeypatch.setitem(report.COLUMNS, "widgets", column)
    assert roles_for(["widgets"], "table", hardware=False, sparsity=False) == {"flops", "widgets"}


def test_local_hardware_is_chosen_when_parsed_and_measured_only_when_the_run_starts(
    monkeypatch: pytest.MonkeyPatch, nothing_built: None
) -> None:
    def refuse(*args: object, **kwargs: object) -> float:
        raise AssertionError("measured while parsing")

    monkeypatch.setattr(calibrate, "matmul_flops", refuse)
    monkeypatch.setattr(calibrate, "copy_bandwidth", refuse)
    assert parse([TINY, "--hardware", "local"]).hardware == HardwareChoice(local="local")
    # --profile runs on the CPU: the speed of light it is compared with is the CPU's
    profiled = parse([TINY, "--hardware", "LOCAL", "--profile", "--recalibrate"])
    assert profiled.hardware == HardwareChoice(local="local:cpu", recalibrate=True)
    assert parse([TINY, "--hardware", "local:cuda", "--profile"]).hardware == HardwareChoice(local="local:cuda")


def test_the_roofline_and_the_bytes_columns_are_two_fields() -> None:
    # The roofline's traffic is fused with --fuse, the bytes columns are not: one result field each.
    model, x = tiny()
    h100 = opcount.hardware("h100-sxm")
    options = parse([TINY, "--hardware", "h100-sxm", "--fuse", "--columns", "flops,bytes,time"])
    assert isinstance(options, Options)
    loaded = load(TINY, options.inputs)
    with torch.no_grad():
        found = analyze(loaded, TINY, options.analysis, h100, Progress(io.StringIO(), enabled=False))
    assert isinstance(found, Analyses) and found.activations is None and found.sparsity is None
    assert found.memory is not None and found.roofline is not None
    assert found.memory.total() == MemoryTrafficAnalysis(model, x).total()
    fused = roofline(model, x, h100, fuse=True)
    assert found.roofline.total_time == pytest.approx(fused.total_time)
    assert fused.total_time < roofline(model, x, h100).total_time  # --fuse reached the roofline


def test_nothing_below_the_parser_reads_argparse() -> None:
    # the parser and its flag groups (cli/flags/) read argparse's values; the options they make are all below sees
    readers = [
        path.relative_to(CLI).as_posix()
        for path in sorted(CLI.rglob("*.py"))
        if path.name != "parser.py"
        and path.parent.name != "flags"
        and re.search(r"argparse\.Namespace|getattr\(args|vars\(ns\)", path.read_text())
    ]
    assert readers == []
    assert "argparse" not in (CLI.parent / "llm" / "report" / "plot.py").read_text()


def test_an_llm_sweep_is_plotted_from_plain_values(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    pytest.importorskip("transformers")
    out = tmp_path / "sweep.png"
    argv = ["llm:llama-3-8b", "--hf-config", "num_hidden_layers=1", "--sweep", "batch=1,2", "--hardware", "h100-sxm"]
    assert main([*argv, "--plot", str(out), "-q"]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_llm_defaults_are_resolved_once_in_the_options(nothing_built: None) -> None:
    # The defaults --help states: a prefill of 128 prompt tokens for one sequence (decoding: one new token),
    # bfloat16 weights and activations, fused kernels, one device, vLLM's 0.9 memory utilisation, AdamW.
    pytest.importorskip("transformers")
    options = parse(["llm:llama-3-8b"])
    assert isinstance(options, Options) and options.llm is not None
    flags = options.llm.flags
    assert (flags.phase, flags.seq_len, flags.batch, flags.kv_len, flags.gen_len) == ("prefill", 128, 1, 0, None)
    assert (flags.weight_dtype, flags.act_dtype, flags.kv_dtype, flags.kernels) == (
        ("bfloat16",),
        "bfloat16",
        None,
        "fused",
    )
    d = flags.deploy
    assert (d.tp, d.pp, d.ep, d.dp, d.micro_batches, d.price, d.max_batch) == (1, 1, 1, 1, 1, None, False)
    # vLLM's gpu_memory_utilization; max_batched_tokens None: vLLM's default for the device, known only with it
    assert (d.gpu_memory_utilization, d.max_batched_tokens) == (0.9, None) and flags.given == d.given == ()
    assert options.training == TrainingOptions(optimizer="adamw", recompute="none", zero=0, tokens=None, given=())
    decode = parse(["llm:llama-3-8b", "--phase", "decode", "--kv-len", "64", "--tp", "2", "--reserve", "0"])
    assert isinstance(decode, Options) and decode.llm is not None
    assert (decode.llm.flags.seq_len, decode.llm.flags.kv_len, decode.llm.flags.deploy.gpu_memory_utilization) == (
        1,
        64,
        1,
    )
    assert decode.llm.flags.given == ("--phase", "--kv-len", "--tp", "--reserve")  # as typed, for messages
    trained = parse(["llm:llama-3-8b", "--mode", "train", "--seq-len", "256", "--dp", "2", "--zero", "1"])
    assert isinstance(trained, Options) and trained.llm is not None
    assert (trained.llm.flags.seq_len, trained.llm.flags.deploy.dp, trained.training.zero) == (256, 2, 1)
    assert trained.training.given == ("--zero",)
