"""transformers' decoder-only causal-LM configs, each made small: its defaults at 2 layers, or as
few layers as it takes for every layer type to appear once (a hybrid's attention and recurrent
layers, a model's full and sliding-window attention)."""

from __future__ import annotations

from typing import Any

from opcount.llm.model import is_causal_lm

# what a config calls its per-layer kinds: a settable list, or a property derived from other fields
_TYPE_FIELDS = ("layer_types", "layers_block_type")


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
    config = cls()
    text = config.get_text_config(decoder=True)
    kinds, field = _layer_kinds(text)
    values: dict[str, Any] = {"num_hidden_layers": 2}
    if len(set(kinds)) > 1 and field is not None and _settable(text, field):
        values[field] = list(dict.fromkeys(kinds))  # one layer of each kind, in their first order
        values["num_hidden_layers"] = len(values[field])
    elif len(set(kinds)) > 1:  # derived from other fields: the shortest prefix holding every kind
        values["num_hidden_layers"] = next(n for n in range(2, len(kinds) + 1) if set(kinds[:n]) == set(kinds))
    elif field is not None and _settable(text, field):
        values[field] = kinds[:1] * 2
    try:
        if text is config:
            return cls(**values)
        holder = next(name for name, value in vars(config).items() if value is text)  # text_config, mostly
        return cls(**{holder: {**text.to_dict(), **values}})
    except Exception:  # a field that must agree with the depth (GPT-Neo's attention_types): set after
        for name, value in values.items():
            setattr(text, name, value)
        return config


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
