"""The engine plans of the dense decoders transformers writes no ``tp_plan`` for, as vLLM splits them:
GPT-2, GPT-BigCode (StarCoder, SantaCoder), Falcon, BLOOM, OPT, MPT, Persimmon (Fuyu's decoder) and StableLM.

Every one is an attention block split by heads (its q, k and v projections, fused or not, column-wise;
its output projection row-wise) and an MLP split by channels (up column-wise, down row-wise): two
all-reduces a layer, Falcon's parallel attention and MLP one. The token embedding is split by vocabulary
rows and the output projection (the same weight where they are tied) by vocabulary columns; learned
position tables (GPT-2's ``wpe``, OPT's ``embed_positions``), OPT's ``project_in`` and ``project_out`` and
every norm are whole on every rank. Fused projections are split by heads whatever their layout: GPT-2's
``Conv1D`` stores its weight ``[in, out]`` and packs q, k and v one after the other (vLLM transposes it and
loads each part's heads), BLOOM's and Persimmon's interleave them per head; opcount counts a split
weight's share, ``1 / tp`` of its bytes and of its work, whichever its layout.

A multi-query block keeps one KV head, which vLLM copies on every rank (QKVParallelLinear with fewer KV
heads than ranks): the cache holds it whole on each device, and so do the key and value columns of the fused
projection (``2 x head_dim`` of ``hidden + 2 x head_dim``), the query's split (:mod:`..kv_projections`):
GPT-BigCode (``num_key_value_heads`` 1) and Falcon's ``multi_query`` (its KV heads read from the cache probe).

:data:`REFUSALS` names what vLLM does not run, or opcount does not follow, in a family it otherwise splits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .styles import COL, PACKED, ROW, UNREDUCED, WHOLE, Supplement, vocabulary

_MODELS = "vllm/model_executor/models"


def _layer(model: str, *blocks: tuple[str, dict[str, str], str]) -> tuple[Supplement, ...]:
    """A layer's blocks, each ``(block, styles, vLLM class)``, as ``vllm/model_executor/models/<model>.py`` builds them."""
    return tuple(Supplement(block, styles, f"{_MODELS}/{model}.py ({cls})") for block, styles, cls in blocks)


def _gpt2_like(model: str, attention: str, mlp: str) -> tuple[Supplement, ...]:
    """GPT-2's layout (``h.*.attn.c_attn`` with q, k and v packed, ``c_proj``; ``h.*.mlp.c_fc``, ``c_proj``)."""
    return (
        *_layer(
            model,
            ("h.*.attn", {"c_attn": PACKED, "c_proj": ROW}, attention),
            ("h.*.mlp", {"c_fc": COL, "c_proj": ROW}, mlp),
        ),
        *vocabulary("wte", f"{_MODELS}/{model}.py"),
    )


def _falcon(config: Any) -> tuple[Supplement, ...]:
    """Falcon: with parallel attention (and in the new decoder architecture) the attention's ``dense`` and
    the MLP's ``dense_4h_to_h`` leave their outputs partial and the layer all-reduces their sum once
    (FalconDecoderLayer's ``reduce_row_parallel_results``); otherwise each reduces its own."""
    parallel = bool(getattr(config, "parallel_attn", True)) or bool(getattr(config, "new_decoder_architecture", False))
    attention = "FalconAttention: QKVParallelLinear, RowParallelLinear" + (", reduce_results=False" if parallel else "")
    return (
        *_layer(
            "falcon",
            # q, k and v interleaved per KV group (new architecture) or per head: a split by heads
            ("h.*.self_attention", {"query_key_value": COL, "dense": UNREDUCED if parallel else ROW}, attention),
            ("h.*.mlp", {"dense_h_to_4h": COL, "dense_4h_to_h": ROW}, "FalconMLP"),
        ),
        *vocabulary("word_embeddings", f"{_MODELS}/falcon.py"),
    )


_OPT = (
    *_layer(
        "opt",
        ("layers.*.self_attn", {"q_proj": COL, "k_proj": COL, "v_proj": COL, "out_proj": ROW}, "OPTAttention"),
        # fc1 and fc2 are the decoder layer's own children: the layer runs on a slice, its norms whole
        (
            "layers.*",
            {"fc1": COL, "fc2": ROW, "self_attn_layer_norm": WHOLE, "final_layer_norm": WHOLE},
            "OPTDecoderLayer: ColumnParallelLinear, RowParallelLinear",
        ),
    ),
    *vocabulary("embed_tokens", f"{_MODELS}/opt.py"),
)

