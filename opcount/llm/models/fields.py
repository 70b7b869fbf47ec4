"""A transformers config's fields: which names a config class takes as data (a misspelt one refused with
the closest real names, a method or a private name refused), and which select code or reach the
network: dropped from a config file, refused where a user sets them.

opcount builds a model from its config on the meta device, installs the attention and the expert
routing it prices, and never downloads or runs code. A config can ask for more than that:

- ``auto_map`` names classes in a model repository's own code, and ``trust_remote_code`` would
  allow running it;
- ``attn_implementation`` and ``experts_implementation`` (stored as ``_attn_implementation``,
  ``_experts_implementation``) select kernels, and a Hub repository's among them: with the ``kernels``
  package installed, ``"kernels-community/..."`` is downloaded and run when the model is built;
- ``quantization_config`` selects a quantizer and the package of its kernels (bitsandbytes, ...);
  opcount's weight formats are its own (``--weight-dtype``, :mod:`opcount.llm.precision`);
- ``custom_pipelines`` names a repository's pipeline code.

A config file (``hf:path/config.json``, :func:`.local_config.read_config`) has these fields dropped, at
every level of its nesting, before any config is made (:func:`drop_code_fields`); the fields that
would have selected code are named in one logged warning. Set by hand (``--hf-config``, the keyword
arguments of :func:`.catalogue.config`) they are refused (:func:`check_field`), except an
implementation named by transformers' own names (``eager``, ``sdpa``), which runs no code from
elsewhere; a config object with a Hub kernel in it is refused before it is built
(:func:`check_no_hub_code`).
"""

from __future__ import annotations

import difflib
import inspect
import logging
from collections.abc import Mapping
from typing import Any

from ...errors import OpcountValueError

logger = logging.getLogger("opcount.llm")

# What each field selects, for the message that refuses it
CODE_FIELDS: dict[str, str] = {
    "auto_map": "names a repository's own code, which opcount never runs",
    "trust_remote_code": "would allow running a repository's own code, which opcount never does",
    "custom_pipelines": "names a repository's pipeline code, which opcount never runs",
    "quantization_config": "selects a quantizer and its package's kernels; opcount prices the formats of --weight-dtype",
}
# Fields that pick an implementation by name: transformers' own names run transformers' code; a name
# with a "/" is a Hub repository (transformers' kernels loader downloads it)
IMPLEMENTATIONS = (
    "attn_implementation",
    "_attn_implementation",
    "_attn_implementation_internal",
    "experts_implementation",
    "_experts_implementation",
    "_experts_implementation_internal",
)
# Dropped from files whatever they hold: opcount installs the attention and the routing it prices
FILE_DROPPED = (*CODE_FIELDS, *IMPLEMENTATIONS)


class FieldError(OpcountValueError):
    """A name a config does not take as data: unknown (``num_hiden_layers``), a method or a private
    name (``data_only``: the caller says what it sets instead), or a field that selects code."""

    def __init__(self, message: str, *, data_only: bool = False) -> None:
        super().__init__(message)
        self.data_only = data_only


def defaults(config_class: type) -> Any:
    """``config_class`` made with its defaults, or None for a class that has none."""
    try:
        return config_class()
    except Exception:  # a config class whose constructor needs arguments: its fields cannot be listed
        return None


def check_field(config_class: type, key: str, value: Any, default: Any) -> None:
    """Refuse setting ``key`` to ``value`` on ``config_class`` (``default``: its instance made with its
    defaults, from :func:`defaults`; None: the names cannot be checked): a method or private name, a
    name that is no field (with the closest real ones), a field that selects code."""
    owner = config_class.__name__
    if key in CODE_FIELDS:
        raise FieldError(f"{owner}.{key} {CODE_FIELDS[key]}")
    if key in IMPLEMENTATIONS and _hub_names(value):
        raise FieldError(_hub_message(owner, key, _hub_names(value)[0]))
    if not _may_be_field(config_class, key):
        what = "callable (a method)" if callable(getattr(config_class, key, None)) else "private"
        raise FieldError(f"{owner}.{key} is {what}", data_only=True)
    if default is not None and not _is_field(default, config_class, key):
        # a config keeps unknown keys as attributes that nothing reads: a typo would count the default model
        close = difflib.get_close_matches(key, [k for k in vars(default) if not k.startswith("_")], n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else f" (see {owner}'s documentation for its fields)"
        raise FieldError(f"{owner} has no field {key!r}{hint}")


def drop_code_fields(data: dict[str, Any], source: str) -> dict[str, Any]:
    """``data`` (a config file's JSON object, read from ``source``) without :data:`FILE_DROPPED`'s fields,
    at every level of its nesting (a multimodal config's ``text_config``); the fields that held a
    value are named in one warning."""
    dropped: list[str] = []
    stack: list[Any] = [data]
    while stack:  # by hand rather than by recursion: a file may nest as deep as its parser allowed
        node = stack.pop()
        if isinstance(node, dict):
            for key in [k for k in node if k in FILE_DROPPED]:
                if node.pop(key) not in (None, False, {}, "") and key not in dropped:
                    dropped.append(key)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    if dropped:
        logger.warning(
            "%s: left out %s: fields that select code or reach the network are not read from files (docs/llm.md)",
            source,
            ", ".join(dropped),
        )
    return data


def check_no_hub_code(config: Any) -> None:
    """Refuse ``config`` (or a sub-config) that selects an implementation from a Hub repository: building
    the model would download it."""
    from ...transformers_internals import PretrainedConfig

    seen: set[int] = set()
    stack = [config]
    while stack:
        owner = stack.pop()
        if id(owner) in seen:
            continue
        seen.add(id(owner))
        for key in IMPLEMENTATIONS:
            names = _hub_names(vars(owner).get(key))
            if names:
                raise FieldError(_hub_message(type(owner).__name__, key.strip("_").removesuffix("_internal"), names[0]))
        stack += [v for v in vars(owner).values() if isinstance(v, PretrainedConfig)]


def _hub_names(value: Any) -> list[str]:
    """The Hub repositories an implementation field names (a dict: per sub-config)."""
    values = value.values() if isinstance(value, Mapping) else [value]
    return [v for v in values if isinstance(v, str) and "/" in v]


def _hub_message(owner: str, key: str, name: str) -> str:
    return (
        f"{owner}.{key} = {name!r} is a Hub repository's kernel: opcount downloads and runs no code (it installs "
        "the attention it prices); leave it out or name one of transformers' own (eager, sdpa)"
    )


def _may_be_field(config_class: type, key: str) -> bool:
    """Not a private or dunder name, nor a method of the class (``to_dict``, ``__init__``): set as
    a value, it would replace the method the model's code calls."""
    if key in inspect.signature(config_class).parameters:
        return True
    return not key.startswith("_") and not callable(getattr(config_class, key, None))


def _is_field(default: Any, config_class: type, key: str) -> bool:
    """A data attribute of the default config (``hasattr`` alone would count its methods), one stored
    under a private name (``attn_implementation`` as ``_attn_implementation``), or a constructor parameter."""
    for name in (key, f"_{key}"):
        try:
            value = getattr(default, name)
        except Exception:
            continue
        if not callable(value):
            return True
    return key in inspect.signature(config_class).parameters
