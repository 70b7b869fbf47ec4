"""Sizes bounded before anything is built: a transformers config, a phase's batch and lengths.

A config typed on the command line (``--hf-config num_hidden_layers=1000000000``) builds its model
on the meta device, which allocates no weights but still makes every module: a billion layers
is a hang that grows to gigabytes before any check on the built model can run. So the config
is bounded by arithmetic first (:func:`check_config`), and the build itself by a count of the
modules it makes (:func:`module_budget`), for the architectures whose counts live in fields
the arithmetic does not know (experts per layer under many names).

The limits are far above any published model and far below what breaks:

- :data:`MAX_LAYERS` layers per stack (Llama 3.1 405B has 126, PaLM 540B 118);
- :data:`MAX_PARAMETERS` parameters, estimated as a dense transformer (``vocab x hidden +
  layers x (4 hidden^2 + 3 hidden x intermediate)``, the attention projections and a gated MLP;
  a mixture of experts has more, which :data:`MAX_MODULES` bounds); the largest published models
  have about 2e12;
- :data:`MAX_MODULES` modules made by one build (Kimi K2, 61 layers of 384 experts, makes about
  94,000);
- :data:`MAX_BATCH` sequences and :data:`MAX_POSITIONS` positions per sequence (prompt, cache and
  generated tokens together; Llama 4 Scout's context is 10M);
- every integer of the config, and the KV cache, within what torch can index (:data:`MAX_ELEMENTS`).
"""

from __future__ import annotations

import contextlib
import re
import threading
from collections.abc import Iterator
from typing import Any

from torch import nn

from ...errors import OpcountValueError

MAX_LAYERS = 1024
MAX_PARAMETERS = 10**14
MAX_MODULES = 200_000
MAX_BATCH = 2**20
MAX_POSITIONS = 2**24
MAX_ELEMENTS = 2**63 - 1  # torch indexes tensors with int64
# A field counting layers: num_hidden_layers, encoder_layers, GPT-2's n_layer (not Gemma 3n's vocab_size_per_layer_input)
_LAYER_COUNT = re.compile(r"layers$|(^|_)n_layer$")


class SizeError(OpcountValueError):
    """A size over one of this module's limits; the message names the field or argument and the limit."""


def check_config(config: Any) -> None:
    """Refuse a config whose layer counts or estimated parameters are over the limits, naming the
    field (as the config stores it: GPT-2's ``n_layer``), its value and the limit."""
    for owner in _configs(config):
        name = type(owner).__name__
        for key, value in vars(owner).items():
            if _LAYER_COUNT.search(key) and _count(value) and value > MAX_LAYERS:
                raise SizeError(f"{name}.{key} = {value:,}: more than {MAX_LAYERS:,} layers (the limit)")
            if _count(value) and abs(value) > MAX_ELEMENTS:  # any size made of it overflows torch's int64
                raise SizeError(f"{name}.{key} = {value:,}: more than torch can index (2**63 - 1)")
        estimate = _dense_parameters(owner)
        if estimate > MAX_PARAMETERS:
            raise SizeError(
                f"{name}: about {estimate:.3g} parameters from its sizes ({_sizes(owner)}), over the limit of "
                f"{MAX_PARAMETERS:.0e}"
            )


@contextlib.contextmanager
def module_budget(label: str) -> Iterator[None]:
    """Modules made in this thread inside the block are counted; past :data:`MAX_MODULES` the build
    stops with a :class:`SizeError` naming ``label`` (the model being built)."""
    thread = threading.get_ident()
    made = 0

    def count(module: nn.Module, name: str, child: nn.Module | None) -> None:
        nonlocal made
        if threading.get_ident() != thread:  # another thread's modules are none of this build's
            return
        made += 1
        if made > MAX_MODULES:
            raise SizeError(f"{label}: more than {MAX_MODULES:,} modules (the limit); stopped building at {name!r}")

    handle = nn.modules.module.register_module_module_registration_hook(count)
    try:
        yield
    finally:
        handle.remove()


def check_sizes(batch: int, positions: int, cache_elements: int) -> None:
    """A phase's sizes: ``batch`` sequences of ``positions`` positions each (prompt, cache and
    generated tokens), and the elements of one layer's KV cache tensor."""
    if batch > MAX_BATCH:
        raise SizeError(f"batch {batch:,}: more than {MAX_BATCH:,} sequences (the limit)")
    if positions > MAX_POSITIONS:
        raise SizeError(f"{positions:,} positions per sequence: more than {MAX_POSITIONS:,} (the limit)")
    if cache_elements > MAX_ELEMENTS:
        raise SizeError(f"a KV cache tensor of {cache_elements:.3g} elements: more than torch can index (2**63 - 1)")


def _configs(config: Any) -> list[Any]:
    """``config`` and the sub-configs it holds (a multimodal model's text and vision configs)."""
    from ...transformers_internals import PretrainedConfig

    found = [config]
    for value in vars(config).values():
        if isinstance(value, PretrainedConfig):
            found += _configs(value)
    return found


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _dense_parameters(config: Any) -> int:
    hidden, layers, inner, vocab = (_size(config, k) for k in _SIZES)
    inner = inner or 4 * hidden  # GPT-2's n_inner is None: 4 x hidden
    return vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * inner)


def _size(config: Any, key: str) -> int:
    """A positive integer field, else 0 (absent, None, or not a count)."""
    value = getattr(config, key, None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


_SIZES = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")


def _sizes(config: Any) -> str:
    return ", ".join(f"{k} {getattr(config, k)}" for k in _SIZES if _count(getattr(config, k, None)))
