"""Recurrent states kept outside transformers' cache layers, against closed forms worked by hand
from the modeling code on tiny configs: RWKV-4 (five parts per layer, three in float32),
RecurrentGemma (Griffin: a conv state and a float32 RG-LRU state in its modules, local attention
over a window) and Zamba (Mamba layers, and hybrid layers sharing one tied attention block).

Notation: D hidden size, B batch, bf16 activations (2 bytes), one new token per decode step.
``macs`` counts the multiply-adds of matrix products only (linear, baddbmm, attention).
"""

from __future__ import annotations

from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="layer types need transformers 5")

from opcount.errors import OpcountError  # noqa: E402
from opcount.ir import TensorSpec  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.precision.dtypes import Precision, pricing_for  # noqa: E402
from tests.llm.test_caches import cache_traffic  # noqa: E402

D, V, B, BF16, F32 = 32, 100, 2, 2, 4
SHORT, LONG = 16, 4096


def _rwkv() -> CausalLM:
    return CausalLM(
        transformers.RwkvConfig(
            vocab_size=V, hidden_size=D, intermediate_size=64, num_hidden_layers=2, context_length=64
        )
    )


def _griffin() -> CausalLM:
    return CausalLM(
        transformers.RecurrentGemmaConfig(
            vocab_size=V,
            hidden_size=D,
            lru_width=D,
            intermediate_size=128,
            num_attention_heads=4,
            num_key_value_heads=2,
            num_hidden_layers=3,  # block_types' defaults: recurrent, recurrent, attention
            attention_window_size=8,
            conv1d_width=4,
        )
    )


# ------------------------------------------------------------------------------------------------
# RWKV-4
# ------------------------------------------------------------------------------------------------
def test_rwkv_holds_five_parts_per_layer_three_in_float32() -> None:
    llm = _rwkv()
    # per layer and sequence (RwkvModel.forward): the two token shifts (channel mix, time mix), D
    # each in the model's dtype, and the WKV numerator, denominator and maximum, D each in float32:
    # 2 * 32 * 2 + 3 * 32 * 4 = 128 + 384 = 512 bytes; 2 layers, B = 2: 2048, whatever the context
    per_layer = 2 * D * BF16 + 3 * D * F32
    short, long = (llm.phase("decode", kv_len=n, batch=B, preset="macs") for n in (SHORT, LONG))
    for cost in (short, long):
        assert cost.memory.kv_cache_by_type == {"state": 2 * B * per_layer} == {"state": 2048}
    # a step writes each part of each layer once: shifts B * D * 2 = 128, float32 parts B * D * 4 = 256
    shift, wide = B * D * BF16, B * D * F32
    for cost in (short, long):
        read, written = cache_traffic(cost)
        for layer in (0, 1):
            p = f"kv_cache.{layer}."
            assert written[p + "state0"] == written[p + "state1"] == shift
            assert (
                written[p + "state2_float32"] == written[p + "state3_float32"] == written[p + "state4_float32"] == wide
            )
            # reads, operator by operator (modeling_rwkv, one token): the time-mix shift by the key,
            # value and receptance mixes (3), the channel-mix shift by the key and receptance mixes
            # (2); the maximum by maximum(pp, k + u), pp - max, and pp + w twice (4); the numerator
            # and the denominator each by e1 * aa for the output and for the new state (2)
            assert (read[p + "state1"], read[p + "state0"]) == (3 * shift, 2 * shift)
            assert read[p + "state4_float32"] == 4 * wide
            assert read[p + "state2_float32"] == read[p + "state3_float32"] == 2 * wide
    # the mixers' multiply-adds per token and layer: time mix key, value, receptance, output (4 D^2),
    # channel mix key D x 64, value 64 x D, receptance D^2; the head D x V:
    # B * (2 * (4 * 1024 + 2 * 2048 + 1024) + 3200) = 2 * (2 * 9216 + 3200) = 43,264, whatever the context
    assert short.flops.total() == long.flops.total() == B * (2 * (4 * D * D + 2 * D * 64 + D * D) + D * V) == 43_264
    # a prompt: every token through every layer, the head on the last one only
    prefill = llm.phase("prefill", seq_len=16, batch=B, preset="macs")
    assert prefill.flops.total() == B * (16 * 2 * 9216 + D * V) == 596_224
    assert prefill.memory.kv_cache_by_type == {"state": 2048}


def test_rwkv_step_runs_one_token_per_sequence() -> None:
    # transformers' one-token step broadcasts the (batch, D) shift against (batch, 1, D): past one
    # sequence it would run batch x batch tokens; the head's output is one token per sequence here
    cost = _rwkv().phase("decode", kv_len=SHORT, batch=3, preset="macs")
    assert cost.flops.by_module()["head"] == 3 * D * V


