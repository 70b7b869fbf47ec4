"""Measured rows priced (:func:`price`): each row's model built at its precision, its two steps traced on meta
and deployed on its layout and hardware (:mod:`.steady`), the traced phases reused across the rows of one
model, precision and hardware (:class:`Tracer`). A row opcount cannot model (a percentile beyond the median,
speculative decoding, a layout or precision it lacks) is :class:`Unmodelled`, with the reason, not priced.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...errors import OpcountError
from ...hardware.lookup import Hardware
from ...hardware.lookup import hardware as lookup_hardware
from ..causal_lm import CausalLM
from ..deploy.figures import Deployment
from ..deploy.fit import default_max_batched_tokens
from ..deploy.layout import Parallel
from ..models.catalogue import config
from ..models.limits import MAX_BATCH
from ..phases import PhaseCost, PhaseRequest
from ..precision.dtypes import Precision
from ..serve.simulate import default_max_num_seqs
from .rows import Row
from .steady import CHUNK_TOKENS, Priced, Step


@dataclass(frozen=True)
class Unmodelled:
    """A row opcount does not price, and why."""

    row: Row
    reason: str


def layout(row: Row) -> Parallel:
    """The row's layout as opcount's: attention data-parallel over ``dp_attention`` replicas of ``tp /
    dp_attention`` devices each (SGLang's and TensorRT-LLM's DP attention), the experts over ``ep`` devices."""
    if row.tp % row.dp:
        raise OpcountError(f"tp {row.tp} is not a multiple of dp_attention {row.dp}")
    parallel = Parallel(tp=row.tp // row.dp, dp=row.dp, ep=row.ep)
    if parallel.devices != row.devices:
        raise OpcountError(f"the layout's {parallel.devices} devices are not the row's {row.devices}")
    return parallel


def refusal(row: Row) -> str | None:
    """Why a row is not priced, before anything is built (None: it is)."""
    if row.stat in ("p90", "p99"):
        return f"{row.stat} of {row.metric}: the steady-state form gives means, not the tail"
    if row.metric in ("ttft_ms", "e2el_ms") and row.concurrency is None and math.isinf(row.rate):
        return (
            "TTFT of requests sent all at once: their queue follows the engine's admission and chunk order, "
            "which the steady-state form does not model"
        )
    text = " ".join((row.case, row.text.get("note", ""))).lower()
    if "mtp" in text or "speculative" in text or "eagle" in text:
        return "speculative decoding (MTP): its acceptance is not published with the row"
    return None


# the traced phases a Tracer keeps, the most recently used: a row's prompt and decode step, and its neighbours' in a
# file of rows grouped by run (a DeepSeek-R1 phase holds gigabytes; every phase of 191 rows at once did not fit in
# 24 GiB)
PHASES_KEPT = 8


class Tracer:
    """Models, hardware and traced phases kept across rows: a phase is traced once per model, precision,
    hardware and point, whatever the layout (a deployment splits it), while it is among the
    :data:`PHASES_KEPT` used last."""

    def __init__(self, status: Callable[[str], None] | None = None) -> None:
        self.models: dict[tuple[str, str, str, str], CausalLM] = {}
        self.phases: OrderedDict[tuple[object, ...], PhaseCost] = OrderedDict()
        self.status = status

    def model(self, row: Row) -> CausalLM:
        key = (row.model, row.weight, row.act, row.kv)
        if key not in self.models:
            self.models[key] = CausalLM(config(row.model), Precision(row.weight, row.act, row.kv or None))
        return self.models[key]

    def deploy(self, row: Row, hardware: Hardware, phase: str, batch: int, new: int, cached: int) -> Deployment:
        llm = self.model(row)
        key = (row.model, row.weight, row.act, row.kv, hardware.name, phase, batch, new, cached)
        if key not in self.phases:
            if self.status is not None:
                self.status(f"{row.model} on {hardware.name}: {phase} of {batch} x {new} over {cached}")
            request = PhaseRequest(phase=phase, seq_len=new, kv_len=cached, batch=batch, hardware=hardware)
            self.phases[key] = llm.cost(request)
            if len(self.phases) > PHASES_KEPT:
                self.phases.popitem(last=False)
        self.phases.move_to_end(key)
        return llm.deploy(self.phases[key], layout(row), hardware=hardware)


# vLLM's V0 engine turned chunked prefill off for a model with multi-head latent attention (its config's log:
# "MLA is enabled; forcing chunked prefill and prefix caching to be disabled", v0.7.1 and v0.7.3), and without
# chunking took whole prompts a step up to max(max_model_len, 2048) tokens (V0's SchedulerConfig): the
# server's --max-model-len where it was given, else the model's context
V0_LEAST_TOKENS = 2048


def prompt_budget(row: Row, hf_config: object, hardware: Hardware) -> tuple[int, bool]:
    """The prompt tokens ``row``'s engine takes a step, and whether prompts run in steps of their own: vLLM V1's
    ``max_num_batched_tokens`` on ``hardware``, the others' 8,192 (:data:`.steady.CHUNK_TOKENS`), beside decodes;
    vLLM's V0 engine on a model with latent attention takes whole prompts, alone, up to its ``max_model_len``."""
    latent = isinstance(getattr(hf_config, "kv_lora_rank", None), int)
    if row.line == "vllm V0" and latent:
        context = getattr(hf_config, "max_position_embeddings", None)
        length = row.max_model_len or (context if isinstance(context, int) else 0)
        return max(length, V0_LEAST_TOKENS), True
    return (default_max_batched_tokens(hardware) if row.engine == "vllm" else CHUNK_TOKENS), False


