"""Weight formats with their scales and per-module weight assignments, against bytes worked by hand.

Byte counts per format (n = out x in elements of one matrix), from each format's definition:
MXFP4 (OCP Microscaling Formats v1.0: E2M1 elements, one E8M0 scale per block of 32) n/2 + n/32;
NVFP4 (NVIDIA: E2M1, one E4M3 scale per 16, one float32 per tensor) n/2 + n/16 + 4; fp8-block
(DeepSeek-V3's checkpoint: float8_e4m3fn with one float32 ``weight_scale_inv`` per 128 x 128 block,
edge blocks included) n + 4 * ceil(out/128) * ceil(in/128).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

transformers = pytest.importorskip("transformers")

from opcount.errors import OpcountValueError  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.precision.assignments import WeightAssignmentError, WeightFormats  # noqa: E402
from opcount.llm.precision.dtypes import Precision, footprint_weights, weight_bytes  # noqa: E402

BF16 = 2


def test_bytes_of_one_weight_in_each_format() -> None:
    n = 4096 * 4096
    assert weight_bytes((4096, 4096), "mxfp4") == n / 2 + n / 32  # 4.25 bits a weight
    assert weight_bytes((4096, 4096), "mxfp4") * 8 / n == 4.25
    assert weight_bytes((4096, 4096), "nvfp4") == n / 2 + n / 16 + 4  # 4.5 bits and a tensor scale
    assert weight_bytes((4096, 4096), "fp8-block") == n + 32 * 32 * 4
    assert weight_bytes((4096, 4096), "fp8") == n + 4
    # DeepSeek-V3's kv_a_proj_with_mqa [576, 7168]: 5 x 56 blocks, the last row of blocks partial
    assert weight_bytes((576, 7168), "fp8-block") == 576 * 7168 + 5 * 56 * 4
    # today's formats are unchanged: int4 g128 (scale + zero in float16), int8 per row
    assert weight_bytes((512, 256), "int4") == 512 * 256 / 2 + 512 * 2 * 2 * 2
    assert weight_bytes((512, 256), "int8") == 512 * 256 + 512 * 2


def test_expert_stack_is_quantized_per_expert_matrix() -> None:
    experts, out, inner = 8, 256, 512
    n = out * inner
    assert weight_bytes((experts, out, inner), "nvfp4") == experts * (n / 2 + n / 16 + 4)
    assert weight_bytes((experts, out, inner), "fp8") == experts * (n + 4)
    # [experts, in, out] (transposed): the scale rows follow out, the blocks run along in
    assert weight_bytes((experts, inner, out), "int8", transposed=True) == experts * (n + out * 2)
    assert weight_bytes((experts, out, inner), "int8") == experts * (n + out * 2)


def test_weight_formats_parsing() -> None:
    formats = WeightFormats.parse(["experts=mxfp4", "bf16"])
    assert (formats.default, formats.assignments) == ("bfloat16", (("experts", "mxfp4"),))
    assert WeightFormats.parse({"experts": "mxfp4"}) == formats
    assert WeightFormats.parse("experts=mxfp4,bfloat16") == formats
    assert Precision(weight=["self_attn=fp8", "int4"]).weight == "self_attn=float8_e4m3fn,int4"
    with pytest.raises(WeightAssignmentError, match="experts=int3: unknown weight dtype 'int3'"):
        WeightFormats.parse(["experts=int3"])
    with pytest.raises(WeightAssignmentError, match="two defaults"):
        WeightFormats.parse(["int4", "int8"])
    with pytest.raises(OpcountValueError, match="expected PATTERN=FORMAT"):
        WeightFormats.parse(["=int4"])


# A GPT-OSS-shaped model: d hidden, f expert width, h heads of e, g KV heads, x experts, V vocab.
D, F, NL, H, EH, G, X, V = 64, 96, 2, 4, 16, 2, 4, 128


def gpt_oss() -> object:
    return transformers.GptOssConfig(
        hidden_size=D,
        intermediate_size=F,
        num_hidden_layers=NL,
        num_attention_heads=H,
        head_dim=EH,
        num_key_value_heads=G,
        num_local_experts=X,
        num_experts_per_tok=2,
        vocab_size=V,
        layer_types=["sliding_attention", "full_attention"],
        tie_word_embeddings=False,
    )


def test_gpt_oss_footprint_mxfp4_experts_bf16_attention() -> None:
    precision = Precision(weight=["experts=mxfp4", "bfloat16"])
    llm = CausalLM(gpt_oss(), precision)
    # experts: gate_up [x, d, 2i] and down [x, i, d], each expert matrix in MXFP4
    gate_up, down = D * 2 * F, F * D
    experts = X * ((gate_up / 2 + gate_up / 32) + (down / 2 + down / 32)) + X * (2 * F + D) * BF16  # + biases
    attention = ((D * H * EH + H * EH) + 2 * (D * G * EH + G * EH) + (H * EH * D + D) + H) * BF16  # + sinks
    router = (X * D + X) * BF16
    norms = 2 * D * BF16
    per_layer = experts + attention + router + norms
    rest = (2 * V * D + D) * BF16  # embedding, lm_head, final norm
    assert footprint_weights(llm.model, precision) == NL * per_layer + rest


def test_bare_block_format_quantizes_experts_and_linears() -> None:
    precision = Precision(weight="nvfp4")
    llm = CausalLM(gpt_oss(), precision)

    # every Linear (q, k, v, o) and every expert matrix in NVFP4, the rest in bf16
    def nv(out: int, inner: int) -> float:
        return out * inner / 2 + out * inner / 16 + 4

    linears = nv(H * EH, D) + 2 * nv(G * EH, D) + nv(D, H * EH)
    experts = X * (nv(2 * F, D) + nv(D, F))
    other = (H * EH + 2 * G * EH + D + H + X * (2 * F + D) + X * D + X + 2 * D) * BF16
    assert footprint_weights(llm.model, precision) == NL * (linears + experts + other) + (2 * V * D + D) * BF16


def test_last_assignment_wins_and_lm_head_can_be_named() -> None:
    config = transformers.LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=1, num_attention_heads=4, vocab_size=512
    )
    formats = ["mlp=int8", "down_proj=mxfp4", "lm_head=fp8", "bfloat16"]
    llm = CausalLM(config, Precision(weight=formats))
    mlp = 2 * (256 * 128 + 256 * 2) + (128 * 256 / 2 + 128 * 256 / 32)  # gate, up int8; down MXFP4
    attention = 4 * 128 * 128 * BF16
    head = 512 * 128 + 4
    other = (512 * 128 + 3 * 128) * BF16  # embedding, two norms and the final one
    assert llm.phase("decode", kv_len=1).memory.weights == mlp + attention + head + other


def test_roofline_reads_the_assigned_bytes() -> None:
    config = transformers.LlamaConfig(
        hidden_size=128, intermediate_size=256, num_hidden_layers=1, num_attention_heads=4, vocab_size=512
    )
    dense = CausalLM(config).phase("decode", kv_len=8, hardware="h100-sxm")
    mx = CausalLM(config, Precision(weight=["mlp=mxfp4", "bf16"])).phase("decode", kv_len=8, hardware="h100-sxm")
    read_dense = sum(t.layer.weight_bytes for t in dense.roofline.layers)
    read_mx = sum(t.layer.weight_bytes for t in mx.roofline.layers)
    n = 3 * 128 * 256  # gate, up and down
    assert read_dense - read_mx == pytest.approx(n * BF16 - (n / 2 + n / 32))


def test_errors_name_the_assignment() -> None:
    with pytest.raises(
        WeightAssignmentError, match=r"no linear or expert weight of GptOssForCausalLM matches 'mlp\.fc1'"
    ):
        CausalLM(gpt_oss(), Precision(weight=["mlp.fc1=int4"]))
    odd = transformers.LlamaConfig(
        hidden_size=48, intermediate_size=80, num_hidden_layers=1, num_attention_heads=4, vocab_size=64
    )
    with pytest.raises(
        WeightAssignmentError, match=r"mlp=mxfp4: model.layers.0.mlp.gate_proj \[80, 48\]: .*blocks of 32"
    ):
        CausalLM(odd, Precision(weight=["mlp=mxfp4"]))
    CausalLM(odd, Precision(weight=["self_attn=nvfp4"]))  # 48 is three blocks of 16


def test_labels() -> None:
    assert Precision(weight="int4").label() == "w4a16"
    assert Precision(weight="mxfp4").label() == "w4a16 (mxfp4)"
    assert Precision(weight=["experts=mxfp4", "bf16"]).label() == "weights experts=mxfp4, bfloat16 elsewhere; a16"


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "opcount", *args], capture_output=True, text=True, timeout=300)


def test_cli_errors_name_the_flag() -> None:
    spec = ["llm:llama-3-8b", "--hf-config", "num_hidden_layers=1", "--phase", "decode"]
    for flags, expected in (
        (["--weight-dtype", "experts=mxfp4"], "--weight-dtype: weight assignment experts=mxfp4: no linear or expert"),
        (["--weight-dtype", "mlp=fp5"], "--weight-dtype: weight assignment mlp=fp5: unknown weight dtype 'fp5'"),
    ):
        done = _cli(*spec, *flags)
        assert done.returncode == 2
        assert expected in done.stderr
        assert "Traceback" not in done.stderr


def test_cli_per_module_label() -> None:
    done = _cli(
        "llm:llama-3-8b", "--hf-config", "num_hidden_layers=1", "--phase", "decode",
        "--weight-dtype", "mlp=mxfp4", "--weight-dtype", "bf16",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "weights mlp=mxfp4, bfloat16 elsewhere; a16" in done.stdout


@pytest.mark.parametrize("name,gib", [("gpt-oss-120b", 60.8), ("gpt-oss-20b", 12.8)])
def test_gpt_oss_checkpoints_mxfp4_experts(name: str, gib: float) -> None:
    """gpt-oss ships its experts in MXFP4 and everything else in bf16; the model card (OpenAI, gpt-oss-120b &
    gpt-oss-20b, Table 1) gives the checkpoints' sizes: 60.8 GiB and 12.8 GiB."""
    from opcount.llm.models.catalogue import config

    precision = Precision(weight={"experts": "mxfp4"})
    llm = CausalLM(config(name), precision)
    assert footprint_weights(llm.model, precision) / 2**30 == pytest.approx(gib, abs=0.05)
