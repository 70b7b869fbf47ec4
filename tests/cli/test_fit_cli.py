"""Fit on the command line: one device judged as a layout's devices are (table and JSON, ``memory.fits``),
a layout that fits named where it does not, ``--gpu-memory-utilization`` (``--reserve`` its complement) and
``--max-batched-tokens`` (``--max-num-batched-tokens``), each figure worked by hand from the config.

Llama-3-70B (meta-llama/Meta-Llama-3-70B's config.json): hidden 8192, MLP 28672, 80 layers, 64 heads of 128,
8 KV heads, vocabulary 128256. Per layer its projections hold 2 x 8192^2 (q, o) + 2 x 8192 x 1024 (k, v)
+ 3 x 8192 x 28672 (gate, up, down) = 855,638,016 weights; the embedding and lm_head 128256 x 8192 each;
161 norms of 8192 (2 a layer and the final one), replicated by tensor parallelism.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("transformers")

from tests.cli.test_deploy_cli import DECODE
from tests.fixtures.command import run

H100_SXM = 81_559 * 2**20  # nvidia-smi's memory.total on an H100 SXM
LAYER, VOCAB, NORMS = 855_638_016, 128_256 * 8192, 161 * 8192


def memory_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    status, out, err = run(capsys, *args, "--format", "json")
    assert status == 0, err
    memory: dict[str, object] = json.loads(out)["llm"]["memory"]
    return memory


def test_70b_in_bfloat16_does_not_fit_one_h100_and_tp_2_does(capsys: pytest.CaptureFixture[str]) -> None:
    # 2 bytes a weight: 141.1 GB on one device against 81,559 MiB x 0.9 = 77.0 GB; at tp 2 the split weights
    # halve and the norms stay whole: 70.56 GB, and the one cached position's 2 x 80 x 4 x 128 x 2 bytes
    args = ("llm:llama-3-70b", "--phase", "decode", "--hardware", "h100-sxm")
    memory = memory_json(capsys, *args)
    weights = (80 * LAYER + 2 * VOCAB + NORMS) * 2
    assert memory["capacity"] == pytest.approx(H100_SXM * 0.9, rel=1e-15)
    assert memory["fits"] is False and memory["per_device"]["weights"] == weights  # type: ignore[index]
    layout = memory["layout_that_fits"]
    assert isinstance(layout, dict) and (layout["tp"], layout["pp"], layout["devices"]) == (2, 1, 2)
    per_device = (80 * LAYER + 2 * VOCAB) * 2 / 2 + NORMS * 2 + 2 * 80 * 4 * 128 * 2
    assert layout["per_device"] == pytest.approx(per_device, rel=1e-5)  # and a few hundred KB of activations
    status, out, err = run(capsys, *args, "--depth", "0")
    assert status == 0, err
    assert (
        "  capacity: 77 GB per device (0.9 of its 85.5 GB): does not fit (141 GB); --tp 2 fits (70.6 GB a device)"
        in out
    )


def test_70b_fp8_at_tp_2_holds_95_sequences_of_5k_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    # Llama-3.3-70B's architecture in FP8 (one float32 scale per tensor), its cache in FP8, on two H100s:
    # 4096 prompt tokens and 1024 generated, 5120 positions a sequence. Per device:
    # - capacity 81,559 MiB x 0.9 = 76,968,728,985.6 bytes (vLLM's gpu_memory_utilization);
    # - weights: the projections at 1 byte and their 7 x 80 scales, the embedding and lm_head in bfloat16,
    #   halved; the norms whole: 36,329,505,888 bytes;
    # - KV: 2 x 80 layers x 4 of the 8 KV heads x 128 x 1 byte = 81,920 bytes a token, 419,430,400 a sequence;
    # - activations: the prompt in chunks of 8,192 tokens (vLLM's max_num_batched_tokens on an 80 GB H100),
    #   its peak inside the MLP, where the residual stream (8192) and the half-width gate, up and SiLU(gate)
    #   (3 x 14336) are alive, 1 byte each: 51,200 bytes a token, 419,430,400 a chunk.
    # (76,968,728,985.6 - 36,329,505,888 - 419,430,400) / 419,430,400 = 95.9: 95 sequences, where the datasheet's
    # 80 GB less 0.1 and the activations of all the prompts at once (51,200 x 4096 a sequence) left room for 56.
    args = ["llm:llama-3-70b", "--seq-len", "4096", "--gen-len", "1024", "--tp", "2", "--hardware", "h100-sxm"]
    args += ["--weight-dtype", "fp8", "--act-dtype", "fp8", "--kv-dtype", "fp8", "--max-batch"]
    status, out, err = run(capsys, *args, "--format", "json")
    assert status == 0, err
    llm = json.loads(out)["llm"]
    capacity = H100_SXM * 0.9
    weights = (80 * LAYER + 7 * 80 * 4 + 2 * VOCAB * 2) / 2 + NORMS * 2
    per_sequence, chunk = 2 * 80 * 4 * 128 * 5120, 8192 * (8192 + 3 * 14336)
    device = llm["memory"]["per_device"]
    assert (device["weights"], device["kv_cache"], device["activations"]) == (weights, per_sequence, 4096 * 51_200)
    assert llm["memory"]["max_batched_tokens"] == 8192
    assert llm["max_batch"] == int((capacity - weights - chunk) // per_sequence) == 95


def test_the_engine_settings_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    # one device, no layout: the figures the flags set, beside the verdict
    memory = memory_json(
        capsys, *DECODE, "--hardware", "h100-sxm", "--gpu-memory-utilization", "0.5", "--max-num-batched-tokens", "64"
    )
    assert memory["capacity"] == H100_SXM * 0.5 and memory["fits"] is True
    assert (memory["gpu_memory_utilization"], memory["max_batched_tokens"]) == (0.5, 64)
    memory = memory_json(capsys, *DECODE, "--hardware", "h100-sxm", "--reserve", "0.25", "--max-batched-tokens", "9")
    assert memory["capacity"] == H100_SXM * 0.75 and memory["max_batched_tokens"] == 9
    assert memory_json(capsys, *DECODE, "--hardware", "l4")["max_batched_tokens"] == 2048  # vLLM's below 70 GiB


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--gpu-memory-utilization", "0"],
            "argument --gpu-memory-utilization: expected a fraction above 0 and up to 1",
        ),
        (["--gpu-memory-utilization", "1.2"], "expected a fraction above 0 and up to 1, got 1.2"),
        (["--gpu-memory-utilization", "0.8", "--reserve", "0.2"], "--reserve F is --gpu-memory-utilization 1 - F"),
        (["--max-batched-tokens", "0"], "argument --max-batched-tokens/--max-num-batched-tokens"),
    ],
)
def test_bad_engine_settings_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    status, out, err = run(capsys, *DECODE, "--hardware", "h100-sxm", *args)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err


def test_training_refuses_the_serving_engines_settings(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(capsys, *DECODE[:1], "--mode", "train", "--gpu-memory-utilization", "0.8")
    assert status == 2 and "--gpu-memory-utilization applies to inference" in err