def test_rwkv_time_mix_of_another_width_is_refused_naming_it() -> None:
    # the state parts are hidden_size wide (RwkvModel.forward): a 64-wide time mix does not fit them
    config = transformers.RwkvConfig(vocab_size=V, hidden_size=D, attention_hidden_size=64, num_hidden_layers=2)
    with pytest.raises(OpcountError, match=r"rwkv\.blocks\.0\.attention: an RWKV time mix whose width differs"):
        CausalLM(config)


def test_float32_state_parts_stay_float32_whatever_the_dtypes_asked() -> None:
    llm = CausalLM(_rwkv().config, Precision(kv="float8_e4m3fn", state="float16"))
    # shifts at 2 bytes (the state dtype: the KV dtype is not the state's), the numerator,
    # denominator and maximum at 4: 2 layers * B * (2 * 32 * 2 + 3 * 32 * 4) = 4 * 512 = 2048
    assert llm.kv_bytes_by_type(SHORT, 1, B) == {"state": 2 * B * (2 * D * BF16 + 3 * D * F32)} == {"state": 2048}
    price: Any = pricing_for(llm.model, llm.precision)
    assert price(TensorSpec((B, D), "float32", "kv_cache.0.state2_float32")) == 4
    assert price(TensorSpec((B, 1, D), "bfloat16", "kv_cache.0.state0")) == 2
    wide = CausalLM(_rwkv().config, Precision(state="float32"))
    assert wide.kv_bytes_by_type(SHORT, 1, B) == {"state": 2 * B * (2 * D + 3 * D) * F32} == {"state": 2560}


# ------------------------------------------------------------------------------------------------
# RecurrentGemma (Griffin)
# ------------------------------------------------------------------------------------------------
def test_griffin_state_and_local_attention_window() -> None:
    llm = _griffin()
    assert [layer.layer_type for layer in llm.caches.layers] == ["state", "state", "sliding_attention"]
    # a recurrent block per sequence: the conv's last conv1d_width - 1 = 3 inputs of lru_width = 32
    # channels in bf16 (32 * 3 * 2 = 192) and the RG-LRU state, 32 in float32 (128): 320 bytes;
    # the local attention layer: 2 KV heads of 8 (D / 4 heads), keys and values, 2 * 2 * 8 * 2 = 64
    # bytes a token, at most the window's 8 tokens (512): B = 2 -> state 2 * 2 * 320, window 2 * 512
    state, window = (D * 3 * BF16 + D * F32), 2 * 2 * 8 * BF16 * 8
    short, long = (llm.phase("decode", kv_len=n, batch=B, preset="macs") for n in (SHORT, LONG))
    for cost in (short, long):
        assert cost.memory.kv_cache_by_type == {"state": 2 * B * state, "sliding_attention": B * window}
        read, written = cache_traffic(cost)
        for layer in (0, 1):  # each state read once (torch.cat; the RG-LRU's a * h), written once
            assert read[f"kv_cache.{layer}.conv0"] == written[f"kv_cache.{layer}.conv0"] == B * D * 3 * BF16
            assert (
                read[f"kv_cache.{layer}.state0_float32"] == written[f"kv_cache.{layer}.state0_float32"] == B * D * F32
            )
        assert read["kv_cache.2.keys"] == read["kv_cache.2.values"] == B * 2 * 8 * 8 * BF16  # the window
        assert written["kv_cache.2.keys"] == written["kv_cache.2.values"] == B * 2 * 8 * BF16  # the new token
    # multiply-adds a token: each recurrent block linear_x, linear_y, linear_out (3 D^2 = 3072) and
    # its RG-LRU gates (baddbmm: 2 gates x 4 blocks of 8 x 8 = 512); the attention block q, o (D^2
    # each), k, v (D x 16 each): 3072, and over the window 4 heads x 8 keys x (8 + 8) = 512; each
    # MLP gate, up, down at intermediate_size / 2 = 64: 6144; the head D x V = 3200
    per_token = 2 * (3072 + 512 + 6144) + (3072 + 512 + 6144) + 3200
    assert short.flops.total() == long.flops.total() == B * per_token == 64_768
    prefill = llm.phase("prefill", seq_len=16, batch=B)
    read, written = cache_traffic(prefill)
    assert written["kv_cache.0.state0_float32"] == B * D * F32  # a prompt starts from no state, writes it once
    assert "kv_cache.0.state0_float32" not in read


