"""Recurrent layers: one multiply-add per gate weight per token, per layer and direction."""

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis
from opcount.handles.rnn import rnn_gate_flops

from ._specs import C, L, T, flops


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
    assert flops("aten::lstm", inputs, [T(2, 5, 32), T(4, 2, 16), T(4, 2, 16)]) == 10 * (3072 + 6144)
    # gate arithmetic left out: 30 flops per hidden unit per token per layer-direction
    assert rnn_gate_flops("lstm", inputs) == 10 * 30 * 16 * 4


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
    assert flops("aten::lstm", inputs, [T(7, 4), T(1, 3, 4), T(1, 3, 16)]) == 7 * (64 * 8 + 64 * 4 + 4 * 16)


@pytest.mark.parametrize("op, gates", [("aten::gru", 3), ("aten::rnn_tanh", 1), ("aten::rnn_relu", 1)])
def test_gru_and_rnn(op, gates) -> None:
    # one layer, no bias, [T=6, B=2, I=8], hidden 16
    params = [T(gates * 16, 8), T(gates * 16, 16)]
    inputs = [T(6, 2, 8), T(1, 2, 16), L(*params), C(False), C(1), C(0.0), C(False), C(False), C(False)]
    assert flops(op, inputs, [T(6, 2, 16), T(1, 2, 16)]) == 12 * gates * 16 * 24


def test_traced_lstm_matches_the_formula() -> None:
    # the tracer's parameter list follows nn.LSTM's layout; 2 layers, bidirectional, 3 x 4 tokens
    model = nn.LSTM(6, 5, num_layers=2, bidirectional=True).eval()
    x = torch.randn(3, 4, 6)
    weights = sum(p.numel() for name, p in model.named_parameters() if "weight" in name)
    with torch.no_grad():
        total = FlopCountAnalysis(model, (x,), preset="macs").total()
    assert total == 12 * weights
