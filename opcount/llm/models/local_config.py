"""A transformers config read from a local ``config.json`` (a file, or a downloaded model's folder):
the model it describes, built without its weights and without the network.

``model_type`` (else the first of ``architectures``) picks the config class, as transformers'
``AutoConfig`` does. The file is read within a size cap, every failure one line naming it
(:mod:`opcount.files.read`), and the fields that select code or reach the network are dropped
before any config is made (:mod:`.fields`). A multimodal config that wraps a text decoder (Gemma-3, Llama-4, Mistral-3)
gives that decoder's config, which is what a causal-LM analysis runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ...errors import OpcountValueError
from ...files import parse_json, read_text
from ...messages import first_line
from .composite import text_config
from .fields import defaults, drop_code_fields
from .limits import SizeError, check_values

CONFIG_FILE = "config.json"


def looks_local(name: str) -> bool:
    """Whether ``hf:name`` names a file or folder rather than a transformers class."""
    return not name.isidentifier() or Path(name).exists()


def read_config(path: str | Path) -> Any:
    """The causal LM's config in ``path`` (a ``config.json`` or the folder holding one): a
    multimodal config's text decoder. Every failure is one :class:`OpcountValueError` line naming
    the path."""
    data = _read(Path(path))
    cls: Any = config_class(data, path)
    try:
        check_values(cls, data, defaults(cls))  # a zero size, before the constructor divides by it
    except SizeError as e:
        raise OpcountValueError(f"{path}: {e}") from None
    try:
        config = cls.from_dict(data)
    except Exception as e:  # the constructors' checks on the file's values, whatever their type
        raise OpcountValueError(f"{path}: invalid config: {first_line(e, type(e).__name__)}") from e
    try:
        return causal_decoder(config)
    except OpcountValueError as e:
        raise OpcountValueError(f"{path}: {e}") from None


def with_values(config: Any, values: Mapping[str, Any]) -> Any:
    """``config`` made again with ``values`` over its own (what it derives from them derived again)."""
    return type(config).from_dict({**config.to_dict(), **values}) if values else config


def config_class(data: Mapping[str, Any], path: str | Path) -> type:
    """The config class of ``data``: by ``model_type``, else by its first ``architectures`` entry."""
    from ...transformers_internals import CONFIG_MAPPING, PreTrainedModel

    kind = data.get("model_type")
    if isinstance(kind, str):
        if kind not in CONFIG_MAPPING:
            import transformers

            raise OpcountValueError(
                f"{path}: unknown model_type {kind!r}: transformers {transformers.__version__} has no config for it"
            )
        found: type = CONFIG_MAPPING[kind]
        return found
    architectures = data.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        import transformers

        model = getattr(transformers, architectures[0], None) if architectures[0].isidentifier() else None
        if isinstance(model, type) and issubclass(model, PreTrainedModel):
            untyped: Any = model  # transformers leaves config_class unannotated
            named: type = untyped.config_class
            return named
        raise OpcountValueError(f"{path}: no model_type, and transformers has no model {architectures[0]!r}")
    raise OpcountValueError(f"{path}: no model_type or architectures: not a transformers config")


def causal_decoder(config: Any) -> Any:
    """``config`` if transformers builds a causal LM for it, else the text decoder it wraps."""
    from ...transformers_internals import MODEL_FOR_CAUSAL_LM_MAPPING

    text = text_config(config)
    if text is not config and type(text) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return text
    if type(config) in MODEL_FOR_CAUSAL_LM_MAPPING:
        return config
    raise OpcountValueError(f"transformers has no causal LM for {type(config).__name__} ({config.model_type})")


def _read(path: Path) -> dict[str, Any]:
    """The file's JSON object, the fields that select code dropped (:func:`.fields.drop_code_fields`)."""
    file = path / CONFIG_FILE if path.is_dir() else path
    if not file.exists():
        where = f"no {CONFIG_FILE} in {path}" if path.is_dir() else f"no such file: {path}"
        raise OpcountValueError(where)
    data = parse_json(read_text(file), file)  # at most 16 MiB; every failure one line naming the file
    if not isinstance(data, dict):
        raise OpcountValueError(f"{file}: a config is a JSON object, got {type(data).__name__}")
    return drop_code_fields(data, str(file))
