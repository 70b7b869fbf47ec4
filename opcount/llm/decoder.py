"""A causal LM built on the meta device, and what its config and its modules say of it, each worked
out once when it is built and passed down to the folders that need it: the decoder's config
(:func:`.models.composite.text_config`), its mixture-of-experts blocks with their top-k
(:func:`.moe.experts.find_experts`), its weights' bytes and each traced tensor's bytes per element
(:func:`.precision.dtypes.weight_table`), its cache per layer (:func:`.cache.specs.cache_specs`) and
the dtype its recurrent state is held in (:meth:`.precision.dtypes.Precision.with_state`), a
learned position table, prompt tokens run in front of every sequence, DSA indexers.

:class:`.causal_lm.CausalLM` is a :class:`Decoder` with its costs (phases, checks, a deployment); the
folders below it (the deployment, which :meth:`.causal_lm.CausalLM.deploy` calls) read a
:class:`Decoder`, so the class that deploys is never imported back by what it deploys.
"""

from __future__ import annotations

import inspect
from contextlib import AbstractContextManager
from typing import Any

from torch import nn

from ..errors import OpcountTypeError, OpcountValueError
from .attention.indexed import indexer_scopes
from .attention.prompt_tokens import prompt_length
from .cache.specs import CacheSpecs, cache_specs
from .models.build import build_on_meta, learned_positions
from .models.composite import text_config
from .models.limits import check_config
from .moe.experts import Experts, expected_routing, find_experts
from .moe.zero_experts import drop_unused
from .precision.dtypes import Precision, Pricing, StateDtypeError, WeightTable, weight_table


class Decoder:
    """A causal LM on the meta device, from a transformers config (built here) or a model already on
    meta, with the dtypes of its roles, and what it says of itself (the module's docstring):
    ``model``, ``config`` (the decoder's), ``precision``, ``experts``, ``weights``, ``caches``,
    ``learned_positions``, ``prefix``, ``indexers``."""

    def __init__(self, model_or_config: Any, precision: Precision | None = None) -> None:
        self.precision = precision or Precision()
        if isinstance(model_or_config, nn.Module):
            model = model_or_config
            config = getattr(model, "config", None)
            if config is None:
                raise OpcountTypeError(f"{type(model).__name__} has no transformers config (.config)")
            if any(not p.is_meta for p in model.parameters()):
                raise OpcountValueError(
                    f"{type(model).__name__} holds real weights: build it under torch.device('meta') "
                    "(or pass its config), so nothing of the weights' size is allocated"
                )
            check_config(config)  # a model built from a zero size divides by it when traced
        else:
            config = model_or_config
            model = build_on_meta(config, self.precision.traced)
            drop_unused(model)  # transformers' LongCat-Flash stacks weights for its identity experts too
        self.model: nn.Module = model
        self.config: Any = text_config(config)
        self.experts: tuple[Experts, ...] = tuple(find_experts(model, self.config))
        self.caches: CacheSpecs = cache_specs(model, self.config, lambda m: expected_routing(m, self.experts))
        if not any(layer.token_elements for layer in self.caches.layers):  # no keys and values: no KV dtype to name
            self.precision = self.precision.without_kv()
        if any(layer.state_elements for layer in self.caches.layers):  # the state's dtype, settled for this model
            self.precision = self.precision.with_state(self.caches.state_dtype)
        elif self.precision.state is not None:  # a dtype nothing would be held in: refused, not ignored
            raise StateDtypeError(
                f"{type(model).__name__} holds no recurrent state (no state-space or linear-attention layer) "
                f"to keep in {self.precision.state}"
            )
        self.weights: WeightTable = weight_table(model, self.precision)
        self.keeps_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        # the learned position table's name and rows, if the model has one (GPT-2's wpe)
        self.learned_positions: tuple[str, int] | None = learned_positions(model, self.config)
        self.prefix = prompt_length(model)  # positions run in front of every sequence (CPM-Ant)
        self.indexers = indexer_scopes(model)  # DSA indexers: their scores run as one kernel
        # what a deployment works out once for this model and reuses for every phase it puts on a layout: the
        # tensor-parallel plan and each layout's placement (:func:`.deploy.placement.Placement.of` keeps them,
        # typed loosely here as the deployment is a layer below); the model and config they read never change
        self.placements: dict[object, Any] = {}

    @property
    def pricing(self) -> Pricing:
        """Bytes per element of each traced tensor, by its role (the roofline's ``itemsize``)."""
        return self.weights.pricing

    def routing(self) -> AbstractContextManager[list[str]]:
        """The experts found, routed by expectation for a block (:func:`.moe.experts.expected_routing`);
        yields their blocks' names."""
        return expected_routing(self.model, self.experts)