# ------------------------------------------------------------------------------------------------
# Zamba
# ------------------------------------------------------------------------------------------------
def test_zamba_mamba_and_tied_attention_layers() -> None:
    config = transformers.ZambaConfig(
        vocab_size=V,
        hidden_size=D,
        intermediate_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_hidden_layers=3,
        # one Mamba layer, then two hybrid layers (the shared block needs two to be tied)
        layers_block_type=["linear_attention", "hybrid", "hybrid"],
        mamba_d_state=8,
        n_mamba_heads=2,
    )
    llm = CausalLM(config)
    # every layer runs Mamba: a conv over expand * D = 64 channels of d_conv = 4 taps (256) and an
    # SSM state of n_mamba_heads x 32 x d_state = 2 * 32 * 8 = 512: 768 elements a sequence. A
    # hybrid layer's attention: 2 KV heads of 2 * D / 4 = 16, keys and values, 64 elements a token
    per_token = 2 * 2 * 16 * BF16
    short, long = (llm.phase("decode", kv_len=n, batch=B) for n in (SHORT, LONG))
    for cost, n in ((short, SHORT), (long, LONG)):
        assert cost.memory.kv_cache_by_type == {
            "state": 3 * B * 768 * BF16,
            "full_attention": 2 * B * per_token * (n + 1),
        }
        read, written = cache_traffic(cost)
        for layer in (0, 1, 2):  # the Mamba states: read once, written once; the SSM state head by head
            assert read[f"kv_cache.{layer}.conv0"] == written[f"kv_cache.{layer}.conv0"] == B * 256 * BF16
            # each head's 32 x 8 through its view (recurrent_state[:, head]): the whole state once
            name = f"kv_cache.{layer}.state0"
            assert read[name] == written[name] == B * 2 * 32 * 8 * BF16
        for layer in (1, 2):  # each hybrid layer's own keys and values (the block's weights are shared)
            assert read[f"kv_cache.{layer}.keys"] == B * 2 * 16 * (n + 1) * BF16
            assert written[f"kv_cache.{layer}.keys"] == B * 2 * 16 * BF16
    assert short.flops.total() - long.flops.total() < 0  # only attention grows with the context
    # the two hybrid layers run the one shared block: its weights are counted once
    shared = [n for n, _ in llm.model.named_parameters() if "shared_transf.self_attn.q_proj" in n]
    assert len(shared) == 1
    llm.phase("prefill", seq_len=16, batch=B)
    # a step's multiply-adds a token. Each Mamba mixer (3): in_proj D x 2 * 64 = 4096, out_proj 64 x D =
    # 2048; per head (2) x_proj (dt_rank 2 + 2 * 8) x 32 = 576, dt_proj 32 x 2 = 64, the state times C 32 x 8
    # = 256 (matmul: 2 * 896 = 1792); the reference causal_conv1d_update convolves the 4 held and the new
    # column, 2 outputs of 64 channels x 4 taps (512). Each hybrid layer (2): the shared block's q (64 x 64),
    # k, v (64 x 32 each), o (64 x 32): 10240, its MLP 3 x 32 x 64 = 6144, its linear D x D = 1024, and
    # attention 4 heads x (L + 1) keys x (16 + 16). The head: D x V = 3200.
    for n in (SHORT, LONG):
        macs = llm.phase("decode", kv_len=n, batch=B, preset="macs").flops.by_operator()
        assert macs["linear"] == B * (3 * (4096 + 2048) + 2 * (10240 + 6144 + 1024) + 3200) == 112_896
        assert macs["matmul"] == B * 3 * 2 * (576 + 64 + 256) == 10_752
        assert macs["conv"] == B * 3 * 2 * 64 * 4 == 3072
        assert macs["scaled_dot_product_attention"] == B * 2 * 4 * (n + 1) * 32


# ------------------------------------------------------------------------------------------------
# The model is left as it was
# ------------------------------------------------------------------------------------------------
class _Stop(Exception):
    pass


def _stop(*_: Any) -> None:
    raise _Stop


def test_analyzing_leaves_no_state_in_the_modules() -> None:
    griffin, rwkv = _griffin(), _rwkv()
    blocks = [layer.temporal_block for layer in griffin.model.model.layers[:2]]

    def clean() -> None:
        assert all(b.conv1d_state is None and b.rg_lru.recurrent_states is None for b in blocks)
        assert all(not b._forward_hooks for b in blocks)
        assert rwkv.model.rwkv.layers_are_rescaled is False  # its weights never rescaled in place
        assert "kv_cache" not in griffin.model._modules and "kv_cache" not in rwkv.model._modules

    clean()  # building the cache specs ran a forward: nothing of it is left
    for llm in (griffin, rwkv):
        llm.phase("prefill", seq_len=4)
        llm.phase("decode", kv_len=4)
    clean()
    for llm in (griffin, rwkv):  # a phase failing half-way
        hook = llm.model.get_output_embeddings().register_forward_hook(_stop)
        with pytest.raises(Exception):  # noqa: B017 (the tracer may wrap it)
            llm.phase("decode", kv_len=4)
        hook.remove()
    clean()
