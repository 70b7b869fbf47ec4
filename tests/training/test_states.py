"""Model states per device against the ZeRO paper's closed forms (Rajbhandari et al. 2020):
mixed-precision Adam is 2 (weights) + 2 (gradients) + 12 (float32 master weights, momentum and
variance) bytes per parameter; ZeRO over N devices leaves 2 + 2 + 12/N (stage 1), 2 + 14/N
(stage 2), 16/N (stage 3)."""

from __future__ import annotations

import pytest

from opcount.errors import OpcountValueError
from opcount.training.states import model_states, optimizer_state_bytes

PSI = 7_500_000_000  # the paper's 7.5B-parameter model


def states(zero: int, dp: int, psi: int = PSI, optimizer: str = "adamw", itemsize: int = 2):
    return model_states([(psi,)], itemsize * psi, optimizer=optimizer, weight_itemsize=itemsize, zero=zero, dp=dp)


@pytest.mark.parametrize("dp", [2, 8, 64])
def test_zero_stages_bytes_per_parameter(dp: int) -> None:
    psi = 1_000 * dp  # divisible by dp: no rounding
    per_param = {z: states(z, dp, psi).total / psi for z in range(4)}
    assert per_param[0] == 16
    assert per_param[1] == pytest.approx(2 + 2 + 12 / dp)
    assert per_param[2] == pytest.approx(2 + 14 / dp)
    assert per_param[3] == pytest.approx(16 / dp)


def test_zero_paper_figure_1() -> None:
    """The paper's Figure 1: 7.5B parameters on 64 devices, K = 12: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB."""
    # 16 x 7.5e9 = 120e9; (4 + 12/64) x 7.5e9 = 31.41e9; (2 + 14/64) x 7.5e9 = 16.64e9; 16/64 x 7.5e9 = 1.875e9
    gb = [states(z, 64).total / 1e9 for z in range(4)]
    assert [round(g, 1) for g in gb] == [120.0, 31.4, 16.6, 1.9]


def test_the_parts_of_each_stage() -> None:
    s = states(2, 4, psi=400)
    assert (s.weights, s.gradients, s.optimizer) == (800, 800 // 4, 12 * 400 // 4)
    s = states(1, 4, psi=400)
    assert (s.weights, s.gradients, s.optimizer) == (800, 800, 12 * 400 // 4)


def test_uneven_shares_round_up() -> None:
    # 10 parameters, ZeRO-3 over 3 devices: 20 weight bytes -> the device holding most has ceil(20/3) = 7
    assert states(3, 3, psi=10).weights == 7


@pytest.mark.parametrize(
    ("optimizer", "mixed", "full"),
    [
        # float32 states per parameter; mixed precision adds the 4-byte master copy
        ("adamw", 8 + 4, 8),
        ("adam", 8 + 4, 8),
        ("sgd", 0 + 4, 0),
        ("sgd-momentum", 4 + 4, 4),
        ("lion", 4 + 4, 4),
    ],
)
def test_optimizer_bytes_per_parameter(optimizer: str, mixed: int, full: int) -> None:
    assert states(0, 1, psi=1000, optimizer=optimizer, itemsize=2).optimizer == mixed * 1000
    assert states(0, 1, psi=1000, optimizer=optimizer, itemsize=4).optimizer == full * 1000
    assert states(0, 1, psi=1000, optimizer=optimizer, itemsize=4).gradients == 4 * 1000


def test_adafactor_factors_matrices() -> None:
    # a 3 x 5 matrix keeps a row (3) and a column (5) vector; a bias of 5 its full second moment;
    # a [2, 3, 5] tensor one pair per matrix: 2 x (3 + 5); float32: 4 bytes each
    assert optimizer_state_bytes("adafactor", [(3, 5), (5,), (2, 3, 5)]) == 4 * ((3 + 5) + 5 + 2 * (3 + 5))
    # mixed precision adds the master weights: 4 x (15 + 5 + 30)
    s = model_states([(3, 5), (5,), (2, 3, 5)], 2 * 50, optimizer="adafactor", weight_itemsize=2)
    assert s.optimizer == 4 * 29 + 4 * 50


def test_bad_values_are_refused() -> None:
    with pytest.raises(OpcountValueError, match="unknown optimizer 'rmsprop'"):
        optimizer_state_bytes("rmsprop", [(3,)])
    with pytest.raises(OpcountValueError, match="zero must be"):
        states(4, 8)
    with pytest.raises(OpcountValueError, match="dp must be"):
        states(1, 0)


def test_states_of_any_model() -> None:
    import torch
    from torch import nn

    from opcount.training.states import states_of

    model = nn.Sequential(nn.Linear(10, 20), nn.Linear(20, 5))  # 220 + 105 = 325 parameters, float32
    model[1].weight.requires_grad_(False)  # 100 frozen: weights only
    s = states_of(model, "adamw")
    assert (s.weights, s.gradients, s.optimizer) == (4 * 325, 4 * 225, 8 * 225)  # float32: no master copy
    half = states_of(model.to(torch.bfloat16), "sgd-momentum", zero=3, dp=5)
    # bfloat16: 2-byte weights and gradients, momentum + master copy 4 + 4; ZeRO-3 over 5 devices
    assert (half.weights, half.gradients, half.optimizer) == (2 * 325 // 5, 2 * 225 // 5, 8 * 225 // 5)
