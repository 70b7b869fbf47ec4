"""``--ep-num-redundant-experts``, ``--dispatch-dtype`` and ``--enable-two-batch-overlap`` on the command line:
the JSON and summary fields, and what they are refused with (one line naming the flag, status 2, before a
model is traced). A tiny Mixtral (d 256, f 512, n 2 layers, 8 experts, top 2) as tests/llm/test_deploy.py's;
the library's figures are tests/llm/test_expert_parallel.py's.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from tests.fixtures.command import run

TINY = [
    "--hf-config", "hidden_size=256", "--hf-config", "intermediate_size=512", "--hf-config", "num_hidden_layers=2",
    "--hf-config", "num_attention_heads=8", "--hf-config", "num_key_value_heads=2", "--hf-config", "vocab_size=1000",
]  # fmt: skip
MOE = ["llm:mixtral-8x7b", *TINY, "--batch", "4"]
DECODE = [*MOE, "--phase", "decode", "--kv-len", "7"]


def test_fp8_dispatch_and_two_batch_overlap_in_the_json_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--dp", "4", "--ep", "4", "--hardware", "h100-sxm", "--dispatch-dtype", "fp8"]
    status, out, err = run(capsys, *DECODE, *flags, "--enable-two-batch-overlap", "--format", "json")
    assert status == 0, err
    llm = json.loads(out)["llm"]
    # two halves of 2 sequences: in each a device dispatches its 2 tokens' 4 routes (16 of the 4 replicas
    # over 4 devices), 3/4 of them to others: dispatch 4 x (256 + 2 x 4) = 1,056 bytes, combine 4 x 512 =
    # 2,048; 2 layers, 2 halves
    assert llm["communication"]["bytes_per_device"] == pytest.approx(2 * 2 * (1056 + 2048) * 3 / 4)
    communication = llm["communication"]
    assert communication["overlapped"] == pytest.approx(min(llm["compute"]["time"], communication["time"]))
    assert llm["time"] == pytest.approx(llm["compute"]["time"] + communication["time"] - communication["overlapped"])
    assert llm["time_bound"] == pytest.approx(max(llm["compute"]["time_bound"], communication["time_bound"]))
    status, out, err = run(capsys, *DECODE, *flags, "--enable-two-batch-overlap", "--depth", "0")
    assert status == 0, err
    assert "of it overlapped)" in out and "overlapped with the kernels: two-batch overlap" in out


def test_redundant_experts_are_in_the_layout(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(
        capsys, *DECODE, "--dp", "4", "--ep", "4", "--ep-num-redundant-experts", "4", "--hardware", "h100-sxm",
        "--format", "json",
    )  # fmt: skip
    assert status == 0, err
    llm = json.loads(out)["llm"]
    assert llm["parallel"] == {"tp": 1, "pp": 1, "ep": 4, "dp": 4, "devices": 4, "redundant_experts": 4}
    # 12 slots, 3 a device: 3 experts of 3 x 256 x 512 x 2 bytes a layer where the replica holds 8
    assert llm["memory"]["weights"] - llm["memory"]["per_device"]["weights"] == pytest.approx(2 * 5 * 786432)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--dispatch-dtype", "fp8"], "--dispatch-dtype applies to the experts' all-to-all: give --ep"),
        (["--enable-two-batch-overlap"], "--enable-two-batch-overlap applies to the experts' all-to-all: give --ep"),
        (["--ep-num-redundant-experts", "4"], "--ep-num-redundant-experts 4: redundant experts are spread over"),
        (["--dp", "2", "--ep", "2", "--dispatch-dtype", "int4"], "--dispatch-dtype int4: choose one of"),
        (["--dp", "3", "--ep", "3"], "--ep 3: does not divide the 8 expert slots of MixtralConfig"),
        (["--dp", "2", "--ep", "2", "--enable-two-batch-overlap", "--batch", "3"], "--batch 3 is odd"),
        (
            ["--dp", "2", "--ep", "2", "--enable-two-batch-overlap", "--sweep", "batch=2,5"],
            "--batch 5 is odd",
        ),
        (
            ["--dp", "2", "--ep", "2", "--pp", "2", "--enable-two-batch-overlap"],
            "--enable-two-batch-overlap prices one phase on one pipeline stage",
        ),
        (["--ep-num-redundant-experts", "-1"], "expected a non-negative integer"),
    ],
)
def test_bad_all_to_all_flags_exit_2_naming_the_flag(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status, out, err = run(capsys, *DECODE, *args)
    assert status == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_two_batch_overlap_prices_one_phase_not_a_generation(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(
        capsys, *MOE, "--seq-len", "8", "--gen-len", "4", "--dp", "2", "--ep", "2", "--enable-two-batch-overlap"
    )
    assert status == 2 and "prices one phase on one pipeline stage" in err, err
