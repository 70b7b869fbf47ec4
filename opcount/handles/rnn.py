"""Recurrent layers (aten::lstm, gru, rnn_tanh, rnn_relu): the gate products, as multiply-adds.

Every time step of every layer and direction multiplies the step's input by ``w_ih`` and the
previous hidden state by ``w_hh`` (and, for an LSTM with ``proj_size``, the new hidden state by
``w_hr``): one multiply-add per weight element per token. So for ``T*B`` tokens (or the packed
sequence's total length) the count is ``tokens * sum(numel(w))`` over the weight matrices of the
flat ``params`` list; deeper layers' input width and bidirectionality are read from the weights.

The per-step gate arithmetic (biases, sigmoid/tanh, cell update: 30 flops per hidden unit for an
LSTM, 23 for a GRU, 4 for an RNN in chainer-computational-cost's terms) is not included: a handle counts
either multiply-adds or flops, and the gate products dominate (hidden size times larger).
:func:`rnn_gate_flops` gives that part for who wants it.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import ListSpec, Spec, TensorSpec, const, tensor, tensors
from ._shapes import numel
from .registry import FLOPS

# lstm.input(input, hx[], params[], has_biases, num_layers, dropout, train, bidirectional, batch_first)
# lstm.data(data, batch_sizes, hx[], params[], has_biases, num_layers, dropout, train, bidirectional)
# gru.input / rnn_*.input(input, hx, params[], has_biases, num_layers, dropout, train, bidirectional, batch_first)
# gru.data / rnn_*.data(data, batch_sizes, hx, params[], has_biases, num_layers, dropout, train, bidirectional)
RNN_INPUT = 0
PARAMS_INPUT_OVERLOAD, PARAMS_DATA_OVERLOAD = 2, 3
# offsets from the params argument
HAS_BIASES, NUM_LAYERS, BIDIRECTIONAL = 1, 2, 5

# Seed-000-style flops per hidden unit per step of the gate arithmetic (biases included):
# LSTM: 4 gate sums (ih + hh + 2 biases: 3 each = 12), 3 sigmoids (12), 2 tanh (2), c = f*c + i*g (3), h = o*tanh(c) (1).
# GRU: r, z sums (6) + n's two biased products (2) + r,z sigmoids (8) + r*hn, add, tanh (3) + (1-z)*n + z*h (4).
# RNN: ih + hh + 2 biases (3) + tanh or relu (1).
GATE_FLOPS = {"lstm": 30, "gru": 23, "rnn_tanh": 4, "rnn_relu": 4}


def _params(inputs: Sequence[Spec], op: str) -> tuple[TensorSpec, ...]:
    """The flat weight list: the last list argument among the first four (hx is a list only for lstm)."""
    for index in (PARAMS_DATA_OVERLOAD, PARAMS_INPUT_OVERLOAD):
        if len(inputs) > index and isinstance(inputs[index], ListSpec):
            return tensors(inputs[index])
    raise ValueError(f"{op}: no parameter list at argument {PARAMS_INPUT_OVERLOAD} or {PARAMS_DATA_OVERLOAD}")


def rnn_macs(x_shape: Sequence[int], params: Sequence[TensorSpec]) -> int:
    """``tokens * sum(numel(w) for 2-D w in params)``, ``tokens = numel(x) / x.shape[-1]``."""
    if not x_shape or x_shape[-1] == 0:
        return 0
    tokens = numel(x_shape) // x_shape[-1]
    return tokens * sum(p.numel for p in params if p.rank == 2)


def rnn_gate_flops(kind: str, inputs: Sequence[Spec]) -> int:
    """Flops of the per-step gate arithmetic the handle leaves out: tokens * GATE_FLOPS[kind] * sum(hidden sizes).

    The hidden size of each layer and direction is read from its ``w_hh`` (``[gates * H, H or proj]``),
    the second weight matrix of its group in ``params``.
    """
    gates = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}[kind]
    params = _params(inputs, kind)
    index = PARAMS_DATA_OVERLOAD if isinstance(inputs[PARAMS_DATA_OVERLOAD], ListSpec) else PARAMS_INPUT_OVERLOAD
    num_layers, bidirectional = const(inputs[index + NUM_LAYERS]), const(inputs[index + BIDIRECTIONAL])
    if not isinstance(num_layers, int) or not isinstance(bidirectional, bool):
        raise ValueError(f"aten::{kind}: num_layers {num_layers!r} / bidirectional {bidirectional!r} not constants")
    matrices = [p for p in params if p.rank == 2]
    groups = num_layers * (2 if bidirectional else 1)
    if not groups or len(matrices) % groups:
        raise ValueError(f"aten::{kind}: {len(matrices)} weight matrices for {groups} layer-directions")
    per_group = len(matrices) // groups
    hidden = sum(matrices[g * per_group + 1].shape[0] // gates for g in range(groups))
    x = tensor(inputs[RNN_INPUT])
    tokens = x.numel // x.shape[-1] if x.shape and x.shape[-1] else 0
    return tokens * GATE_FLOPS[kind] * hidden


# (out, h_n[, c_n]) = lstm(x [T, B, I] | [B, T, I] | packed [sum(T_b), I], hx, params, ...)
@FLOPS.register("aten::lstm", "aten::gru", "aten::rnn_tanh", "aten::rnn_relu", macs=True)
def recurrent(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> int:
    """tokens * sum(numel(w_ih) + numel(w_hh) (+ numel(w_hr))) over layers and directions: one multiply-add per gate weight per time step and sequence; gate nonlinearities not counted."""
    x = tensor(inputs[RNN_INPUT])
    return rnn_macs(x.shape, _params(inputs, "recurrent layer"))