_BLOOM = (
    *_layer(
        "bloom",
        # q, k and v interleaved per head; the ALiBi slopes of the rank's heads
        ("h.*.self_attention", {"query_key_value": COL, "dense": ROW}, "BloomAttention"),
        ("h.*.mlp", {"dense_h_to_4h": COL, "dense_4h_to_h": ROW}, "BloomMLP"),
    ),
    *vocabulary("word_embeddings", f"{_MODELS}/bloom.py"),
)

_MPT = (
    *_layer(
        "mpt",
        ("blocks.*.attn", {"Wqkv": PACKED, "out_proj": ROW}, "MPTAttention"),
        ("blocks.*.ffn", {"up_proj": COL, "down_proj": ROW}, "MPTMLP"),
    ),
    *vocabulary("wte", f"{_MODELS}/mpt.py"),
)

_PERSIMMON = (
    *_layer(
        "persimmon",
        # q, k and v interleaved per head; q_layernorm and k_layernorm (one head wide) whole on every rank
        ("layers.*.self_attn", {"query_key_value": COL, "dense": ROW}, "PersimmonAttention"),
        ("layers.*.mlp", {"dense_h_to_4h": COL, "dense_4h_to_h": ROW}, "PersimmonMLP"),
    ),
    *vocabulary("embed_tokens", f"{_MODELS}/persimmon.py"),
)

_STABLELM = (
    *_layer(
        "stablelm",
        ("layers.*.self_attn", {"q_proj": COL, "k_proj": COL, "v_proj": COL, "o_proj": ROW}, "StablelmAttention"),
        ("layers.*.mlp", {"gate_proj": COL, "up_proj": COL, "down_proj": ROW}, "StablelmMLP"),
    ),
    *vocabulary("embed_tokens", f"{_MODELS}/stablelm.py"),
)

# config.model_type -> its blocks as vLLM splits them (a function of the config where they depend on it)
DENSE: dict[str, tuple[Supplement, ...] | Callable[[Any], tuple[Supplement, ...]]] = {
    "gpt2": _gpt2_like("gpt2", "GPT2Attention: QKVParallelLinear, RowParallelLinear", "GPT2MLP"),
    "gpt_bigcode": _gpt2_like(
        "gpt_bigcode", "GPTBigCodeAttention: QKVParallelLinear, one KV head copied when multi_query", "GPTBigMLP"
    ),
    "falcon": _falcon,
    "bloom": _BLOOM,
    "opt": _OPT,
    "mpt": _MPT,
    "persimmon": _PERSIMMON,
    "stablelm": _STABLELM,
}


def _falcon_refusal(config: Any, tp: int) -> str | None:
    """Falcon's new decoder architecture caches its ``num_kv_heads`` copied to every query head in transformers,
    so the cache probe does not see them: a ``tp`` that does not divide them is refused, naming the field
    (vLLM copies them where ``tp`` is a multiple of them, which opcount would not see). ``multi_query``'s one KV head is probed as it is, and copied as vLLM copies it."""
    kv = getattr(config, "num_kv_heads", None)
    if getattr(config, "new_decoder_architecture", False) and isinstance(kv, int) and kv % tp:
        return (
            f"does not divide {type(config).__name__}'s num_kv_heads ({kv}): opcount splits Falcon's KV heads "
            "evenly over the devices and models no copies of them"
        )
    return None


def _stablelm_refusal(config: Any, tp: int) -> str | None:
    if getattr(config, "qk_layernorm", False):
        return (
            f"{type(config).__name__}'s qk_layernorm: vLLM's StablelmAttention has no per-head query and key norms "
            "(StableLM 2 12B), so no engine plan says how they split"
        )
    return None


# config.model_type -> why a --tp above 1 is refused for this config, or None
REFUSALS: dict[str, Callable[[Any, int], str | None]] = {"falcon": _falcon_refusal, "stablelm": _stablelm_refusal}
