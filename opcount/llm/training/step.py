"""One training step of a causal LM, per device: its memory (weights, gradients, optimizer
states, activations saved for backward, the backward's transient peak), its two times (the estimate and
the bound) on a training layout (:mod:`opcount.training.layout`: tensor, pipeline, context, expert and data
parallelism), tokens/s, MFU, and the time and cost of a run of N tokens.

The step is traced once on the meta device (:class:`opcount.llm.causal_lm.CausalLM`'s model, the
dispatch tracer with ``mode="train"``: forward, the model's own loss on ``labels``, backward);
the saved activations are measured on one forward on fake tensors (:mod:`opcount.training.saved`),
the model states follow :mod:`opcount.training.states`, the time :mod:`opcount.training.step`.
The step is traced for one micro-batch (``batch`` sequences of ``seq_len`` tokens) of the whole model on
one device, then cut into the layout's stages and shares (:mod:`.stages`) and priced on its schedule
(:mod:`.schedule`); a step runs ``micro_batches`` of them on each of the ``dp`` replicas.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ...analysis import FlopCountAnalysis
from ...errors import OpcountValueError
from ...hardware.interconnect import Collective
from ...hardware.lookup import Hardware
from ...hardware.lookup import hardware as lookup_hardware
from ...ir import DTYPE_BYTES, TensorSpec
from ...memory import MemoryTrafficAnalysis
from ...roofline import RooflineReport, roofline
from ...tracers.meta import TensorShape
from ...training.comm import Shape
from ...training.layout import TrainLayout, stage_layers
from ...training.saved import RECOMPUTE, SavedActivations, effective, layers_of, measure
from ...training.states import OPTIMIZERS, ModelStates, model_states
from ...training.step import StepTime, Throughput, forward_calls, recomputed
from ..attention.rope import dynamic_rope
from ..causal_lm import CausalLM
from ..deploy.layout import Sharding
from ..kernels.estimate import schedule_kernels
from ..precision.dtypes import Precision
from ..precision.formats import TRAINABLE
from .schedule import ParallelStep, price
from .stages import StageShare, activations, layer_of, parameters_by_stage, shares, stage_states


@dataclass
class Traced:
    """One micro-batch's training step traced (its FLOPs and the activations it saves), kept to price many
    layouts, optimizers, ZeRO stages and recomputations from one trace; ``priced``: its roofline and kernels
    per hardware, worked out once."""

    batch: int
    seq_len: int
    flops: FlopCountAnalysis
    saved: SavedActivations
    priced: dict[str, tuple[RooflineReport, Any]] = field(default_factory=dict)


def trace_step(
    llm: CausalLM, *, seq_len: int, batch: int = 1, flops_per_mac: int = 1, preset: str = "default"
) -> Traced:
    """One micro-batch of ``batch`` sequences of ``seq_len`` tokens traced on meta: forward, loss, backward, and
    the activations saved for backward measured on fake tensors."""
    for name, value in (("seq_len", seq_len), ("batch", batch)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise OpcountValueError(f"{name} must be an integer >= 1, got {value!r}")
    llm.check_sizes(batch, seq_len)
    positions = llm.learned_positions
    if positions is not None and seq_len > positions[1]:
        raise OpcountValueError(
            f"seq_len {seq_len} exceeds the {positions[1]} rows of the learned position table '{positions[0]}'"
        )
    model = llm.model
    ids = TensorShape((batch, seq_len), dtype=torch.long)
    kwargs: dict[str, Any] = {"input_ids": ids, "labels": ids}
    with llm.routing(), dynamic_rope(model, seq_len):
        flops = FlopCountAnalysis(
            model, (), kwargs, tracer="dispatch", mode="train", flops_per_mac=flops_per_mac, preset=preset
        )
        flops.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        flops.total()
        saved = measure(model, (), kwargs, seq_len=seq_len)
    return Traced(batch, seq_len, flops, saved)


@dataclass(kw_only=True)
class TrainingCost:
    """What one training step costs per device (see the module's docstring): ``stages`` per pipeline stage,
    ``states`` and the memory of the stage holding the most."""

    batch: int
    seq_len: int
    precision: Precision
    optimizer: str
    zero: int
    dp: int
    recompute: str
    flops: FlopCountAnalysis
    states: ModelStates
    saved: SavedActivations
    layout: TrainLayout = field(default_factory=TrainLayout)
    stages: list[StageShare] = field(default_factory=list)
    roofline: RooflineReport | None = None
    step: StepTime | None = None
    parallel: ParallelStep | None = None
    collectives: list[Collective] = field(default_factory=list)
    throughput: Throughput | None = None

    @property
    def activations(self) -> int:
        """Bytes of activations held for backward, on the stage holding the most memory."""
        return self.memory()["activations"]

    @property
    def tokens(self) -> int:
        """Tokens per step over every device: micro-batches x ``batch`` x ``seq_len`` on each replica."""
        return self.batch * self.seq_len * self.layout.micro_batches * self.layout.dp

    def stage_memory(self, stage: StageShare) -> dict[str, int]:
        """A device of ``stage``: weights, KV cache (0: training keeps none), activations (the micro-batches in
        flight, one layer rematerialised under full recomputation, the logits and loss held once),
        gradients, optimizer, the backward's transient peak, total."""
        held = stage.activations * self.layout.in_flight(stage.stage) + stage.outside + stage.rematerialised
        s = stage.states
        parts = {
            "weights": s.weights,
            "kv_cache": 0,
            "activations": round(held),
            "gradients": s.gradients,
            "optimizer": s.optimizer,
            "transient": round(stage.transient),
        }
        return {**parts, "total": sum(parts.values())}

    def memory(self) -> dict[str, int]:
        """Per device, on the stage holding the most (:meth:`stage_memory`)."""
        return max((self.stage_memory(s) for s in self.stages), key=lambda m: m["total"])

    def max_micro_batch(self, capacity: float) -> int:
        """The most sequences a micro-batch may hold with every stage's device within ``capacity`` bytes: the
        activations and the transient peak grow with it, the model states do not (0: none fits)."""
        most = None
        for stage in self.stages:
            m = self.stage_memory(stage)
            fixed = m["weights"] + m["gradients"] + m["optimizer"]
            per = (m["activations"] + m["transient"] - stage.fixed_transient) / self.batch
            room = capacity - fixed - stage.fixed_transient
            fits = 0 if room < 0 else (int(room // per) if per else 10**9)
            most = fits if most is None else min(most, fits)
        return most or 0


def check_training(precision: Precision, optimizer: str, zero: int, dp: int, recompute: str) -> None:
    """The training choices, each refused in one line naming its keyword."""
    if precision.weight not in TRAINABLE or precision.act not in TRAINABLE:
        raise OpcountValueError(
            f"training needs float weights and activations ({', '.join(TRAINABLE)}), "
            f"got weight {precision.weight}, act {precision.act}"
        )
    if optimizer not in OPTIMIZERS:
        raise OpcountValueError(f"unknown optimizer {optimizer!r}; choose {', '.join(OPTIMIZERS)}")
    if recompute not in RECOMPUTE:
        raise OpcountValueError(f"unknown recompute {recompute!r}; choose {', '.join(RECOMPUTE)}")
    if zero not in (0, 1, 2, 3):
        raise OpcountValueError(f"zero must be 0, 1, 2 or 3, got {zero!r}")
    if not isinstance(dp, int) or isinstance(dp, bool) or dp < 1:
        raise OpcountValueError(f"dp must be an integer >= 1, got {dp!r}")


def check_layout(llm: CausalLM, layout: TrainLayout, seq_len: int) -> Sharding:
    """``layout`` against the model, refused naming its flag (:meth:`TrainLayout.check_model`, and a model with
    no tensor-parallel plan under ``--tp``), before anything is traced; returns what tensor parallelism splits."""
    model, config = llm.model, llm.config
    found = layers_of(model)
    heads = getattr(config, "num_attention_heads", None)
    experts = {e.count for e in llm.experts}
    layout.check_model(
        layers=max(len(found[1]) if found is not None else 0, 1), heads=heads,
        kv_heads=getattr(config, "num_key_value_heads", None) or heads, seq_len=seq_len,
        experts=min(experts) if experts else None,
    )  # fmt: skip
    sharding = Sharding.of(model) if layout.tp > 1 else Sharding({}, frozenset(), frozenset())
    if layout.tp > 1 and not sharding.regions:
        raise OpcountValueError(
            f"--tp {layout.tp}: {type(model).__name__} has no tensor-parallel plan (tp_plan) splitting its attention "
            "and MLP: opcount does not guess which weights to split"
        )
    return sharding


def train_step(
    llm: CausalLM,
    *,
    seq_len: int,
    batch: int = 1,
    optimizer: str = "adamw",
    zero: int = 0,
    dp: int = 1,
    recompute: str = "none",
    hardware: Hardware | str | None = None,
    flops_per_mac: int = 1,
    preset: str = "default",
    layout: TrainLayout | None = None,
    traced: Traced | None = None,
) -> TrainingCost:
    """One training step of ``llm``: micro-batches of ``batch`` sequences of ``seq_len`` tokens on ``layout``
    (None: ``dp`` data-parallel replicas, one micro-batch each); ``traced``: the micro-batch's trace
    (:func:`trace_step`) when it is already at hand, traced here when None."""
    if layout is None:
        layout = TrainLayout(dp=dp)
    elif dp not in (1, layout.dp):
        raise OpcountValueError(f"dp {dp} with a layout of dp {layout.dp}: give it in the layout")
    check_training(llm.precision, optimizer, zero, layout.dp, recompute)
    model, config = llm.model, llm.config
    found = layers_of(model)
    prefix = found[0] if found is not None else None
    count = len(found[1]) if found is not None else 0
    sharding = check_layout(llm, layout, seq_len)
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if traced is None or (traced.batch, traced.seq_len) != (batch, seq_len):
        traced = trace_step(llm, seq_len=seq_len, batch=batch, flops_per_mac=flops_per_mac, preset=preset)
    flops, saved = traced.flops, traced.saved
    saved.kept(recompute)  # refuses full recomputation of a model without layers
    itemsize = int(DTYPE_BYTES[llm.precision.stored])
    shapes = [tuple(p.shape) for p in model.parameters()]
    elements = sum(int(np.prod(s)) for s in shapes) or 1
    per_element = llm.weights.total / elements
    trace = flops.trace()
    forward = forward_calls(trace)
    hidden = int(getattr(config, "hidden_size", 0) or 0)
    per_layer, outside, remat = activations(saved, recompute, layout, sharding, hidden)
    split = stage_layers(count, layout.pp, layout.virtual_stages) if count else [[]]
    by_stage = parameters_by_stage(model, prefix, layout, sharding, count, [e.name for e in llm.experts])
    largest = _largest_backward(trace.calls[forward:], batch, seq_len) / (layout.tp * layout.cp)
    moe = [layer_of((e.name,), prefix) for e in llm.experts] if prefix is not None else []
    stages = []
    for k, layers in enumerate(split):
        states = stage_states(by_stage[k], per_element, itemsize, optimizer, zero, layout)
        # ZeRO-3 gathers a layer's weights whole (over dp) for its forward and backward, and its gradients
        # before the reduce-scatter: the largest layer's, held at once
        gathered = 0.0
        if zero == 3 and layers:
            gathered = 2 * states.weights * states.dp / len(layers)
        stages.append(
            StageShare(
                stage=k, layers=layers, time=0.0, flops=0.0, recompute_share=0.0, states=states,
                activations=sum(per_layer[i] for i in layers), outside=outside if k == len(split) - 1 else 0.0,
                rematerialised=remat if layers else 0.0, transient=largest + gathered, fixed_transient=gathered,
                moe_layers=sum(1 for i in moe if i in set(layers)),
            )
        )  # fmt: skip
    states = stages[0].states if len(stages) == 1 else max((s.states for s in stages), key=lambda s: s.total)
    cost = TrainingCost(
        batch=batch, seq_len=seq_len, precision=llm.precision, optimizer=optimizer, zero=zero, dp=layout.dp,
        recompute=recompute, flops=flops, states=states, saved=saved, layout=layout, stages=stages,
    )  # fmt: skip
    if hardware is None:
        return cost
    hw = lookup_hardware(hardware)
    if hw.name not in traced.priced:
        traffic = MemoryTrafficAnalysis(trace)
        traffic.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
        report = roofline(traffic, hardware=hw, dtype=llm.precision.act)
        # one kernel a call, as eager training runs
        traced.priced[hw.name] = report, schedule_kernels(traffic, report, "eager", dtype=llm.precision.act)
    report, kernels = traced.priced[hw.name]
    names = [f"{prefix}.{i}" for i in range(count)] if prefix is not None else []
    again = recomputed(trace.calls, forward, names, effective(saved, recompute), seq_len)
    whole = model_states(shapes, llm.weights.total, optimizer=optimizer, weight_itemsize=itemsize)
    compute, memory = kernels.compute_memory()
    seconds = np.maximum(compute, memory) + hw.efficiency.launch_s
    per_call = [float(seconds[kernels.kernel_of[i]]) if i in kernels.kernel_of else 0.0 for i in range(forward)]
    call_flops = [float(kernels.call_flops[i]) for i in range(forward)]
    extra = float(sum(seconds[kernels.kernel_of[i]] for i in again if i in kernels.kernel_of))
    peak = hw.peak_of("tensor", llm.precision.act) or max(
        (p for u in hw.units if (p := hw.peak_of(u, llm.precision.act)) is not None), default=0.0
    )
    if not peak:
        raise OpcountValueError(f"{hw.name} has no peak for {llm.precision.act}: MFU needs one")
    model_flops = flops.total() * 2 / flops_per_mac
    # the bound's compute: the matrix products at their peak, and no less than the FLOPs MFU counts
    # (every FLOP of the step, recomputed ones added) at the tensor peak, so MFU at the bound <= 1
    again_ids = {id(trace.calls[i]) for i in again}
    recomputed_flops = sum(t.layer.flops for t in report.layers if id(t.layer.call) in again_ids)
    matmul = (kernels.matmul_flops + sum(kernels.call_flops[i] for i in again)) / kernels.matmul_peak
    # compulsory: the trace's (weights read once, inputs, the loss), and every gradient written once
    compulsory = kernels.compulsory_bytes + whole.gradients
    step = StepTime(
        float(seconds.sum()), extra, 0.0, max(matmul, (model_flops + recomputed_flops) / peak),
        compulsory / hw.bandwidth,
    )  # fmt: skip
    time_shares = shares(trace.calls, forward, prefix, per_call, layout, sharding, count)
    flop_shares = shares(trace.calls, forward, prefix, call_flops, layout, sharding, count)
    again_set = set(again)
    again_weights = [per_call[i] if i in again_set else 0.0 for i in range(forward)]
    again_shares = shares(trace.calls, forward, prefix, again_weights, layout, sharding, count)
    cost.stages = stages = [
        StageShare(**{**vars(s), "time": t, "flops": f, "recompute_share": r})
        for s, t, f, r in zip(stages, time_shares, flop_shares, again_shares, strict=True)
    ]
    head_dim = int(getattr(config, "head_dim", 0) or (hidden // heads if heads else 0))
    shape = Shape(
        batch, seq_len, hidden, int(kv_heads or 0), head_dim, float(DTYPE_BYTES[llm.precision.act]),
        max((e.top_k for e in llm.experts), default=0),
    )  # fmt: skip
    parallel = price(
        layout, stages, kernels=step.compute, recompute=step.recompute, flops_time=step.flops_at_peak,
        recompute_flops_time=0.0, memory_time=step.bytes_at_bandwidth, shape=shape, recompute_mode=recompute,
        zero=zero, link=getattr(hw, "interconnect", None),
    )  # fmt: skip
    slowest = parallel.stages[parallel.slowest]
    cost.step = StepTime(
        step.compute, step.recompute, slowest.data_parallel, step.flops_at_peak, step.bytes_at_bandwidth
    )
    devices = layout.devices
    cost.throughput = Throughput(
        cost.tokens, parallel.time, devices, model_flops * layout.micro_batches * layout.dp, peak * devices,
        parallel.time_bound,
    )  # fmt: skip
    cost.roofline, cost.parallel = report, parallel
    cost.collectives = list(slowest.collectives)
    return cost


def _largest_backward(calls: Any, batch: int, seq_len: int) -> float:
    """Bytes of the largest activation gradient the backward pass writes (``[batch, seq, ...]`` or
    ``[batch x seq, ...]``: the logits' gradient, most often), held beside the saved activations: its workspace."""
    rows = (batch, batch * seq_len)
    return max(
        (o.nbytes for c in calls for o in c.outputs if isinstance(o, TensorSpec) and o.shape and o.shape[0] in rows),
        default=0.0,
    )
