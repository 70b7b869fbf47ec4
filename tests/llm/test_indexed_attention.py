"""DeepSeek sparse attention (transformers' ``indexed_attention`` layers: DeepSeek-V3.2, GLM-5, HY-V4)
against closed forms worked by hand on a tiny DeepSeek-V3.2 config.

Notation: D hidden size, F MLP width, H query heads, QR query latent (``q_lora_rank``), R KV latent
(``kv_lora_rank``), P rope width, N nope width, VH value width, IH indexer heads, ID indexer head
width, K ``index_topk``, V vocabulary, B batch, S prompt, L cached tokens, T = L + 1 positions a
decode step scores. Multiply-adds (the ``macs`` preset: products only). bf16: 2 bytes an element.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
pytest.importorskip("transformers.cache_utils", reason="layer types need transformers 5")

from opcount.errors import OpcountError  # noqa: E402
from opcount.llm.attention.indexed import index_key_bytes  # noqa: E402
from opcount.llm.causal_lm import CausalLM  # noqa: E402
from opcount.llm.generation import generation  # noqa: E402
from opcount.llm.kernels.estimate import ATTENTION_KINDS, attention_work  # noqa: E402
from opcount.llm.phases import PhaseCost  # noqa: E402
from opcount.llm.precision.dtypes import Precision, pricing_for  # noqa: E402
from opcount.memory import MemoryTrafficAnalysis  # noqa: E402
from tests.llm.test_caches import cache_traffic  # noqa: E402

D, F, H, QR, R, P, N, VH, IH, ID, K, V = 64, 128, 4, 16, 32, 8, 16, 16, 2, 16, 8, 100
LAYERS, BF16 = 2, 2
HW = "h100-sxm"


def tiny(**overrides: Any) -> Any:
    values: dict[str, Any] = {
        "vocab_size": V,
        "hidden_size": D,
        "intermediate_size": F,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": H,
        "num_key_value_heads": H,
        "q_lora_rank": QR,
        "kv_lora_rank": R,
        "qk_rope_head_dim": P,
        "qk_nope_head_dim": N,
        "v_head_dim": VH,
        "index_n_heads": IH,
        "index_head_dim": ID,
        "index_topk": K,
        "first_k_dense_replace": LAYERS,  # dense MLPs: the mixture of experts is tested on its own below
    }
    return transformers.DeepseekV32Config(**(values | overrides))


@pytest.fixture(scope="module")
def llm() -> CausalLM:
    return CausalLM(tiny())


# per token and layer: the linear layers' multiply-adds (kv_b_proj runs absorbed, as einsums)
ATTN_LINEAR = D * QR + QR * H * (N + P) + D * (R + P) + H * VH * D  # q_a, q_b, kv_a, o: 1024 + 1536 + 2560 + 4096
INDEXER_LINEAR = QR * IH * ID + D * ID + D * IH  # wq_b, wk, weights_proj: 512 + 1024 + 128
LAYER_LINEAR = ATTN_LINEAR + INDEXER_LINEAR + 3 * D * F  # 9216 + 1664 + 24576 = 35456
ABSORB = H * N * R + H * R * VH  # W_UK into the query, W_UV out of the latent: 2048 + 2048
SCORE = IH * ID + IH  # the indexer per token scored: its heads' dot products, their weighted sum: 34
PAIR = H * 2 * (R + P)  # one (query, key) pair of the absorbed attention, the latent keys and values: 320


def macs(phase: PhaseCost) -> int:
    return int(phase.flops.total())


def test_kv_cache_per_layer_type(llm: CausalLM) -> None:
    # vLLM's DeepSeek-V3.2 indexer cache: 128 float8 elements and one float32 scale = 132 bytes a token
    assert index_key_bytes(128) == 132
    assert index_key_bytes(ID) == 16 + 4  # the tiny config's 16-wide key: one scale too
    b, cached = 2, 20
    cost = llm.phase("decode", kv_len=cached, batch=b)
    t = cached + 1
    latent = LAYERS * b * t * (R + P) * BF16  # 2 * 2 * 21 * 40 * 2 = 6720
    keys = LAYERS * b * t * (ID + 4)  # 2 * 2 * 21 * 20 = 1680, whatever the KV dtype
    assert cost.memory.kv_cache_by_type == {"latent_attention": latent, "indexer_keys": keys}
    assert cost.memory.kv_cache == 6720 + 1680
    fp8 = CausalLM(tiny(), Precision(kv="fp8")).phase("decode", kv_len=cached, batch=b)
    assert fp8.memory.kv_cache_by_type == {"latent_attention": latent // 2, "indexer_keys": keys}


def test_prefill_multiply_adds_and_the_exact_sparse_sum(llm: CausalLM) -> None:
    b, s = 2, 12  # a prompt longer than K = 8
    cost = llm.phase("prefill", seq_len=s, batch=b, preset="macs", hardware=HW)
    ops = cost.flops.by_operator()
    assert ops["linear"] == b * (LAYERS * s * LAYER_LINEAR + D * V)  # 2 * (2 * 12 * 35456 + 6400) = 1714688
    assert ops["einsum"] == b * LAYERS * s * ABSORB  # absorbed in a prompt too (FlashMLA's sparse prefill)
    assert ops["matmul"] == b * LAYERS * SCORE * s * s  # the indexer scores all 12 x 12 (query, key) pairs: 19584
    # queries 0..7 see at most K tokens: a causal block of 8 (counted whole, 64 pairs, as opcount counts
    # causal attention); queries 8..11 attend K = 8 latents each: 32 pairs
    assert ops["scaled_dot_product_attention"] == b * LAYERS * PAIR * (8 * 8 + 4 * 8)  # 122880
    assert macs(cost) == 1714688 + 196608 + 19584 + 122880
    # the kernels compute the kept pairs only: query i over min(i + 1, K) keys, 1 + ... + 8 + 4 * 8 = 68
    kept = sum(min(i + 1, K) for i in range(s))
    assert kept == 68
    calls = [c for c in cost.flops.trace().calls if c.kind in ATTENTION_KINDS]
    assert sum(attention_work(c, causal=True)[0] for c in calls) == b * LAYERS * H * kept * 2 * (R + P)  # 87040


@pytest.mark.parametrize(("cached", "attended"), [(4, 5), (7, 8), (20, K)])
def test_decode_attends_min_t_k_and_the_indexer_scores_all(llm: CausalLM, cached: int, attended: int) -> None:
    b, t = 2, cached + 1
    cost = llm.phase("decode", kv_len=cached, batch=b, preset="macs")
    ops = cost.flops.by_operator()
    assert ops["linear"] == b * (LAYERS * LAYER_LINEAR + D * V)  # 154624
    assert ops["einsum"] == b * LAYERS * ABSORB  # 16384
    assert ops["matmul"] == b * LAYERS * SCORE * t  # the indexer over every token held: 136 t
    assert ops["scaled_dot_product_attention"] == b * LAYERS * PAIR * attended  # min(T, K) latents
    assert macs(cost) == 154624 + 16384 + b * LAYERS * (SCORE * t + PAIR * attended)  # 184104 at L = 20


def test_decode_reads_the_top_k_latents_and_every_indexer_key(llm: CausalLM) -> None:
    b, cached = 2, 20
    cost = llm.phase("decode", kv_len=cached, batch=b, hardware=HW)
    read, written = cache_traffic(cost)
    per_layer = {
        "latent[chosen]": b * K * (R + P) * BF16,  # the 8 chosen latents (not the 21 held): 1280
        "index_keys": b * (cached + 1) * ID * BF16,  # as traced (bf16): 1344
    }
    assert read == {f"kv_cache.{i}.{name}": n for i in range(LAYERS) for name, n in per_layer.items()}
    assert written == {
        f"kv_cache.{i}.{name}": b * n * BF16
        for i in range(LAYERS)
        for name, n in (("latent", R + P), ("index_keys", ID))
    }
    # priced as stored: the indexer keys at 20 bytes per 16 elements, the latent at the KV dtype
    price = pricing_for(llm.model, llm.precision)
    priced: Counter[str] = Counter()
    for _, t in MemoryTrafficAnalysis(cost.flops.trace()).traffic_per_call():
        for a in t.read if t is not None else ():
            if a.tensor is not None and a.tensor.param and a.tensor.param.startswith("kv_cache.0."):
                size = price(a.tensor)
                assert size is not None
                priced[a.tensor.param] += math.prod(a.tensor.shape) * size
    assert priced == {"kv_cache.0.latent[chosen]": 1280, "kv_cache.0.index_keys": b * (cached + 1) * 20}


def test_generation_across_the_top_k_is_the_sum_of_its_steps(llm: CausalLM) -> None:
    prompt, steps = 4, 8  # the attention stops growing at the 4th step (its cache holds K = 8 tokens)
    gen = generation(llm, prompt, steps, hardware=HW)
    each = [llm.phase("decode", kv_len=prompt + j, hardware=HW) for j in range(steps)]
    assert gen.decode_flops == sum(p.flops.total() for p in each)
    assert gen.decode_time == pytest.approx(sum(p.time or 0.0 for p in each), rel=1e-12)
    assert gen.memory.kv_cache == max(p.memory.kv_cache for p in each)


def test_sweep_across_the_top_k() -> None:
    from tests.llm.test_sweep import check_phase

    # regions: below K - 1 cached tokens (dense), at K - 1 and K, past K (capped). The sweep cuts its
    # points by the config's expert counts whether or not a layer runs experts: one of one here
    llm = CausalLM(tiny(n_routed_experts=1, num_experts_per_tok=1, n_group=1, topk_group=1))
    # (one batch: at batch 1 the absorbed attention's output is laid out as the model wants, no copy)
    check_phase(llm, "decode", [(3, 1, k) for k in (2, 3, 4, 5, 6, 7, 8, 9, 12, 20, 30, 40)], rebuilt=4)
    check_phase(llm, "prefill", [(2, t, 0) for t in (2, 3, 4, 5, 8, 9, 12, 14, 20, 30)], rebuilt=4)


def test_active_parameters_of_a_mixture_of_experts_layer() -> None:
    # layer 0 dense, layer 1 with 4 routed experts (2 a token) and 1 shared, 32 wide
    config = tiny(first_k_dense_replace=1, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2)
    config.n_shared_experts, config.n_group, config.topk_group = 1, 1, 1
    llm = CausalLM(config)
    attention = D * QR + QR + QR * H * (N + P) + D * (R + P) + R + R * H * (N + VH) + H * VH * D  # 13360
    indexer = QR * IH * ID + D * ID + 2 * ID + D * IH  # its LayerNorm has a bias: 1696
    expert = 2 * D * 32 + 32 * D  # 6144
    layer0 = attention + indexer + 2 * D + 3 * D * F  # 39760
    layer1 = attention + indexer + 2 * D + 4 * expert + 4 * D + expert  # experts, router, shared: 46160
    assert llm.parameters == layer0 + layer1 + V * D + D + D * V  # 98784
    assert llm.active_parameters == llm.parameters - (4 - 2) * expert  # 86496


def test_hy_v4_shared_indexer_layers_hold_no_indexer_keys() -> None:
    config = transformers.HYV4Config(
        vocab_size=V, hidden_size=D, intermediate_size=F, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=H, num_key_value_heads=H, q_lora_rank=QR, kv_lora_rank=R, qk_rope_head_dim=P,
        qk_nope_head_dim=N, v_head_dim=VH, index_n_heads=IH, index_head_dim=ID, index_topk=K,
        indexer_types=["full", "shared"], pad_token_id=0,
    )  # fmt: skip
    b, cached = 1, 20
    cost = CausalLM(config).phase("decode", kv_len=cached, batch=b, preset="macs")
    t = cached + 1
    assert cost.memory.kv_cache_by_type == {"latent_attention": 2 * t * (R + P) * BF16, "indexer_keys": t * (ID + 4)}
    # layer 1 reuses layer 0's selection: one indexer scores, both layers attend to K latents
    assert cost.flops.by_operator()["matmul"] == SCORE * t
    assert cost.flops.by_operator()["scaled_dot_product_attention"] == 2 * PAIR * K


def test_an_indexer_opcount_does_not_recognise_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from opcount.llm.attention import indexed

    monkeypatch.setattr(indexed, "is_indexer", lambda module: False)
    with pytest.raises(
        OpcountError,
        match=r"layer 0 is indexed_attention but model.layers.0.self_attn.indexer "
        r"\(DeepseekV32Indexer\) is not DeepSeek sparse attention's",
    ):
        CausalLM(tiny())


def test_dots3_sliding_latent_layers_hold_their_window() -> None:
    # Dots 3: a DSA layer (as above) then a sliding-window latent layer with its own sizes: 2 heads,
    # a 48-wide latent and the 8-wide rope key, a window of 4
    config = transformers.Dots3NoteTextConfig(
        vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=2, pad_token_id=0,
        layer_types=["indexed_attention", "sliding_attention"], mlp_layer_types=["dense", "dense"],
        num_attention_heads=H, num_key_value_heads=H, q_lora_rank=QR, kv_lora_rank=R, qk_rope_head_dim=P,
        qk_nope_head_dim=N, v_head_dim=VH, head_dim=N + P, index_n_heads=IH, index_head_dim=ID, index_topk=K,
        sliding_window=4, swa_num_attention_heads=2, swa_num_key_value_heads=2, swa_q_lora_rank=QR,
        swa_kv_lora_rank=48, swa_head_dim=N + P, swa_qk_nope_head_dim=N, swa_v_head_dim=VH,
    )  # fmt: skip
    b, cached = 2, 20
    cost = CausalLM(config).phase("decode", kv_len=cached, batch=b, preset="macs")
    assert cost.memory.kv_cache_by_type == {
        "latent_attention": b * (cached + 1) * (R + P) * BF16,  # 2 * 21 * 40 * 2 = 3360
        "sliding_attention": b * 4 * (48 + P) * BF16,  # the window's 4 latents, 56 wide: 896
        "indexer_keys": b * (cached + 1) * (ID + 4),  # 840
    }
    # the DSA layer over K latents, the sliding layer's 2 heads absorbed over its window's 4
    assert cost.flops.by_operator()["scaled_dot_product_attention"] == b * (PAIR * K + 2 * 4 * 2 * (48 + P))


def test_the_indexer_scores_and_their_weighted_sum_run_as_one_kernel(llm: CausalLM) -> None:
    # DeepGEMM's fp8_mqa_logits: the IH per-head scores of every token stay on chip
    cost = llm.phase("decode", kv_len=20, batch=2, hardware=HW)
    assert cost.schedule is not None
    calls = cost.flops.trace().calls
    for layer in range(LAYERS):
        scope = f"model.layers.{layer}.self_attn.indexer"
        products = [i for i, c in enumerate(calls) if c.kind == "aten::matmul" and c.scope[-1] == scope]
        assert len(products) == 2  # the scores, their weighted sum
        assert [set(products) <= set(k.calls) for k in cost.schedule.kernels].count(True) == 1


def test_a_prompts_indexer_kernel_computes_its_kept_pairs(llm: CausalLM) -> None:
    b, s = 2, 12
    cost = llm.phase("prefill", seq_len=s, batch=b, hardware=HW)
    assert cost.schedule is not None
    calls = cost.flops.trace().calls
    products = [i for i, c in enumerate(calls) if c.kind == "aten::matmul" and c.scope[-1].endswith(".indexer")]
    # the scores (IH * ID a pair) and their weighted sum (IH a pair) over 12 * 13 / 2 = 78 kept pairs, 2 flops
    # a multiply-add, where the trace counts the whole 12 x 12 square
    kept = s * (s + 1) // 2
    assert sum(cost.schedule.call_flops[i] for i in products) == 2 * b * LAYERS * SCORE * kept
    assert cost.flops.by_operator()["matmul"] == b * LAYERS * SCORE * s * s


def test_command_line_json_breaks_the_cache_down(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from opcount.cli import main

    hf: list[str] = []
    for key, value in tiny().to_dict().items():
        if key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                   "num_key_value_heads", "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                   "v_head_dim", "index_n_heads", "index_head_dim", "index_topk", "first_k_dense_replace"):  # fmt: skip
            hf += ["--hf-config", f"{key}={value}"]
    b, cached = 2, 20
    args = ["hf:DeepseekV32Config", *hf, "--phase", "decode", "--kv-len", str(cached), "--batch", str(b)]
    assert main([*args, "--format", "json"]) == 0
    memory = json.loads(capsys.readouterr().out)["llm"]["memory"]
    # 2 layers x 2 sequences x 21 positions: the latent 40 elements in bf16, the indexer key 16 + 4 bytes
    assert memory["kv_cache_by_type"] == {"latent_attention": 6720, "indexer_keys": 1680}
    assert memory["kv_cache"] == 2 * b * (cached + 1) * (40 * BF16 + 20)  # 8400
