"""A traced training step cut into a layout's pipeline stages, per device: each stage's share of the step's
kernels (forward, backward and recomputation) and FLOPs, its weights and model states, and the activations its
schedule makes it hold.

The step is traced once on one device, for one micro-batch of the whole model. A stage's share of the
step is its forward operators' share (the backward operators carry no module scope; each runs for a forward
one), its layers' plus the embedding on the first stage and the final norm, output layer and loss on the last;
an operator that tensor parallelism splits (inside a block of the model's ``tp_plan``, or any operator with
sequence parallelism) runs on ``1 / tp`` of the work, every operator on ``1 / cp`` of the sequence.

The saved activations (measured per storage, :mod:`opcount.training.saved`) scale as Korthikanti et al. 2022
count them: without sequence parallelism a ``[batch, seq, hidden]`` tensor outside the split region (a norm's
input and output, the residual stream, a dropout mask) is whole on every tensor-parallel device, the rest (the
queries, keys and values, the score matrices, the MLP's inner activations, a row-parallel projection's input)
split; with sequence parallelism all of them are split. Context parallelism splits all of them by ``cp``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from torch import nn

from ...ir import OpCall
from ...training.layout import TrainLayout, stage_layers
from ...training.saved import SavedActivations
from ...training.states import ModelStates, model_states
from ..deploy.layout import ROW_SPLIT, Sharding


@dataclass(frozen=True)
class StageShare:
    """What one stage of one device runs and holds, for one micro-batch: ``time`` and ``flops``, the share of
    the traced step's (one device, the whole model) kernels' seconds and FLOPs; ``recompute_share`` of its
    recomputed kernels; ``activations`` per micro-batch in flight, ``outside`` those held once (the logits and
    the loss on the last stage), ``rematerialised`` one layer's under full recomputation."""

    stage: int
    layers: list[int]
    time: float
    flops: float
    recompute_share: float
    states: ModelStates
    activations: float
    outside: float
    rematerialised: float
    transient: float
    fixed_transient: float = 0.0  # of ``transient``, what does not grow with the micro-batch (ZeRO-3's gathers)
    moe_layers: int = 0


def layer_of(scope: Sequence[str], prefix: str) -> int | None:
    """The layer (``prefix.N``) a call's scope runs in, None outside the layers."""
    pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)(\.|$)")
    for name in scope:
        found = pattern.match(name)
        if found:
            return int(found.group(1))
    return None


def places(calls: Sequence[OpCall], forward: int, prefix: str | None) -> list[int | None]:
    """Per forward call: its layer, ``-1`` before the first layer (the embedding), None after (the head, the loss)."""
    out: list[int | None] = []
    seen = False
    for call in calls[:forward]:
        layer = layer_of(call.scope, prefix) if prefix is not None else None
        seen = seen or layer is not None
        out.append(layer if layer is not None else (None if seen else -1))
    return out


def _stage_of(place: int | None, owner: dict[int, int], last: int) -> int:
    if place is None:
        return last
    return 0 if place == -1 else owner[place]


def shares(
    calls: Sequence[OpCall],
    forward: int,
    prefix: str | None,
    weights: Sequence[float],
    layout: TrainLayout,
    sharding: Sharding,
    layers: int,
) -> list[float]:
    """Each stage's share of the forward calls' ``weights`` (seconds or FLOPs), per device."""
    split = stage_layers(layers, layout.pp, layout.virtual_stages) if layers else [[] for _ in range(layout.pp)]
    owner = {layer: k for k, held in enumerate(split) for layer in held}
    total = sum(weights[:forward]) or 1.0
    out = [0.0] * layout.pp
    for call, place, weight in zip(calls[:forward], places(calls, forward, prefix), weights, strict=False):
        divided = layout.sequence_parallel or sharding.in_region(call.scope) is not None
        out[_stage_of(place, owner, layout.pp - 1)] += weight / ((layout.tp if divided else 1) * layout.cp)
    return [w / total for w in out]


def _replicated(saved_width: int, dims: int, module: str, hidden: int, sharding: Sharding) -> bool:
    """Whether tensor parallelism without sequence parallelism keeps a saved tensor whole on every device."""
    return dims >= 3 and saved_width == hidden and sharding.styles.get(module) not in ROW_SPLIT


