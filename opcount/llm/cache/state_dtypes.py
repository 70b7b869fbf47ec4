"""The dtype each part of a recurrent state is held in, where a config or the serving engines set one
apart from the KV cache's.

A state layer holds conv states (the last inputs of its short convolution) and recurrent states (an
SSM's or a linear attention's running state). vLLM holds them apart from the attention's KV cache:
the conv states in ``mamba_cache_dtype``, the recurrent ones in ``mamba_ssm_cache_dtype`` (vLLM's
``CacheConfig``, both ``auto`` by default: the model's dtype, whatever ``kv_cache_dtype`` says). Two
families take the recurrent one from their config when it is left ``auto`` (vLLM's
``model_executor/models/config.py``): Nemotron-H from ``mamba_ssm_cache_dtype`` (float32 in
transformers' ``NemotronHConfig``, and vLLM's default when a config lacks it), Qwen3.5 from
``mamba_ssm_dtype``; :func:`configured` reads them. SGLang reads ``mamba_ssm_dtype`` and holds every
recurrent state in float32 otherwise (``--mamba-ssm-dtype``, ``configs/mamba_utils.py``).

Some parts are float32 whatever the flags, because the model itself keeps them so: RWKV-4's and
Griffin's (:mod:`.rwkv`, :mod:`.griffin`), and Kimi-Linear's KDA state (:data:`KEPT_FLOAT32`).
"""

from __future__ import annotations

from typing import Any

from ...errors import OpcountError
from ...hardware.lookup import dtype_name

STATE_DTYPES = ("float32", "bfloat16", "float16")  # vLLM's MambaDType and SGLang's --mamba-ssm-dtype choices
CONFIG_FIELDS = ("mamba_ssm_cache_dtype", "mamba_ssm_dtype")  # Nemotron-H's, Qwen3.5's
# By the decoder config's model_type, the recurrent states (by index) the model keeps in float32:
# Kimi-Linear's KDA state, which transformers writes to its cache as float32 (KimiDeltaAttention's
# update_recurrent_state(... .to(torch.float32))) and vLLM holds in float32 whatever
# mamba_ssm_cache_dtype says (MambaStateDtypeCalculator.kda_state_dtype).
KEPT_FLOAT32 = {"kimi_linear": frozenset({0})}


def configured(c: Any) -> str | None:
    """The recurrent states' dtype the decoder's config ``c`` sets (:data:`CONFIG_FIELDS`), or None."""
    for field in CONFIG_FIELDS:
        value = getattr(c, field, None)
        if value is None:
            continue
        name = str(dtype_name(value)).lower().strip()
        if name not in STATE_DTYPES:
            raise OpcountError(
                f"{type(c).__name__}.{field} is {value!r}: a recurrent state is held in {', '.join(STATE_DTYPES)}"
            )
        return name
    return None


def kept_float32(c: Any) -> frozenset[int]:
    """The recurrent states (by index) the model of config ``c`` keeps in float32 whatever the flags."""
    return KEPT_FLOAT32.get(str(getattr(c, "model_type", "")), frozenset())
