"""``--micro-batches``: the phase traced at one micro-batch is the phase asked (its kernels, FLOP
convention and hardware passed whole as one request), so a pipeline's compute follows ``--kernels``."""

from __future__ import annotations

import json

import pytest

transformers = pytest.importorskip("transformers")

from opcount.cli import main  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.layout import Parallel  # noqa: E402
from tests.cli.test_llm_cli import TINY  # noqa: E402

SIZES = {"hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8}


def _compute(capsys: pytest.CaptureFixture[str], kernels: str) -> float:
    status = main(["llm:llama-3-8b", *TINY, "--phase", "decode", "--kv-len", "20", "--batch", "2", "--pp", "2",
                   "--micro-batches", "2", "--hardware", "h100-sxm", "--kernels", kernels, "--format", "json"])  # fmt: skip
    out, err = capsys.readouterr()
    assert status == 0, err
    compute: float = json.loads(out)["llm"]["compute"]["time"]
    return compute


def test_a_pipelines_micro_batch_runs_the_kernels_asked(capsys: pytest.CaptureFixture[str]) -> None:
    eager, fused = _compute(capsys, "eager"), _compute(capsys, "fused")
    assert eager > fused  # one kernel per operator launches and moves more than the fused ones
    from opcount.llm.models.catalogue import config

    llm = CausalLM(config("llama-3-8b", **SIZES, num_key_value_heads=2, vocab_size=1000))
    for kernels, got in (("eager", eager), ("fused", fused)):
        step = {"kv_len": 20, "hardware": "h100-sxm", "kernels": kernels}
        whole, micro = llm.phase("decode", batch=2, **step), llm.phase("decode", batch=1, **step)
        d = llm.deploy(whole, Parallel(pp=2, micro_batches=2), micro=micro)
        assert got == pytest.approx(d.compute_time, rel=1e-12)
