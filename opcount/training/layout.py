"""A training layout as Megatron-LM and torchtitan run one: tensor (``tp``), pipeline (``pp``), context
(``cp``), expert (``ep``) and data (``dp``) parallelism, sequence parallelism, micro-batches and virtual
pipeline stages; which layers each stage runs, and what its pipeline schedule makes a stage hold and wait.

Megatron-LM's names for the same knobs: ``--tensor-model-parallel-size``, ``--pipeline-model-parallel-size``,
``--context-parallel-size``, ``--expert-model-parallel-size``, data parallelism the devices left,
``--sequence-parallel``, ``--micro-batch-size`` x ``--global-batch-size``, and
``--num-layers-per-virtual-pipeline-stage`` (here the number of model chunks a device runs,
``virtual_stages``). Ranks are ordered as Megatron-LM's default (``tp-cp-ep-dp-pp``): a tensor-parallel group is
``tp`` neighbouring devices, a context-parallel group strides by ``tp``, a data-parallel one by ``tp x cp``, and
consecutive pipeline stages lie ``tp x cp x dp`` devices apart.

The schedule is 1F1B (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
Using Megatron-LM"): with ``m`` micro-batches over ``p`` stages, stage ``k`` (from 0) runs ``p - k - 1`` forward
passes before its first backward, so it holds ``min(p - k, m)`` micro-batches' activations; the bubble is
``(p - 1)`` micro-batch times, ``(p - 1) / (m + p - 1)`` of the step. Interleaved with ``v`` model chunks per
device, the bubble shrinks to ``(p - 1) / v`` micro-batch times, and stage ``k`` runs ``2 (p - k - 1) + (v - 1) p``
chunk forwards before its first backward (Megatron-LM's warm-up), holding one more: the first stage holds
``v p + p - 1`` chunks, ``L (1 + (p - 1) / (p v))`` layers' worth of one micro-batch (Korthikanti et al. 2022,
"Reducing Activation Recomputation in Large Transformer Models", section 4.2.3).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import OpcountValueError

MAX_DEGREE = 65536  # devices in one dimension of a layout: more than any cluster built
DEGREES = ("tp", "pp", "cp", "ep", "dp", "micro_batches", "virtual_stages")


def flag(name: str) -> str:
    """The command line's flag of a layout field."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class TrainLayout:
    """``tp x cp x dp x pp`` devices; experts over ``ep`` of a stage's ``cp x dp`` devices; ``micro_batches``
    per step through the pipeline (gradient accumulation without one); ``virtual_stages`` model chunks a device."""

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    sequence_parallel: bool = False
    micro_batches: int = 1
    virtual_stages: int = 1

    def __post_init__(self) -> None:
        for name in DEGREES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DEGREE:
                raise OpcountValueError(
                    f"{flag(name)}: expected a whole number from 1 to {MAX_DEGREE:,}, got {value!r}"
                )
        if (self.cp * self.dp) % self.ep:
            raise OpcountValueError(
                f"--ep {self.ep}: expert parallelism spreads the experts over a stage's data- and context-parallel "
                f"devices: --ep must divide --dp x --cp ({self.dp * self.cp})"
            )
        if self.virtual_stages > 1 and self.pp == 1:
            raise OpcountValueError(f"--virtual-stages {self.virtual_stages}: interleaves a pipeline: give --pp")
        if self.virtual_stages > 1 and self.micro_batches % self.pp:
            # Megatron-LM's interleaved schedule runs the micro-batches in groups of pp
            raise OpcountValueError(
                f"--virtual-stages {self.virtual_stages}: the interleaved schedule needs --micro-batches a multiple "
                f"of --pp {self.pp}, got {self.micro_batches}"
            )

    @property
    def devices(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def replica(self) -> int:
        """Devices holding one copy of the model: ``tp x cp x pp``."""
        return self.tp * self.cp * self.pp

    def bubble_fraction(self) -> float:
        """The share of the step the pipeline idles: ``((p - 1) / v) / (m + (p - 1) / v)``."""
        idle = (self.pp - 1) / self.virtual_stages
        return idle / (self.micro_batches + idle)

    def step_slots(self) -> float:
        """The step's length in one micro-batch's forward and backward on one stage: ``m + (p - 1) / v``."""
        return self.micro_batches + (self.pp - 1) / self.virtual_stages

    def in_flight(self, stage: int) -> float:
        """Micro-batches whose activations stage ``stage`` (from 0) holds at its peak, in units of the whole
        stage's layers: ``min(p - k, m)``; interleaved, chunks in flight over ``v``."""
        p, m, v = self.pp, self.micro_batches, self.virtual_stages
        if not 0 <= stage < p:
            raise OpcountValueError(f"stage {stage}: the pipeline has stages 0 to {p - 1}")
        if v == 1:
            return float(min(p - stage, m))
        chunks = 2 * (p - stage - 1) + (v - 1) * p + 1
        return min(chunks, v * m) / v

    def label(self) -> str:
        parts = [f"{k}{getattr(self, k)}" for k in ("tp", "cp", "pp", "ep", "dp") if getattr(self, k) > 1]
        text = " x ".join(p for p in parts if not p.startswith("ep")) or "1"
        text += f" = {self.devices} device{'s' if self.devices > 1 else ''}"
        if self.ep > 1:
            text += f", ep{self.ep}"
        if self.sequence_parallel:
            text += ", sequence parallel"
        if self.pp > 1:
            text += f", {self.micro_batches} micro-batches"
            text += f", {self.virtual_stages} virtual stages" if self.virtual_stages > 1 else ""
        return text

    def as_dict(self) -> dict[str, int | bool]:
        return {
            "tp": self.tp, "pp": self.pp, "cp": self.cp, "ep": self.ep, "dp": self.dp, "devices": self.devices,
            "sequence_parallel": self.sequence_parallel, "micro_batches": self.micro_batches,
            "virtual_stages": self.virtual_stages,
        }  # fmt: skip

    def check_model(
        self, *, layers: int, heads: int | None, kv_heads: int | None, seq_len: int, experts: int | None
    ) -> None:
        """A layout the model cannot run, refused naming its flag (Megatron-LM's own checks)."""
        if heads is not None and heads % self.tp:
            raise OpcountValueError(f"--tp {self.tp}: does not divide the model's {heads} attention heads")
        if kv_heads is not None and kv_heads % self.tp:
            raise OpcountValueError(f"--tp {self.tp}: does not divide the model's {kv_heads} key/value heads")
        if self.pp > layers:
            raise OpcountValueError(f"--pp {self.pp}: more pipeline stages than the model's {layers} layers")
        if self.pp * self.virtual_stages > layers:
            raise OpcountValueError(
                f"--virtual-stages {self.virtual_stages}: {self.pp} x {self.virtual_stages} model chunks, more than "
                f"the model's {layers} layers"
            )
        if seq_len % self.cp:
            raise OpcountValueError(f"--cp {self.cp}: does not divide the sequence of {seq_len} tokens (--seq-len)")
        if self.ep > 1 and experts is None:
            raise OpcountValueError(f"--ep {self.ep}: the model has no experts to spread")
        if self.ep > 1 and experts is not None and experts % self.ep:
            raise OpcountValueError(f"--ep {self.ep}: does not divide the model's {experts} experts")


def stage_layers(layers: int, pp: int, virtual_stages: int = 1) -> list[list[int]]:
    """The layers each of ``pp`` stages runs: the model cut into ``pp x v`` contiguous chunks, stage ``k``
    running chunks ``k, k + p, ...``. Layers that do not divide evenly go to the middle chunks first: the
    first and last stages also run the embedding and the output layer and loss (Llama 3's 126 layers over
    16 stages: 7 on the first and the last, 8 on the others, as the Llama 3 paper says its run did)."""
    chunks = pp * virtual_stages
    if not 1 <= chunks <= layers:
        raise OpcountValueError(f"{chunks} pipeline chunks for {layers} layers")
    base, extra = divmod(layers, chunks)
    # the middle chunks first: farthest from either end, the earlier of a tie
    order = sorted(range(chunks), key=lambda c: (-min(c, chunks - 1 - c), c))
    counts = [base + (1 if c in set(order[:extra]) else 0) for c in range(chunks)]
    starts = [sum(counts[:c]) for c in range(chunks)]
    out: list[list[int]] = [[] for _ in range(pp)]
    for c in range(chunks):
        out[c % pp].extend(range(starts[c], starts[c] + counts[c]))
    return out
