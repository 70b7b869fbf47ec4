"""A multimodal config and its text decoder: the decoder's config, read in one place
(:func:`text_config`), and a wrapper that cannot be built without an optional package (Gemma 3n's
vision tower is a timm model, and timm is not a dependency), whose text decoder is built instead with
a note saying so. A text-only phase runs the decoder alone either way; what changes is the weights
held, the other modalities' towers being left out."""

from __future__ import annotations

import logging
import re
from typing import Any

logger = logging.getLogger("opcount.llm")


def text_config(config: Any) -> Any:
    """The decoder's config: transformers' ``get_text_config(decoder=True)`` of a multimodal config,
    ``config`` itself for a text model's (or for anything without that method)."""
    get = getattr(config, "get_text_config", None)
    return get(decoder=True) if callable(get) else config


def missing_package(error: BaseException) -> ImportError | None:
    """The ImportError behind ``error`` (itself, its cause or its context), if any."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, ImportError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def text_decoder_instead(config: Any, error: BaseException) -> Any | None:
    """The text decoder's config to build where building ``config``'s wrapper raised ``error`` for
    want of an optional package, and the decoder is a causal LM of its own; None otherwise. Logs the
    note (the command prints it as ``opcount: note:``)."""
    from ...transformers_internals import MODEL_FOR_CAUSAL_LM_MAPPING

    missing = missing_package(error)
    text = text_config(config)
    if missing is None or text is config or type(text) not in MODEL_FOR_CAUSAL_LM_MAPPING:
        return None
    named = re.search(r"requires the (\S+) library", str(missing))  # transformers' requires_backends
    package = named[1] if named else missing.name or "an optional package"
    logger.warning(
        "%s: the multimodal model needs %s, which is not installed; its text decoder (%s) is analyzed, the other "
        "modalities' towers and their weights left out",
        type(config).__name__,
        package,
        type(text).__name__,
        extra={"opcount_note": True},
    )
    return text
