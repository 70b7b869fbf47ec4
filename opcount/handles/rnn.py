"""Recurrent layers and cells (aten::lstm, gru, rnn_tanh, rnn_relu and their ``_cell`` forms).

Each handle returns a :class:`~opcount.handles.counts.Cost`:

- multiply-adds, the gate products: every time step of every layer and direction multiplies the
  step's input by ``w_ih`` and the previous hidden state by ``w_hh`` (and, for an LSTM with
  ``proj_size``, the new hidden state by ``w_hr``): one multiply-add per weight element per
  token, ``tokens * sum(numel(w))`` over the weight matrices (deeper layers' input width and
  bidirectionality are read from the weights);
- flops, the gate arithmetic per hidden unit per token (chainer-computational-cost's per-element
  conventions, as :mod:`.elementwise` and :mod:`.nonlinearity` use them: sigmoid 4, tanh 1,
  relu 1, an add or a multiply 1), written out at :data:`GATE_FLOPS`.

``preset="macs"`` keeps only the multiply-adds.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..ir import ListSpec, Spec, TensorSpec, const, tensor, tensors
from ._shapes import numel
from .counts import Cost
from .registry import FLOPS, SpecFn

# lstm.input(input, hx[], params[], has_biases, num_layers, dropout, train, bidirectional, batch_first)
# lstm.data(data, batch_sizes, hx[], params[], has_biases, num_layers, dropout, train, bidirectional)
# gru.input / rnn_*.input(input, hx, params[], has_biases, num_layers, dropout, train, bidirectional, batch_first)
# gru.data / rnn_*.data(data, batch_sizes, hx, params[], has_biases, num_layers, dropout, train, bidirectional)
RNN_INPUT = 0
PARAMS_INPUT_OVERLOAD, PARAMS_DATA_OVERLOAD = 2, 3
# offsets from the params argument
HAS_BIASES, NUM_LAYERS, BIDIRECTIONAL = 1, 2, 5

# Flops per hidden unit per token of the gate arithmetic, with biases (chainer-computational-cost):
# LSTM: 4 gates, each W_ih x + W_hh h + b_ih + b_hh (3 adds: 12); sigmoid on i, f, o (3 x 4 = 12);
#   tanh on g (1); c' = f*c + i*g (2 multiplies, 1 add: 3); h' = o * tanh(c') (tanh 1, multiply 1: 2). 30.
# GRU: r, z: W_i x + W_h h + b_i + b_h (3 adds each: 6) and sigmoid (4 each: 8); n: W_in x + b_in
#   and W_hn h + b_hn (2 adds), r * (...) (1), + (1), tanh (1); h' = (1 - z) * n + z * h (4). 23.
# RNN: W_ih x + W_hh h + b_ih + b_hh (3 adds) and tanh or relu (1). 4.
GATE_FLOPS = {"lstm": 30, "gru": 23, "rnn_tanh": 4, "rnn_relu": 4}
# The bias adds among them, left out when has_biases is false (two per gate: b_ih and b_hh).
BIAS_FLOPS = {"lstm": 8, "gru": 6, "rnn_tanh": 2, "rnn_relu": 2}
GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


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


def gate_flops(kind: str, biases: bool) -> int:
    """Flops per hidden unit per token of ``kind``'s gate arithmetic (:data:`GATE_FLOPS`)."""
    return GATE_FLOPS[kind] - (0 if biases else BIAS_FLOPS[kind])


