"""A weight read through a view (Mamba's ``conv1d.weight.view(...)``, Zamba's ``x_proj_weight[h]``,
RG-LRU's gate biases per head) is priced as the weight: in its stored format, in the speed of light as
the rest of the weights, whatever view reaches it.

Tiny Mamba (hidden D = 32, expand 2: inner I = 64, state N = 8, conv taps K = 4, dt rank R = 2, two
layers, vocabulary V = 100, the embedding tied to the output layer), decoding B = 2 sequences over
L = 5 cached tokens. Its weights per layer (transformers' MambaMixer):

    in_proj  [2I, D]  = 128 x 32 = 4096      x_proj [R + 2N, I] = 18 x 64 = 1152
    dt_proj  [I, R]   =  64 x 2  =  128      out_proj [D, I]    = 32 x 64 = 2048
    others: norm D = 32, conv1d weight I x K = 256 and bias I = 64, dt_proj bias 64,
            A_log I x N = 512, D-skip I = 64: 992 elements

int8 (one float16 scale per output row) prices a linear weight [out, in] at out x in + 2 out bytes:
4096 + 256 = 4352, 1152 + 36 = 1188, 128 + 128 = 256, 2048 + 64 = 2112: 7908 per layer. The others
stay in bfloat16: 992 x 2 = 1984 per layer. Two layers: 2 x (7908 + 1984) = 19784, plus the tied
table read whole by the output layer (100 x 32 x 2 = 6400) and the final norm (32 x 2 = 64):
weights = 26248 bytes.

The state (conv K x I = 256 and SSM I x N = 512: 768 elements a sequence) is read and written
once per layer in the model's bfloat16, whatever the activations (vLLM's mamba_cache_dtype "auto"):
2 layers x (read + written) x B x 768 x 2 = 12288. The token ids (B x 8 = 16) and the float32 logits
(B x V x 4 = 800) are the inputs and outputs: 816.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="layer types need transformers 5")

from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.precision.dtypes import Precision  # noqa: E402
from tests.llm.test_decode_bound_bytes import STEPS, B, V  # noqa: E402

WEIGHTS = 2 * (4352 + 1188 + 256 + 2112 + 992 * 2) + 100 * 32 * 2 + 32 * 2  # 26248
IO = B * 8 + B * V * 4  # 816


def _decode_bound_bytes(precision: Precision, family: str = "mamba") -> float:
    llm = CausalLM(STEPS[family].config(), precision)
    schedule = llm.phase("decode", kv_len=5, batch=B, hardware="h100-sxm").schedule
    assert schedule is not None
    return schedule.compulsory_bytes


# w8a16 and w8a8 read the same bytes: conv1d's weight, read through a view, stays bfloat16 (not the
# activations' int8), and the state stays in bfloat16
@pytest.mark.parametrize("act", ["bfloat16", "int8"])
def test_mamba_int8_decode_reads_every_weight_in_its_format(act: str) -> None:
    assert _decode_bound_bytes(Precision(weight="int8", act=act)) == WEIGHTS + 12288 + IO == 39352


@pytest.mark.parametrize("family", sorted(STEPS))
def test_int8_activations_leave_weights_read_through_views_in_bfloat16(family: str) -> None:
    """Under 8-bit activations (bf16 weights, the KV cache in int8 as asked), every family's decode
    bound is test_decode_bound_bytes' closed form with the keys and values at 1 byte and bfloat16
    logits at 1 byte: the weights it reads through views (conv weights, per-head slices, gate
    biases) keep 2 bytes, and so do the states (the model's dtype)."""
    step = STEPS[family]
    config = step.config()
    llm = CausalLM(config, Precision(act="int8", kv="int8"))
    parameters = sum(p.numel() for p in llm.model.parameters())
    expected = step.bound_bytes(parameters, bool(config.get_text_config().tie_word_embeddings), 1)
    if step.logits == 2:  # bfloat16 logits are an int8 activation; float32 ones keep 4 bytes
        expected -= B * V
    schedule = llm.phase("decode", kv_len=5, batch=B, hardware="h100-sxm").schedule
    assert schedule is not None
    assert schedule.compulsory_bytes == expected
