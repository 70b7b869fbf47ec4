"""Published LLM architectures, by name: the hyperparameters of their released ``config.json``.

Nothing is downloaded: each entry is the handful of numbers that decide the cost (the data and its
sources are in :mod:`opcount.llm.models.catalogue_data`, the table in docs/llm.md). ``llm:NAME`` on the
command line and :func:`config` in Python build a transformers config from them; the model itself
is then built on the meta device. An alias (``deepseek-r1``) names a model released with the same
config as another entry.
"""

from __future__ import annotations

import difflib
from typing import Any

from ...errors import OpcountValueError
from ...messages import first_line
from .catalogue_data import ALIASES, ARCHITECTURES, Architecture
from .fields import FieldError, check_field, defaults
from .limits import check_config, check_values

__all__ = ["ALIASES", "ARCHITECTURES", "Architecture", "config", "names", "resolve"]


def names() -> list[str]:
    """Every name ``llm:NAME`` takes: the entries, then the aliases."""
    return [*ARCHITECTURES, *ALIASES]


def resolve(name: str) -> tuple[str, Architecture]:
    """The entry ``name`` (or its alias) stands for, as its canonical name and architecture."""
    key = name.lower()
    if key in ALIASES:
        key = ALIASES[key][0]
    arch = ARCHITECTURES.get(key)
    if arch is None:
        close = difflib.get_close_matches(key, names(), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise OpcountValueError(f"unknown architecture {name!r}: choose one of {', '.join(names())}{hint}")
    return key, arch


def config(name: str, **overrides: Any) -> Any:
    """The transformers config of the published architecture ``name`` (see :data:`ARCHITECTURES`
    and :data:`ALIASES`), with ``overrides`` applied (e.g. ``num_hidden_layers=2``).

    Refused with an :class:`~opcount.errors.OpcountValueError` naming the field, as the command line's
    ``--hf-config`` refuses it: a name that is no field of the config (``num_hiden_layers``, with the
    closest real ones), a method or private name, a field that selects code (:mod:`.fields`), a value
    the config's constructor rejects, a size out of :mod:`.limits`' bounds (``vocab_size=0``)."""
    _, arch = resolve(name)
    from ...transformers_internals import transformers_module

    transformers = transformers_module()  # not a bare import: its first, in several threads, is not safe
    cls = getattr(transformers, arch.config_class)
    default = defaults(cls) if overrides else None
    for key, value in overrides.items():
        try:
            check_field(cls, key, value, default)
        except FieldError as e:
            if not e.data_only:
                raise
            raise FieldError(f"{e}: config() sets the config's data fields") from None
    values = {**arch.values, **overrides}
    layers, types = values.get("num_hidden_layers"), arch.values.get("layer_types")
    if isinstance(layers, int) and types and "layer_types" not in overrides and layers != len(types):
        # A shallower (or deeper) copy keeps the released layer pattern: its first layers, repeated.
        values["layer_types"] = [types[i % len(types)] for i in range(layers)]
    if overrides:
        check_values(cls, values, default)
    try:
        made = cls(**values)
    except Exception as e:  # the constructor's checks on the values, whatever their type
        raise OpcountValueError(f"invalid config: {first_line(e, type(e).__name__)}") from e
    check_config(made)
    return made