def activations(
    saved: SavedActivations, recompute: str, layout: TrainLayout, sharding: Sharding, hidden: int
) -> tuple[list[float], float, float]:
    """Per device, for one micro-batch: each layer's activations held until its backward, those outside the
    layers, and (full recomputation) the most one layer rematerialises."""
    count = len(saved.layer_inputs)
    per_layer = [0.0] * count
    whole = [0.0] * count  # every saved tensor of the layer: what full recomputation brings back
    outside = 0.0
    tp, cp = layout.tp, layout.cp

    def share(nbytes: int, width: int, dims: int, module: str) -> float:
        kept = layout.sequence_parallel or not _replicated(width, dims, module, hidden, sharding)
        return nbytes / cp / (tp if kept else 1)

    for s in saved.saved:
        size = share(s.nbytes, s.width, s.dims, s.module)
        if s.layer is None:
            if recompute != "full" or s.key not in saved.input_keys:
                outside += size
            continue
        if s.key in saved.input_keys:
            if recompute == "full":
                continue  # the checkpoint: the layer's input, counted below, not again with the layer's own
        else:
            whole[s.layer] += size
        if recompute == "selective" and s.scores:
            continue
        if recompute != "full":
            per_layer[s.layer] += size
    if recompute == "full":
        # the layer's input as Megatron-LM checkpoints it: split by tp only with sequence parallelism
        per_layer = [b / cp / (tp if layout.sequence_parallel else 1) for b in saved.layer_inputs]
        return per_layer, outside, max(whole, default=0.0)
    return per_layer, outside, 0.0


def parameters_by_stage(
    model: nn.Module, prefix: str | None, layout: TrainLayout, sharding: Sharding, layers: int, experts: Sequence[str]
) -> list[tuple[list[tuple[int, ...]], list[tuple[int, ...]]]]:
    """Per stage, the shapes of a device's share of the dense and the expert parameters (shared ones once a
    stage: tied input and output embeddings are held by the first and the last stage, as Megatron-LM keeps a copy
    on each): those tensor parallelism splits ``1 / tp`` (their first size), the ``experts`` blocks'
    ``1 / (tp x ep)`` (Megatron-LM's expert tensor parallelism is tensor parallelism's by default)."""
    split = stage_layers(layers, layout.pp, layout.virtual_stages) if layers else [[] for _ in range(layout.pp)]
    owner = {layer: k for k, held in enumerate(split) for layer in held}
    out: list[tuple[list[tuple[int, ...]], list[tuple[int, ...]]]] = [([], []) for _ in range(layout.pp)]
    held: set[tuple[int, int]] = set()  # (parameter, stage) pairs counted
    seen = False
    for name, param in model.named_parameters(remove_duplicate=False):
        layer = layer_of((name,), prefix) if prefix is not None else None
        seen = seen or layer is not None
        stage = owner[layer] if layer is not None else (layout.pp - 1 if seen else 0)
        if (id(param), stage) in held:
            continue
        held.add((id(param), stage))
        expert = any(name.startswith(f"{e}.") for e in experts)
        degree = (layout.tp if sharding.split(name) or expert else 1) * (layout.ep if expert else 1)
        shape = tuple(param.shape) or (1,)
        shape = (-(-shape[0] // degree), *shape[1:])
        out[stage][1 if expert else 0].append(shape)
    return out


def stage_states(
    shapes: tuple[list[tuple[int, ...]], list[tuple[int, ...]]],
    bytes_per_element: float,
    itemsize: int,
    optimizer: str,
    zero: int,
    layout: TrainLayout,
) -> ModelStates:
    """A stage's model states per device: ZeRO over the ``dp x cp`` devices holding the same dense weights, and
    over ``dp x cp / ep`` for the experts' (Megatron-LM's distributed optimizer and its expert data parallelism).
    ``bytes_per_element``: the weights' bytes as stored over their elements (a weight kept in float32 included)."""
    dense, experts = shapes
    group = layout.dp * layout.cp
    groups = [(dense + experts, group)] if layout.ep == 1 else [(dense, group), (experts, group // layout.ep)]
    parts = []
    for held, devices in groups:
        stored = round(sum(_numel(s) for s in held) * bytes_per_element)
        parts.append(model_states(held, stored, optimizer=optimizer, weight_itemsize=itemsize, zero=zero, dp=devices))
    return ModelStates(
        sum(p.weights for p in parts), sum(p.gradients for p in parts), sum(p.optimizer for p in parts), zero, group
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n
