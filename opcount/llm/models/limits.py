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

Every size has a lower bound too (:data:`MIN_SIZES`): a vocabulary, a width, a layer or head count, an
expert count or top-k, a window of 0 builds a model that divides by it or prices nothing
(``num_local_experts=0`` divided by zero, ``sliding_window=0`` cached no byte). The bound is 1, or 0
where transformers reads 0 as "derive it" (``head_dim``: ``hidden_size / num_attention_heads``) or "none"
(``qk_rope_head_dim``); a field left None keeps transformers' meaning, and a sliding window is bounded
where it is used (Qwen2-MoE keeps ``sliding_window=0`` beside ``use_sliding_window=False``), and Qwen's
mixtures of experts read ``num_experts=0`` as dense layers. The values given to make a config are checked
the same way before it is made (:func:`check_least`), where its constructor would divide by zero first.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from torch import nn

from ...errors import OpcountValueError

MAX_LAYERS = 1024
MAX_PARAMETERS = 10**14
MAX_MODULES = 200_000
MAX_BATCH = 2**20
MAX_POSITIONS = 2**24
MAX_ELEMENTS = 2**63 - 1  # torch indexes tensors with int64
# The least value of each size a config may hold, by the field's name in any config class
MIN_SIZES: dict[str, int] = {
    **dict.fromkeys(
        (
            "vocab_size",
            "hidden_size",
            "n_embd",
            "d_model",
            "intermediate_size",
            "moe_intermediate_size",
            "ffn_hidden_size",
            "n_inner",
            "num_hidden_layers",
            "n_layer",
            "num_attention_heads",
            "n_head",
            "num_key_value_heads",
            "multi_query_group_num",
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "max_position_embeddings",
            "n_positions",
            "num_local_experts",
            "n_routed_experts",
            "num_experts",
            "num_experts_per_tok",
            "moe_topk",
            "kv_lora_rank",
            "q_lora_rank",
            "qk_nope_head_dim",
            "v_head_dim",
            "sliding_window",
            "attention_chunk_size",
        ),
        1,
    ),
    "head_dim": 0,  # 0: hidden_size / num_attention_heads, as transformers reads it
    "qk_rope_head_dim": 0,  # 0: no rotary part (GLM-5 Next's default)
}
# A field counting layers: num_hidden_layers, encoder_layers, GPT-2's n_layer (not Gemma 3n's vocab_size_per_layer_input)
_LAYER_COUNT = re.compile(r"layers$|(^|_)n_layer$")


class SizeError(OpcountValueError):
    """A size over one of this module's limits; the message names the field or argument and the limit."""


def check_config(config: Any) -> None:
    """Refuse a config whose sizes are under :data:`MIN_SIZES` or whose layer counts or estimated
    parameters are over the limits, naming the field (as the config stores it: GPT-2's ``n_layer``),
    its value and the limit."""
    for owner in _configs(config):
        name = type(owner).__name__
        check_least(name, vars(owner), functools.partial(_field, owner))
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


def check_least(owner: str, values: Iterable[str], get: Callable[[str], Any]) -> None:
    """Refuse a size under its :data:`MIN_SIZES` bound among the fields ``values`` names (``get``: a field's
    value in the config, or in the values it will be made of), naming ``owner`` (the config class), the
    field and its value."""
    for key in values:
        value, least = get(key), _least(key, get)
        if least is not None and _count(value) and value < least:
            raise SizeError(f"{owner}.{key} = {value:,}: a size of at least {least} (the limit)")


def check_values(
    config_class: type, values: Mapping[str, Any], default: Any = None, keys: Iterable[str] | None = None
) -> None:
    """:func:`check_least` on the ``values`` a ``config_class`` is to be made of (``default``: its instance
    with its defaults, for the fields ``values`` leave out; ``keys``: those to check, all by default),
    before its constructor divides by one."""
    check_least(
        config_class.__name__,
        values if keys is None else keys,
        lambda key: values[key] if key in values else _field(default, key),
    )


def _field(config: Any, key: str) -> Any:
    # the value stored: a heterogeneous config (per-layer fields) raises when such a field is read as one
    return None if config is None else vars(config).get(key)


def _least(key: str, get: Callable[[str], Any]) -> int | None:
    """``key``'s lower bound in the config ``get`` reads: a window is unbounded where it is not used
    (``use_sliding_window=False``), and Qwen's mixtures of experts (the configs with ``decoder_sparse_step``)
    read ``num_experts=0`` (stored as ``num_local_experts`` by Qwen3-MoE) as every layer dense."""
    if key == "sliding_window" and get("use_sliding_window") is False:
        return None
    if key in ("num_experts", "num_local_experts") and get("decoder_sparse_step") is not None:
        return 0
    return MIN_SIZES.get(key)


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