def rnn_gate_flops(kind: str, inputs: Sequence[Spec]) -> int:
    """Flops of the per-step gate arithmetic: tokens * gate_flops(kind, has_biases) * sum(hidden sizes).

    The hidden size of each layer and direction is read from its ``w_hh`` (``[gates * H, H or proj]``),
    the second weight matrix of its group in ``params``.
    """
    params = _params(inputs, kind)
    index = PARAMS_DATA_OVERLOAD if isinstance(inputs[PARAMS_DATA_OVERLOAD], ListSpec) else PARAMS_INPUT_OVERLOAD
    num_layers, bidirectional = const(inputs[index + NUM_LAYERS]), const(inputs[index + BIDIRECTIONAL])
    biases = const(inputs[index + HAS_BIASES])
    if not isinstance(num_layers, int) or not isinstance(bidirectional, bool) or not isinstance(biases, bool):
        raise ValueError(
            f"aten::{kind}: has_biases {biases!r} / num_layers {num_layers!r} / bidirectional {bidirectional!r} "
            "not constants"
        )
    matrices = [p for p in params if p.rank == 2]
    groups = num_layers * (2 if bidirectional else 1)
    if not groups or len(matrices) % groups:
        raise ValueError(f"aten::{kind}: {len(matrices)} weight matrices for {groups} layer-directions")
    per_group = len(matrices) // groups
    hidden = sum(matrices[g * per_group + 1].shape[0] // GATES[kind] for g in range(groups))
    x = tensor(inputs[RNN_INPUT])
    tokens = x.numel // x.shape[-1] if x.shape and x.shape[-1] else 0
    return tokens * gate_flops(kind, biases) * hidden


def _layer(kind: str) -> SpecFn:
    # (out, h_n[, c_n]) = lstm(x [T, B, I] | [B, T, I] | packed [sum(T_b), I], hx, params, ...)
    def recurrent(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Cost:
        x = tensor(inputs[RNN_INPUT])
        return Cost(macs=rnn_macs(x.shape, _params(inputs, f"aten::{kind}")), flops=rnn_gate_flops(kind, inputs))

    recurrent.__doc__ = (
        f"tokens * sum(numel(w_ih) + numel(w_hh){' (+ numel(w_hr))' if kind == 'lstm' else ''}) multiply-adds over "
        f"layers and directions (one per gate weight per token), plus tokens * {GATE_FLOPS[kind]} flops per hidden "
        f"unit per layer-direction of gate arithmetic ({GATE_FLOPS[kind] - BIAS_FLOPS[kind]} without biases)."
    )
    recurrent.__module__ = __name__
    recurrent.__qualname__ = recurrent.__name__ = kind
    return recurrent


for _kind in GATE_FLOPS:
    FLOPS.register(f"aten::{_kind}", macs=True)(_layer(_kind))


# lstm_cell(input, hx[], w_ih, w_hh, b_ih, b_hh); gru_cell / rnn_*_cell(input, hx, w_ih, w_hh, b_ih, b_hh)
CELL_INPUT, CELL_W_IH, CELL_W_HH, CELL_B_IH = 0, 2, 3, 4


def _cell(kind: str) -> SpecFn:
    # h' (, c') = cell(x [B, I] | [I], hx, w_ih [gates * H, I], w_hh [gates * H, H], b_ih, b_hh)
    def cell(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Cost:
        x, w_ih, w_hh = (tensor(inputs[i]) for i in (CELL_INPUT, CELL_W_IH, CELL_W_HH))
        tokens = x.numel // x.shape[-1] if x.shape and x.shape[-1] else 0
        biases = len(inputs) > CELL_B_IH and isinstance(inputs[CELL_B_IH], TensorSpec)
        hidden = w_hh.shape[1]
        return Cost(macs=tokens * (w_ih.numel + w_hh.numel), flops=tokens * gate_flops(kind, biases) * hidden)

    cell.__doc__ = (
        f"B * (numel(w_ih) + numel(w_hh)) multiply-adds (one per gate weight per sequence) plus "
        f"B * {GATE_FLOPS[kind]} flops per hidden unit of gate arithmetic ({GATE_FLOPS[kind] - BIAS_FLOPS[kind]} "
        "without biases), as one step of the layer."
    )
    cell.__module__ = __name__
    cell.__qualname__ = cell.__name__ = f"{kind}_cell"
    return cell


for _kind in GATE_FLOPS:
    FLOPS.register(f"aten::{_kind}_cell", macs=True)(_cell(_kind))
