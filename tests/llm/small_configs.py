"""transformers' decoder-only causal-LM configs, each made small: its defaults at 2 layers, or as
few layers as it takes for every layer type to appear once (a hybrid's attention and recurrent
layers, a model's full and sliding-window attention)."""

from __future__ import annotations

from typing import Any

from opcount.llm.models.build import is_causal_lm

# what a config calls its per-layer kinds: a settable list, or a property derived from other fields
_TYPE_FIELDS = ("layer_types", "layers_block_type")

_QWEN4_EXP_QSA: dict[str, Any] = {
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 8,
    "indexer_budget": 4,
    "indexer_compress_ratio": 2,
    "head_dim": 16,
    "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.25},
}

# fields a config's defaults leave missing or invalid, so that transformers itself cannot build a
# model from them (the same error without opcount); each set to its published model's value
_DEFAULTS_FIXED: dict[str, dict[str, Any]] = {
    # rope_parameters defaults to {} but the rotary embedding reads rope_parameters[layer_type]
    "CohereCompassTextConfig": {"rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 10000.0}}},
    # attn_config has no rope_theta, which the attention reads, and its clip_qkv of None makes the
    # attention's clamp raise (DBRX's config.json: 500000 and 8)
    "DbrxConfig": {"attn_config": {"rope_theta": 500000.0, "clip_qkv": 8.0}},
    # the experts' counts default to None (dots.llm1's config.json: 128 routed, 2 shared, top 6)
    "Dots1Config": {"n_routed_experts": 128, "n_shared_experts": 2, "num_experts_per_tok": 6},
    # num_experts_per_tok defaults to None, which the router's topk cannot take (DeepSeek-V2-Lite's
    # config.json, whose 64 routed and 2 shared experts are the defaults: 6)
    "DeepseekV2Config": {"num_experts_per_tok": 6},
    # head_dim defaults to None, which the attention raises to a power (hidden_size / heads: 128)
    "HunYuanDenseV1Config": {"head_dim": 128},
    "HunYuanMoEV1Config": {"head_dim": 128},
    "MinistralConfig": {"head_dim": 128},
    # layer_types defaults to None, which every layer indexes (LFM2-8B-A1B: convolutions and attention);
    # its first num_dense_layers (2) are dense: 1 keeps one mixture-of-experts layer in the small config
    "Lfm2MoeConfig": {"layer_types": ["conv", "full_attention"], "num_hidden_layers": 2, "num_dense_layers": 1},
    # num_key_value_heads defaults to None, which the attention divides by (Minitron-8B's config.json: 8)
    "NemotronConfig": {"num_key_value_heads": 8},
    # the QSA indexer's five fields default to None (no published config.json: transformers' own test
    # config, tests/models/qwen4_exp/test_modeling_qwen4_exp.py, and the head width and rotary fraction
    # it pairs them with, as the rotary part must fit the indexer's head)
    "Qwen4ExpTextConfig": _QWEN4_EXP_QSA,
    "Qwen4ExpConfig": {"text_config": _QWEN4_EXP_QSA},
}


# layer patterns a config needs beyond one layer of each type, set after the depth is chosen
_LAYERS_FIXED: dict[str, dict[str, Any]] = {
    # the shared attention block is built in every hybrid layer and tied from the first to the others:
    # with one hybrid layer transformers finds nothing to tie and refuses to build. Two hybrid layers
    # and one Mamba layer: 3 (transformers' own pattern, from attn_layer_period and attn_layer_offset,
    # starts [mamba, mamba, hybrid] and needs 4: num_hidden_layers=4, attn_layer_period=1, offset 0)
    "ZambaConfig": {"num_hidden_layers": 3, "layers_block_type": ["linear_attention", "hybrid", "hybrid"]},
}


def causal_lm_config_classes() -> list[type]:
    """Every config class transformers maps to a causal LM, masked LMs and encoder-decoders left
    out (``is_causal_lm``), once each, in transformers' order; those whose defaults fail to build
    are kept (:func:`small` raises for them, as the user would see)."""
    from opcount.transformers_internals import MODEL_FOR_CAUSAL_LM_MAPPING

    found = []
    for cls in dict.fromkeys(MODEL_FOR_CAUSAL_LM_MAPPING.keys()):
        try:
            config = cls()
        except Exception:  # the defaults do not validate: still one of the classes to report
            found.append(cls)
            continue
        if is_causal_lm(config):
            found.append(cls)
    return found


def small(cls: type) -> Any:
    """``cls`` with its defaults but its decoder at 2 layers, or at one layer of each type: built
    with those values as arguments, so that what the config derives from them is derived again."""
    config = cls(**_DEFAULTS_FIXED.get(cls.__name__, {}))
    text = config.get_text_config(decoder=True)
    kinds, field = _layer_kinds(text)
    values: dict[str, Any] = {"num_hidden_layers": 2}
    if field is not None:  # an alias given as an argument is set after the config derives from the field
        field = getattr(text, "attribute_map", {}).get(field, field)  # (Zamba2's hybrid_layer_ids)
    if len(set(kinds)) > 1 and field is not None and _settable(text, field):
        values[field] = list(dict.fromkeys(kinds))  # one layer of each kind, in their first order
        values["num_hidden_layers"] = len(values[field])
    elif len(set(kinds)) > 1:  # derived from other fields: the shortest prefix holding every kind
        values["num_hidden_layers"] = next(n for n in range(2, len(kinds) + 1) if set(kinds[:n]) == set(kinds))
    elif field is not None and _settable(text, field):
        values[field] = kinds[:1] * 2
    values |= _kv_sharing(text, values)
    values |= _LAYERS_FIXED.get(cls.__name__, {})
    try:
        if text is config:
            return cls(**{**_DEFAULTS_FIXED.get(cls.__name__, {}), **values})
        holder = next(name for name, value in vars(config).items() if value is text)  # text_config, mostly
        return cls(**{holder: {**text.to_dict(), **values}})
    except Exception:  # a field that must agree with the depth (GPT-Neo's attention_types): set after
        for name, value in values.items():
            setattr(text, name, value)
        return config


def _kv_sharing(text: Any, values: dict[str, Any]) -> dict[str, Any]:
    """Where the last ``num_kv_shared_layers`` layers reuse the KV of the last earlier layer of
    their type (Gemma 3n), the layers chosen twice: the first of each type producing, the second
    reusing; a per-layer list of the config's (Gemma 3n's ``activation_sparsity_pattern``) cut to
    the new depth."""
    shared, layers, field = getattr(text, "num_kv_shared_layers", 0), text.num_hidden_layers, "layer_types"
    if not (isinstance(shared, int) and 0 < shared < layers and isinstance(values.get(field), list)):
        return {}
    kinds = values[field]
    out: dict[str, Any] = {field: kinds * 2, "num_hidden_layers": 2 * len(kinds), "num_kv_shared_layers": len(kinds)}
    for name, value in text.to_dict().items():
        if isinstance(value, list) and len(value) == layers and name != field:
            out[name] = value[: 2 * len(kinds)]
    return out


def _layer_kinds(text: Any) -> tuple[list[Any], str | None]:
    for field in _TYPE_FIELDS:
        kinds = getattr(text, field, None)
        if isinstance(kinds, (list, tuple)) and kinds:
            return list(kinds), field
    return [], None


def _settable(config: Any, field: str) -> bool:
    field = getattr(config, "attribute_map", {}).get(field, field)  # an alias set is the field's own
    attribute = getattr(type(config), field, None)
    return not isinstance(attribute, property) or attribute.fset is not None