def _step(d: Deployment) -> Step:
    assert d.step_time is not None and d.step_time_bound is not None and d.shape is not None  # on hardware
    return Step(d.step_time, d.step_time_bound, d.shape)


def held(prefill: Deployment, prompt: int, answer: int) -> int:
    """The sequences of ``prompt + answer`` tokens whose KV cache one device holds beside the weights and the
    step's working set, by opcount's count (the engine's capacity: ``gpu_memory_utilization`` of its memory)."""
    free = (prefill.capacity or 0.0) - prefill.per_device.weights - prefill.per_device.activations
    per_sequence = prefill.per_device.kv_cache / prompt * (prompt + answer)
    return math.floor(free / per_sequence) if per_sequence > 0 else MAX_BATCH


def priced(row: Row, tracer: Tracer) -> Priced:
    """``row``'s two steps on its layout: the prompt, then a decode step of the batch its workload keeps running
    at the mean context: a closed loop's clients, all at once the slots the engine runs (vLLM's
    ``max_num_seqs``), either way no more than the KV cache holds (an engine admits a request only when its
    blocks fit: the others wait): as the engine logged it where the row says (``kv_tokens``), else by
    opcount's count."""
    hardware = lookup_hardware(row.hardware)
    parallel = layout(row)
    prompt, answer = max(round(row.input), 1), max(round(row.output), 1)
    prefill = tracer.deploy(row, hardware, "prefill", 1, prompt, 0)
    burst = row.concurrency is None and math.isinf(row.rate)
    if row.kv_tokens is None:
        fits, source = held(prefill, prompt, answer), "opcount's count"
    else:
        fits, source = row.kv_tokens // (prompt + answer), f"kv_tokens {row.kv_tokens}"
    if fits < 1:
        raise OpcountError(f"{row.model} on {hardware.name}: no sequence of {prompt + answer} tokens fits ({source})")
    if row.concurrency is not None:
        wanted = math.ceil(row.concurrency / parallel.dp)
    elif burst:
        wanted = min(math.ceil(row.requests / parallel.dp), default_max_num_seqs(hardware))
    else:
        raise OpcountError("a Poisson rate below the engine's capacity is not in the steady-state form")
    batch = min(wanted, fits)
    decode = tracer.deploy(row, hardware, "decode", batch, 1, prompt + answer // 2)
    chunk, alone = prompt_budget(row, tracer.model(row).config, hardware)
    return Priced(row, batch, parallel.dp, burst, _step(decode), _step(prefill), chunk, alone)


def price(rows: Iterable[Row], tracer: Tracer | None = None) -> list[Priced | Unmodelled]:
    """Every row priced, or unmodelled with its reason (an error building or deploying it is the reason)."""
    tracer = tracer or Tracer()
    out: list[Priced | Unmodelled] = []
    for row in rows:
        reason = refusal(row)
        if reason is not None:
            out.append(Unmodelled(row, reason))
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # transformers' deprecation notices
                out.append(priced(row, tracer))
        except OpcountError as e:
            out.append(Unmodelled(row, str(e).splitlines()[0]))
    return out
