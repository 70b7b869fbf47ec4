"""A training layout's schedule against its closed forms worked by hand: the 1F1B bubble, the micro-batches a
stage holds (plain and interleaved, Narayanan et al. 2021; Korthikanti et al. 2022 section 4.2.3), the layers per
stage, and the layouts refused naming their flag."""

from __future__ import annotations

import pytest

from opcount.errors import OpcountValueError
from opcount.training.layout import TrainLayout, stage_layers


def test_1f1b_bubble() -> None:
    # (p - 1) / (m + p - 1): 4 stages, 8 micro-batches -> 3 / 11
    assert TrainLayout(pp=4, micro_batches=8).bubble_fraction() == pytest.approx(3 / 11)
    assert TrainLayout(pp=4, micro_batches=8).step_slots() == 11
    # interleaved over v = 2 chunks: the bubble's (p - 1) micro-batch times halved, 1.5 / (8 + 1.5)
    assert TrainLayout(pp=4, micro_batches=8, virtual_stages=2).bubble_fraction() == pytest.approx(1.5 / 9.5)
    # no pipeline, no bubble (gradient accumulation over 8 micro-batches)
    assert TrainLayout(micro_batches=8).bubble_fraction() == 0
    # Llama 3 405B's layout: 16 stages, 16 micro-batches of one sequence per replica -> 15 / 31
    assert TrainLayout(tp=8, pp=16, dp=128, micro_batches=16).bubble_fraction() == pytest.approx(15 / 31)


def test_micro_batches_a_stage_holds_under_1f1b() -> None:
    # stage k runs p - k - 1 forwards before its first backward: it holds min(p - k, m)
    layout = TrainLayout(pp=4, micro_batches=8)
    assert [layout.in_flight(k) for k in range(4)] == [4, 3, 2, 1]
    # fewer micro-batches than stages: at most m
    few = TrainLayout(pp=4, micro_batches=2)
    assert [few.in_flight(k) for k in range(4)] == [2, 2, 2, 1]


def test_micro_batches_a_stage_holds_interleaved() -> None:
    # Korthikanti et al. 2022, 4.2.3: the first stage holds L (1 + (p - 1) / (p v)) layers of one micro-batch.
    # p = 4, v = 2, L = 16 layers (4 a stage): 16 x (1 + 3 / 8) = 22 layers = 5.5 x the stage's 4 layers
    layout = TrainLayout(pp=4, micro_batches=8, virtual_stages=2)
    assert layout.in_flight(0) * 16 / 4 == pytest.approx(16 * (1 + 3 / 8))
    # the last stage: (v - 1) p + 1 = 5 chunks of half its layers
    assert layout.in_flight(3) == pytest.approx(5 / 2)


def test_layers_per_stage() -> None:
    assert stage_layers(8, 4) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # interleaved: 8 chunks of one layer, stage k runs chunks k and k + 4
    assert stage_layers(8, 4, 2) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # Llama 3 405B: 126 layers over 16 stages, one fewer on the first and the last (the Llama 3 paper, 3.3.2)
    assert [len(s) for s in stage_layers(126, 16)] == [7, *[8] * 14, 7]


@pytest.mark.parametrize(
    ("kwargs", "check", "message"),
    [
        ({"tp": 3}, {}, "--tp 3: does not divide the model's 32 attention heads"),
        ({"tp": 16}, {}, "--tp 16: does not divide the model's 8 key/value heads"),
        ({"pp": 64}, {}, "--pp 64: more pipeline stages than the model's 32 layers"),
        ({"pp": 8, "virtual_stages": 8, "micro_batches": 8}, {}, "--virtual-stages 8: 8 x 8 model chunks"),
        ({"cp": 3}, {}, "--cp 3: does not divide the sequence of 4096 tokens"),
        ({"ep": 2, "dp": 2}, {}, "--ep 2: the model has no experts"),
        ({"ep": 4, "dp": 4}, {"experts": 6}, "--ep 4: does not divide the model's 6 experts"),
    ],
)
def test_layouts_a_model_cannot_run(kwargs: dict[str, int], check: dict[str, int], message: str) -> None:
    model = {"layers": 32, "heads": 32, "kv_heads": 8, "seq_len": 4096, "experts": None} | check
    with pytest.raises(OpcountValueError, match=message.replace("(", r"\(")):
        TrainLayout(**kwargs).check_model(**model)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tp": 0}, "--tp: expected a whole number from 1"),
        ({"ep": 3, "dp": 4}, "--ep 3: .* must divide --dp x --cp"),
        ({"virtual_stages": 2}, "--virtual-stages 2: interleaves a pipeline: give --pp"),
        ({"pp": 4, "virtual_stages": 2, "micro_batches": 6}, "needs --micro-batches a multiple of --pp 4"),
    ],
)
def test_bad_layouts(kwargs: dict[str, int], message: str) -> None:
    with pytest.raises(OpcountValueError, match=message):
        TrainLayout(**kwargs)


def test_devices() -> None:
    layout = TrainLayout(tp=8, pp=4, cp=2, dp=2, ep=4)
    assert (layout.devices, layout.replica) == (128, 64)  # experts spread inside the data-parallel devices
