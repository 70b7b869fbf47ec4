"""Caches per layer type against closed forms worked by hand on tiny configs: what each layer holds
(the footprint), what a decode step reads and writes of it (the trace's bytes on the ``kv_cache.*``
tensors) and the attention multiply-adds, at a cache longer than the windows.

Notation: n layers, h query heads, g KV heads, e head dim, B batch, L cached tokens, one new token
per decode step (so a full-attention layer attends to L + 1 positions), W a sliding window, C an
attention chunk. bf16 everywhere: 2 bytes per element. Attention's products count every (query,
key) pair once each, ``e`` multiply-adds for q.k and ``e`` for attention x v; its softmax costs
``3 * S - 1`` flops for a row of S scores (opcount's convention, docs/operators.md).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="layer types need transformers 5")

from opcount.errors import OpcountError  # noqa: E402
from opcount.llm.cache.names import CACHE_NAMES  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.deploy.cache_shares import part_of  # noqa: E402
from opcount.llm.phases import PhaseCost  # noqa: E402
from opcount.memory import MemoryTrafficAnalysis  # noqa: E402

D, F, H, G, E, V = 64, 128, 4, 2, 16, 100
BF16 = 2
ATTENTION = {
    "hidden_size": D,
    "intermediate_size": F,
    "num_attention_heads": H,
    "num_key_value_heads": G,
    "head_dim": E,
    "vocab_size": V,
}


def cache_traffic(cost: PhaseCost) -> tuple[Counter[str], Counter[str]]:
    """Bytes read and written of each cache tensor (named ``kv_cache.L.*``) in the phase's trace,
    directly or through a view of it (``named_views``, as the phase prices them)."""
    read: Counter[str] = Counter()
    written: Counter[str] = Counter()
    for _, t in MemoryTrafficAnalysis(cost.flops.trace(), named_views=CACHE_NAMES).traffic_per_call():
        for side, into in ((t.read, read), (t.write, written)) if t is not None else ():
            for a in side:
                if a.tensor is not None and a.tensor.param and a.tensor.param.startswith("kv_cache."):
                    into[a.tensor.param] += int(a.nbytes)
    return read, written


def attention_flops(batch: int, rows: int, *keys: int, width: int = 2 * E) -> int:
    """Products and softmax of one query per row over ``keys`` positions in each listed layer."""
    return sum(batch * rows * (k * width + 3 * k - 1) for k in keys)


# ------------------------------------------------------------------------------------------------
# Sliding window: Mistral v0.1 (every layer) and Gemma-3 (local then global)
# ------------------------------------------------------------------------------------------------
W, L, B = 8, 20, 2  # the cache (20) is longer than the window (8)


def test_mistral_sliding_window_holds_and_reads_the_window() -> None:
    llm = CausalLM(transformers.MistralConfig(**ATTENTION, num_hidden_layers=2, sliding_window=W))
    cost = llm.phase("decode", kv_len=L, batch=B)
    # per layer, sequence and token: keys and values of g heads of e = 2 * 2 * 16 = 64 elements
    per_layer = B * W * 2 * G * E * BF16  # 2 * 8 * 64 * 2 = 2048 bytes: the window, not L + 1 = 21 tokens
    assert cost.memory.kv_cache_by_type == {"sliding_attention": 2 * per_layer}
    assert cost.memory.kv_cache == 4096
    read, written = cache_traffic(cost)
    assert sum(read.values()) == 2 * per_layer  # the window read once per step
    assert sum(written.values()) == 2 * B * 1 * 2 * G * E * BF16  # the new token: 2 layers * 2 * 64 * 2 = 512
    # h query heads over the W positions of the window: 2 * (4 * 8 * 32 + 4 * (3 * 8 - 1)) per sequence
    assert cost.flops.by_operator()["scaled_dot_product_attention"] == attention_flops(B, H, W, W)
    # any context length is accepted: the window is a rolling buffer
    long = llm.phase("decode", kv_len=100_000, batch=B)
    assert long.memory.kv_cache == 4096
    # a prompt longer than the window leaves the window in the cache
    assert llm.phase("prefill", seq_len=L).memory.kv_cache == 2 * W * 2 * G * E * BF16


def block_flops(rows: int, keys: int, blocks: int = 1) -> int:
    """``blocks`` attention blocks of ``rows`` queries over ``keys`` keys, per head, every pair counted."""
    return blocks * (rows * keys * 2 * E + rows * (3 * keys - 1))


def test_mistral_prompt_longer_than_the_window_attends_by_blocks() -> None:
    llm = CausalLM(transformers.MistralConfig(**ATTENTION, num_hidden_layers=2, sliding_window=W))
    cost = llm.phase("prefill", seq_len=L)
    # 20 queries in blocks of 8: the first block causally over itself (8 x 8), the second over the
    # block before and itself (8 x 16), the last 4 queries over the 8 + 4 keys they can reach (4 x 12):
    # 240 pairs per head, where the whole prompt's square would be 400
    per_head = block_flops(W, W) + block_flops(W, 2 * W) + block_flops(4, W + 4)
    assert cost.flops.by_operator()["scaled_dot_product_attention"] == 2 * H * per_head
    assert cost.memory.kv_cache == 2 * W * 2 * G * E * BF16  # the last window is what the cache keeps


def test_gemma3_local_and_global_layers() -> None:
    config = transformers.Gemma3TextConfig(
        **ATTENTION, num_hidden_layers=2, sliding_window=W, layer_types=["sliding_attention", "full_attention"]
    )
    cost = CausalLM(config).phase("decode", kv_len=L, batch=B)
    token = 2 * G * E * BF16  # 128 bytes per token per layer
    assert cost.memory.kv_cache_by_type == {"sliding_attention": B * W * token, "full_attention": B * (L + 1) * token}
    read, _ = cache_traffic(cost)
    assert read["kv_cache.0.keys"] + read["kv_cache.0.values"] == B * W * token  # 2048
    assert read["kv_cache.1.keys"] + read["kv_cache.1.values"] == B * (L + 1) * token  # 5376
    assert cost.flops.by_operator()["scaled_dot_product_attention"] == attention_flops(B, H, W, L + 1)


def test_gpt_oss_sliding_layers_and_sinks() -> None:
    config = transformers.GptOssConfig(
        **ATTENTION,
        num_hidden_layers=2,
        sliding_window=W,
        layer_types=["sliding_attention", "full_attention"],
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    cost = CausalLM(config).phase("decode", kv_len=L, batch=B)
    token = 2 * G * E * BF16
    assert cost.memory.kv_cache_by_type == {"sliding_attention": B * W * token, "full_attention": B * (L + 1) * token}
    ops = cost.flops.by_operator()
    assert ops["scaled_dot_product_attention"] == attention_flops(B, H, W, L + 1)
    # the learned sink of each head: exp(sink - row max) in each softmax row's sum, one row per
    # (sequence, head, new token) in each of the 2 layers: 2 * 2 * 4 = 16 exponentials
    assert ops["exp"] == 2 * B * H


# ------------------------------------------------------------------------------------------------
# Chunked attention: Llama-4 (a NoPE full-attention layer every 4th, chunked layers between)
# ------------------------------------------------------------------------------------------------
def test_llama4_chunked_layers_hold_the_current_chunk() -> None:
    c = 8
    config = transformers.Llama4TextConfig(
        **ATTENTION,
        intermediate_size_mlp=F,
        num_hidden_layers=4,
        attention_chunk_size=c,
        moe_layers=[],  # dense: the experts are another test's
    )
    llm = CausalLM(config)
    # Llama-4's no_rope_layer_interval (4): layers 0-2 are chunked with rope, layer 3 is global NoPE
    assert [layer.layer_type for layer in llm.caches.layers] == ["chunked_attention"] * 3 + ["full_attention"]
    cost = llm.phase("decode", kv_len=L, batch=B)
    # the new token is position 20, in the chunk [16, 24): positions 16..20, 5 tokens
    chunk = L + 1 - (L // c) * c
    assert chunk == 5
    token = 2 * G * E * BF16
    assert cost.memory.kv_cache_by_type == {
        "chunked_attention": 3 * B * chunk * token,
        "full_attention": B * 21 * token,
    }
    read, written = cache_traffic(cost)
    assert sum(read.values()) == B * (3 * chunk + 21) * token
    assert sum(written.values()) == 4 * B * token
    assert cost.flops.by_operator()["scaled_dot_product_attention"] == attention_flops(B, H, chunk, chunk, chunk, 21)
    # a prompt of 20: chunks [0, 8), [8, 16) and [16, 20), each causal over itself, in the 3 chunked
    # layers; the global layer over the whole prompt (20 x 20)
    prefill = llm.phase("prefill", seq_len=L)
    chunked = block_flops(c, c, blocks=2) + block_flops(4, 4)
    assert prefill.flops.by_operator()["scaled_dot_product_attention"] == H * (3 * chunked + block_flops(L, L))
    assert prefill.memory.kv_cache_by_type == {"chunked_attention": 3 * 4 * token, "full_attention": L * token}


# ------------------------------------------------------------------------------------------------
# Multi-head latent attention: DeepSeek-V3 (dense layers only: first_k_dense_replace = layers)
# ------------------------------------------------------------------------------------------------
RANK, ROPE, NOPE, VH = 32, 8, 16, 16


def deepseek_v3() -> Any:
    return transformers.DeepseekV3Config(
        hidden_size=D,
        intermediate_size=F,
        num_attention_heads=H,
        num_key_value_heads=H,
        vocab_size=V,
        num_hidden_layers=2,
        first_k_dense_replace=2,
        q_lora_rank=16,
        kv_lora_rank=RANK,
        qk_rope_head_dim=ROPE,
        qk_nope_head_dim=NOPE,
        v_head_dim=VH,
    )


def test_deepseek_v3_caches_the_latent_and_decodes_absorbed() -> None:
    cost = CausalLM(deepseek_v3()).phase("decode", kv_len=L, batch=B)
    latent = RANK + ROPE  # 40 elements per token per layer (DeepSeek-V3's 512 + 64 = 576)
    assert cost.memory.kv_cache_by_type == {"latent_attention": 2 * B * (L + 1) * latent * BF16}  # 6720
    read, written = cache_traffic(cost)
    assert sum(read.values()) == 2 * B * (L + 1) * latent * BF16  # read once per step, as keys and values at once
    assert sum(written.values()) == 2 * B * latent * BF16  # the new token's latent and rope key
    ops = cost.flops.by_operator()
    # absorbed: W_UK folded into the query (h * nope * rank per token) and W_UV into the output
    # (h * rank * v_head_dim), the h heads attending over the 40-wide latent of L + 1 = 21 positions;
    # the latent is the values too (its rope columns computed and dropped): 2 * 40 per pair
    assert ops["einsum"] == 2 * B * (H * NOPE * RANK + H * RANK * VH)  # 2 * 2 * (2048 + 2048) = 16384
    assert ops["scaled_dot_product_attention"] == 2 * B * H * (21 * 2 * latent + 3 * 21 - 1)  # 2 * 2 * 4 * 1742
    # W_UK and W_UV are kv_b_proj's weight seen per head: read once per step, as the weight it is
    weights = Counter[str]()
    for _, t in MemoryTrafficAnalysis(cost.flops.trace()).traffic_per_call():
        for a in t.read if t is not None else ():
            if a.tensor is not None and a.tensor.param and "kv_b_proj" in a.tensor.param:
                weights[a.tensor.param.partition("[")[0]] += int(a.nbytes)
    kv_b_proj = H * (NOPE + VH) * RANK * BF16  # 4 * 32 * 32 * 2 = 8192 bytes per layer
    assert weights == {f"model.layers.{i}.self_attn.kv_b_proj.weight": kv_b_proj for i in range(2)}


def test_deepseek_v3_prefill_expanded() -> None:
    s = 12
    cost = CausalLM(deepseek_v3()).phase("prefill", seq_len=s)
    assert cost.memory.kv_cache_by_type == {"latent_attention": 2 * s * (RANK + ROPE) * BF16}
    # expanded: per head keys of nope + rope and values of v_head_dim over the s x s pairs
    assert cost.flops.by_operator()["scaled_dot_product_attention"] == 2 * H * (
        s * s * (NOPE + ROPE + VH) + 3 * s * s - s
    )
    assert "einsum" not in cost.flops.by_operator()


# ------------------------------------------------------------------------------------------------
# State-space and hybrid layers
# ------------------------------------------------------------------------------------------------
def test_mamba_state_is_constant_and_read_and_written_once() -> None:
    config = transformers.MambaConfig(vocab_size=V, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2)
    llm = CausalLM(config)
    inner, conv_kernel = 2 * 32, 4  # expand * hidden; conv_kernel's default
    # per layer and sequence: the conv state (inner x conv_kernel) and the SSM state (inner x state_size),
    # as mamba_ssm's allocate_inference_cache and transformers store them
    state = (inner * conv_kernel + inner * 8) * BF16  # (256 + 512) * 2 = 1536 bytes
    short, long = (llm.phase("decode", kv_len=n, batch=B) for n in (L, 10 * L))
    for cost in (short, long):
        assert cost.memory.kv_cache_by_type == {"state": 2 * B * state}
        read, written = cache_traffic(cost)
        assert sum(read.values()) == sum(written.values()) == 2 * B * state
    assert short.flops.total() == long.flops.total()  # nothing grows with the context


def test_qwen3_next_hybrid_of_gated_deltanet_and_attention() -> None:
    config = transformers.Qwen3NextConfig(
        **ATTENTION,
        num_hidden_layers=2,
        layer_types=["linear_attention", "full_attention"],
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_conv_kernel_dim=4,
        num_experts=0,
    )
    cost = CausalLM(config).phase("decode", kv_len=L, batch=B)
    # gated DeltaNet: a conv over q, k, v (2 * 2 * 8 + 4 * 8 = 64 channels) x 4 taps and a
    # recurrent state per value head of k_dim x v_dim (4 * 8 * 8 = 256)
    state = (64 * 4 + 4 * 8 * 8) * BF16  # 1024 bytes per sequence
    token = 2 * G * E * BF16
    assert cost.memory.kv_cache_by_type == {"state": B * state, "full_attention": B * (L + 1) * token}
    read, written = cache_traffic(cost)
    assert read["kv_cache.0.conv0"] + read["kv_cache.0.state0"] == B * state
    assert written["kv_cache.0.conv0"] + written["kv_cache.0.state0"] == B * state
    assert cost.flops.by_operator()["scaled_dot_product_attention"] == attention_flops(B, H, L + 1)


def test_falcon_h1_layers_run_attention_beside_mamba2() -> None:
    config = transformers.FalconH1Config(
        **ATTENTION,
        num_hidden_layers=2,
        mamba_d_ssm=64,
        mamba_n_heads=4,
        mamba_d_head=16,
        mamba_n_groups=1,
        mamba_d_state=8,
        mamba_d_conv=4,
    )
    cost = CausalLM(config).phase("decode", kv_len=L, batch=B)
    # Mamba-2 (mamba_ssm's allocate_inference_cache): a conv state over x, B and C, 64 + 2 * 1 * 8 = 80
    # channels x 4 taps, and an SSM state of heads x head_dim x d_state = 4 * 16 * 8 = 512, per sequence
    state = (80 * 4 + 4 * 16 * 8) * BF16  # 1664 bytes
    token = 2 * G * E * BF16
    assert cost.memory.kv_cache_by_type == {"full_attention": 2 * B * (L + 1) * token, "state": 2 * B * state}
    read, written = cache_traffic(cost)
    assert sum(read.values()) == 2 * B * ((L + 1) * token + state)  # the tokens and the state, once
    assert sum(written.values()) == 2 * B * (token + state)


def test_each_cache_tensor_is_of_the_part_its_name_says() -> None:
    # Falcon-H1's layers hold keys and values beside a Mamba-2 mixer's conv and SSM states: the deployment
    # splits each by the part its name says (opcount.llm.cache.names), read from the traced names
    config = transformers.FalconH1Config(
        **ATTENTION, num_hidden_layers=2, mamba_d_ssm=64, mamba_n_heads=4, mamba_d_head=16, mamba_n_groups=1,
        mamba_d_state=8, mamba_d_conv=4,
    )  # fmt: skip
    read, _ = cache_traffic(CausalLM(config).phase("decode", kv_len=L, batch=B))
    parts = {name: part_of(name) for name in read}
    assert parts == {
        **{f"kv_cache.{i}.{n}": "attention" for i in (0, 1) for n in ("keys", "values")},
        **{f"kv_cache.{i}.{n}": "state" for i in (0, 1) for n in ("conv0", "state0")},
    }
    # a latent, a DSA layer's views of it, its indexer keys, a state part kept in float32
    assert [part_of(f"kv_cache.3.{n}") for n in ("latent", "latent[dense]", "index_keys", "state1_float32")] == [
        "latent",
        "latent",
        "indexer",
        "state",
    ]
    # a name the cache does not give is no part: refused, not guessed from its first letters
    with pytest.raises(OpcountError, match=r"kv_cache\.0\.conv_weight: a cache tensor opcount does not know"):
        part_of("kv_cache.0.conv_weight")


def test_unknown_layer_type_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.cache_utils as cache_utils

    def types(config: Any) -> tuple[list[str], list[dict[str, Any]]]:
        return ["full_attention", "heavily_compressed_attention"], [{}, {}]

    monkeypatch.setattr(cache_utils, "get_layer_types_and_kwargs", types)
    config = transformers.LlamaConfig(**ATTENTION, num_hidden_layers=2)
    with pytest.raises(OpcountError, match="LlamaConfig: layer 1 has a cache of type 'heavily_compressed_attention'"):
        CausalLM(config)


@pytest.mark.parametrize("length", [8, 20, 24, 5 + 16])
def test_block_attention_equals_the_masked_square(length: int) -> None:
    # the reference: one attention over the whole prompt with the layer's mask spelled out
    import torch

    from opcount.llm.attention.windows import chunked_attention, sliding_attention

    size, g = 8, torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, length, 16, generator=g)
    k, v = (torch.randn(2, 2, length, 16, generator=g) for _ in range(2))
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    sliding_mask = (j <= i) & (j > i - size)
    chunk_mask = (j <= i) & (j // size == i // size)
    for run, mask in ((sliding_attention, sliding_mask), (chunked_attention, chunk_mask)):
        expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        torch.testing.assert_close(run(size, q, k, v, None), expected)


def test_command_line_breaks_the_cache_down(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from opcount.cli import main

    hf = ["--hf-config", "num_hidden_layers=2", "--hf-config", f"sliding_window={W}"]
    for key, value in {**ATTENTION, "layer_types": '["sliding_attention","full_attention"]'}.items():
        hf += ["--hf-config", f"{key}={value}"]
    args = ["hf:Gemma3TextConfig", *hf, "--phase", "decode", "--kv-len", str(L), "--batch", str(B)]
    assert main([*args, "--format", "json"]) == 0
    memory = json.loads(capsys.readouterr().out)["llm"]["memory"]
    token = 2 * G * E * BF16
    assert memory["kv_cache_by_type"] == {"sliding_attention": B * W * token, "full_attention": B * (L + 1) * token}
    assert memory["kv_cache"] == B * (W + L + 1) * token  # 2 * 29 * 128 = 7424
    assert main([*args, "--depth", "0"]) == 0
    assert "KV cache 7.42 KB (sliding_attention 2.05 KB, full_attention 5.38 KB)" in capsys.readouterr().out


@pytest.mark.parametrize("family", ["mistral", "llama4"])
def test_generation_across_a_window_or_a_chunk_is_the_sum_of_its_steps(family: str) -> None:
    # the reference: every decode step traced on its own and summed
    from opcount.llm.generation import generation

    if family == "mistral":  # the window (8) fills at the 4th of 10 steps after a prompt of 4
        config: Any = transformers.MistralConfig(**ATTENTION, num_hidden_layers=2, sliding_window=W)
    else:  # a chunk (8) starts at the 4th step, the cache back to 1 token in the chunked layers
        config = transformers.Llama4TextConfig(
            **ATTENTION, intermediate_size_mlp=F, num_hidden_layers=4, attention_chunk_size=8, moe_layers=[]
        )
    llm = CausalLM(config)
    prompt, steps = 4, 10
    gen = generation(llm, prompt, steps, hardware="h100-sxm")
    each = [llm.phase("decode", kv_len=prompt + j, hardware="h100-sxm") for j in range(steps)]
    assert gen.decode_flops == sum(p.flops.total() for p in each)
    assert gen.decode_time == pytest.approx(sum(p.time or 0.0 for p in each), rel=1e-12)
    assert gen.memory.kv_cache == max(p.memory.kv_cache for p in each)
