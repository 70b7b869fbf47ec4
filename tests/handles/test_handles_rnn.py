"""Recurrent layers and cells: one multiply-add per gate weight per token, per layer and direction,
and the gate arithmetic as flops (sigmoid 4, tanh 1, an add or a multiply 1)."""

import pytest
import torch
from torch import nn

from opcount import Cost, FlopCountAnalysis
from opcount.handles.rnn import rnn_gate_flops
from tests.fixtures.specs import NONE, C, L, T, cost


def _lstm_params(input_size, hidden, layers, bidirectional, bias=True, proj=0):
    dirs = 2 if bidirectional else 1
    out = proj or hidden
    params = []
    for layer in range(layers):
        width = input_size if layer == 0 else out * dirs
        for _ in range(dirs):
            params += [T(4 * hidden, width), T(4 * hidden, out)]
            if bias:
                params += [T(4 * hidden), T(4 * hidden)]
            if proj:
                params.append(T(proj, hidden))
    return params


def test_lstm_two_layers_bidirectional() -> None:
    # LSTM(8, 16, num_layers=2, bidirectional=True, batch_first=True) on [2, 5, 8]: 10 tokens
    # layer 0: 2 * (64*8 + 64*16) = 3072, layer 1: 2 * (64*32 + 64*16) = 6144
    params = _lstm_params(8, 16, 2, True)
    inputs = [T(2, 5, 8), L(T(4, 2, 16), T(4, 2, 16)), L(*params), C(True), C(2), C(0.0), C(False), C(True), C(True)]
    # gate arithmetic per hidden unit per token: 4 gates' two products and two biases summed
    # (4 x 3 adds), 3 sigmoids (3 x 4), tanh (1), c = f*c + i*g (3), h = o * tanh(c) (2): 30,
    # for 16 units in each of 4 layer-directions
    value = cost("aten::lstm", inputs, [T(2, 5, 32), T(4, 2, 16), T(4, 2, 16)])
    assert value == Cost(macs=10 * (3072 + 6144), flops=10 * 30 * 16 * 4)
    assert rnn_gate_flops("lstm", inputs) == value.flops


def test_lstm_projection_and_packed_data_overload() -> None:
    # LSTM(8, 16, proj_size=4): w_ih [64, 8], w_hh [64, 4], w_hr [4, 16]; packed data [7, 8]
    params = _lstm_params(8, 16, 1, False, proj=4)
    inputs = [
        T(7, 8),
        T(3, dtype="int64"),
        L(T(1, 3, 4), T(1, 3, 16)),
        L(*params),
        C(True),
        C(1),
        C(0.0),
        C(False),
        C(False),
    ]
    value = cost("aten::lstm", inputs, [T(7, 4), T(1, 3, 4), T(1, 3, 16)])
    # the gates run on the 16 hidden units (w_hh [64, 4]: 4 gates x 16), before the projection
    assert value == Cost(macs=7 * (64 * 8 + 64 * 4 + 4 * 16), flops=7 * 30 * 16)


# Gate flops per hidden unit without biases. GRU: r, z: one add of the two products, sigmoid 4
# (5 each); n: r * (W_hn h) (1), + W_in x (1), tanh (1); h = (1 - z) * n + z * h (4): 17.
# RNN: one add, then tanh or relu: 2.
@pytest.mark.parametrize(
    "op, gates, per_unit", [("aten::gru", 3, 17), ("aten::rnn_tanh", 1, 2), ("aten::rnn_relu", 1, 2)]
)
def test_gru_and_rnn(op, gates, per_unit) -> None:
    # one layer, no bias, [T=6, B=2, I=8], hidden 16
    params = [T(gates * 16, 8), T(gates * 16, 16)]
    inputs = [T(6, 2, 8), T(1, 2, 16), L(*params), C(False), C(1), C(0.0), C(False), C(False), C(False)]
    assert cost(op, inputs, [T(6, 2, 16), T(1, 2, 16)]) == Cost(macs=12 * gates * 16 * 24, flops=12 * per_unit * 16)


def test_biases_add_two_flops_per_gate_unit() -> None:
    # GRU with biases: 17 + 3 gates x 2 bias adds = 23; LSTM without: 30 - 4 gates x 2 = 22
    gru = [T(48, 8), T(48, 16), T(48), T(48)]
    inputs = [T(6, 2, 8), T(1, 2, 16), L(*gru), C(True), C(1), C(0.0), C(False), C(False), C(False)]
    assert cost("aten::gru", inputs, [T(6, 2, 16), T(1, 2, 16)]).flops == 12 * 23 * 16
    lstm = _lstm_params(8, 16, 1, False, bias=False)
    inputs = [T(6, 2, 8), L(T(1, 2, 16), T(1, 2, 16)), L(*lstm), C(False), C(1), C(0.0), C(False), C(False), C(False)]
    assert cost("aten::lstm", inputs, [T(6, 2, 16), T(1, 2, 16), T(1, 2, 16)]).flops == 12 * 22 * 16


@pytest.mark.parametrize(
    "cell, gates, per_unit", [(nn.LSTMCell, 4, 30), (nn.GRUCell, 3, 23), (nn.RNNCell, 1, 4)], ids=["lstm", "gru", "rnn"]
)
def test_cells_count_one_step(cell, gates, per_unit) -> None:
    # a cell on [B=3, I=5] with hidden 7: 3 * gates*7*(5 + 7) multiply-adds, 3 * 7 * per_unit flops.
    # The dispatch tracer records the cell whole (jit records its Python decomposition).
    model = cell(5, 7).eval()
    x = torch.randn(3, 5)
    with torch.no_grad():
        default = FlopCountAnalysis(model, (x,), tracer="dispatch")
        macs = FlopCountAnalysis(model, (x,), preset="macs", tracer="dispatch")
        doubled = FlopCountAnalysis(model, (x,), flops_per_mac=2, tracer="dispatch")
        assert macs.total() == 3 * gates * 7 * 12
        assert default.total() == macs.total() + 3 * 7 * per_unit
        assert doubled.total() == 2 * macs.total() + 3 * 7 * per_unit


def test_cell_without_bias() -> None:
    args = [T(3, 5), L(T(3, 7), T(3, 7)), T(28, 5), T(28, 7), NONE, NONE]
    assert cost("aten::lstm_cell", args, [T(3, 7), T(3, 7)]) == Cost(macs=3 * 28 * 12, flops=3 * 22 * 7)


def test_traced_lstm_matches_the_formula() -> None:
    # the tracer's parameter list follows nn.LSTM's layout; 2 layers, bidirectional, 3 x 4 tokens
    model = nn.LSTM(6, 5, num_layers=2, bidirectional=True).eval()
    x = torch.randn(3, 4, 6)
    weights = sum(p.numel() for name, p in model.named_parameters() if "weight" in name)
    with torch.no_grad():
        total = FlopCountAnalysis(model, (x,), preset="macs").total()
        default = FlopCountAnalysis(model, (x,)).total()
    assert total == 12 * weights
    # plus 30 flops per hidden unit per token in each of the 4 layer-directions
    assert default == total + 12 * 30 * 5 * 4
