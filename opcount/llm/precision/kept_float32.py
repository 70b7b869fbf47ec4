"""The weights transformers loads in float32 whatever the model's dtype, by its own rule.

A model class lists them by name pattern: ``_keep_in_fp32_modules_strict`` (DeepSeek-V3's router,
``gate.weight``, and its ``e_score_correction_bias``; Kimi-Linear's ``dt_bias``; Nemotron-H's router)
are loaded in float32 when the model is loaded in float16 or bfloat16, ``_keep_in_fp32_modules``
(RWKV's ``time_decay`` and ``time_first``, T5's ``wo``, GPT-OSS's norms) only when it is loaded in
float16. transformers 5.24 (``PreTrainedModel._get_dtype_plan`` and the checkpoint loader) merges
each submodule's lists into the model's and matches every pattern against a tensor's name with
``re.search``, its ``*`` any run of characters (so ``gate.weight`` is found anywhere in
``model.layers.3.mlp.gate.weight``). Built from a config, the model holds them in its dtype;
opcount prices them in float32, as a loaded model holds them (:mod:`.precision`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import torch
from torch import nn


def _patterns(model: nn.Module, dtype: torch.dtype) -> list[str]:
    found: list[str] = []
    lists = ["_keep_in_fp32_modules_strict"] if dtype in (torch.float16, torch.bfloat16) else []
    if dtype == torch.float16:
        lists.append("_keep_in_fp32_modules")
    for m in model.modules():  # the model's lists, and any submodule's of its own
        for attribute in lists:
            value = getattr(m, attribute, None)
            if isinstance(value, Iterable) and not isinstance(value, str):
                found.extend(p for p in value if isinstance(p, str) and p not in found)
    return found


def kept_in_float32(model: nn.Module, dtype: torch.dtype) -> frozenset[str]:
    """The names of the parameters and persistent buffers (what a checkpoint holds) that
    transformers loads in float32 when ``model`` is loaded in ``dtype``."""
    patterns = _patterns(model, dtype)
    if not patterns:
        return frozenset()
    found = re.compile("|".join(f"(?:{p.replace('*', '.*')})" for p in patterns))
    names = [n for n, _ in model.named_parameters()] + list(model.state_dict(keep_vars=True))
    return frozenset(n for n in names if found.search(n))
