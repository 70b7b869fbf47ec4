"""One training step of a causal LM, per device: its memory (weights, gradients, optimizer
states, activations saved for backward), its two times (the estimate and the bound) with the
data-parallel collectives, tokens/s, MFU, and the time and cost of a run of N tokens.

The step is traced once on the meta device (:class:`opcount.llm.causal_lm.CausalLM`'s model, the
dispatch tracer with ``mode="train"``: forward, the model's own loss on ``labels``, backward);
the saved activations are measured on one forward on fake tensors (:mod:`opcount.training.saved`),
the model states follow :mod:`opcount.training.states`, the time :mod:`opcount.training.step`.
Each device processes ``batch`` sequences of ``seq_len`` tokens (the micro-batch); ``dp``
devices process ``dp x batch`` per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..analysis import FlopCountAnalysis
from ..errors import OpcountValueError
from ..hardware.interconnect import Collective
from ..hardware.lookup import Hardware
from ..hardware.lookup import hardware as lookup_hardware
from ..ir import DTYPE_BYTES
from ..memory import MemoryTrafficAnalysis
from ..roofline import RooflineReport, roofline
from ..tracers.meta import TensorShape
from ..training.saved import RECOMPUTE, SavedActivations, effective, layers_of, measure
from ..training.states import OPTIMIZERS, ModelStates, model_states
from ..training.step import StepTime, Throughput, forward_calls, gradient_sync, recomputed
from .attention.rope import dynamic_rope
from .causal_lm import CausalLM
from .kernels.estimate import schedule_kernels
from .precision.dtypes import Precision
from .precision.formats import TRAINABLE


@dataclass(kw_only=True)
class TrainingCost:
    """What one training step costs per device (see the module's docstring)."""

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
    roofline: RooflineReport | None = None
    step: StepTime | None = None
    collectives: list[Collective] = field(default_factory=list)
    throughput: Throughput | None = None

    @property
    def activations(self) -> int:
        """Bytes of activations held for backward under :attr:`recompute`."""
        return self.saved.kept(self.recompute)

    @property
    def tokens(self) -> int:
        """Tokens per step over every data-parallel device."""
        return self.batch * self.seq_len * self.dp

    def memory(self) -> dict[str, int]:
        """Per device: weights, KV cache (0: training keeps none), activations, gradients, optimizer, total."""
        s = self.states
        parts = {
            "weights": s.weights,
            "kv_cache": 0,
            "activations": self.activations,
            "gradients": s.gradients,
            "optimizer": s.optimizer,
        }
        return {**parts, "total": sum(parts.values())}


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
) -> TrainingCost:
    """One training step of ``llm`` on ``batch`` sequences of ``seq_len`` tokens per device."""
    check_training(llm.precision, optimizer, zero, dp, recompute)
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
    params = list(model.parameters())
    weight_bytes = llm.weights.total
    itemsize = int(DTYPE_BYTES[llm.precision.stored])
    shapes = [tuple(p.shape) for p in params]
    states = model_states(shapes, weight_bytes, optimizer=optimizer, weight_itemsize=itemsize, zero=zero, dp=dp)
    cost = TrainingCost(
        batch=batch, seq_len=seq_len, precision=llm.precision, optimizer=optimizer, zero=zero, dp=dp,
        recompute=recompute, flops=flops, states=states, saved=saved,
    )  # fmt: skip
    if hardware is None:
        saved.kept(recompute)  # refuses full recomputation of a model without layers
        return cost
    hw = lookup_hardware(hardware)
    traffic = MemoryTrafficAnalysis(flops.trace())
    traffic.unsupported_ops_warnings(False).uncalled_modules_warnings(False)
    report = roofline(traffic, hardware=hw, dtype=llm.precision.act)
    trace = flops.trace()
    found = layers_of(model)
    layers = [f"{found[0]}.{i}" for i in range(len(found[1]))] if found is not None else []
    again = recomputed(trace.calls, forward_calls(trace), layers, effective(saved, recompute), seq_len)
    whole = model_states(shapes, weight_bytes, optimizer=optimizer, weight_itemsize=itemsize)
    collectives = gradient_sync(whole.gradients, whole.weights, zero, dp, getattr(hw, "interconnect", None))
    # one kernel a call, as eager training runs
    kernels = schedule_kernels(traffic, report, "eager", dtype=llm.precision.act)
    compute, memory = kernels.compute_memory()
    seconds = np.maximum(compute, memory) + hw.efficiency.launch_s
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
        float(seconds.sum()),
        extra,
        float(sum(c.time for c in collectives)),
        max(matmul, (model_flops + recomputed_flops) / peak),
        compulsory / hw.bandwidth,
    )
    throughput = Throughput(batch * seq_len * dp, step.time, dp, model_flops * dp, peak * dp, step.time_bound)
    cost.roofline, cost.step, cost.collectives, cost.throughput = report, step, collectives, throughput
    saved.kept(recompute)
    return cost
