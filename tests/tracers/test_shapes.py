"""Shape-only tensors: operator outputs from metadata alone, the recipe cache, and the fall-back to
fake tensors for what they cannot follow. Expected shapes are torch's own, from real tensors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, TensorShape
from opcount.tracers import dispatch, shapes
from opcount.tracers.shapes import ShapeRunner, ShapeTensor, ShapeUnsupported
from tests.fixtures.optional import torchvision

aten = torch.ops.aten
CPU = torch.device("cpu")


def _meta(t: torch.Tensor) -> tuple:
    return tuple(t.shape), t.stride(), t.storage_offset(), t.dtype, t.device


@pytest.fixture
def runner() -> ShapeRunner:
    return ShapeRunner(CPU)


def test_outputs_have_the_shapes_strides_and_dtypes_of_real_ones(runner: ShapeRunner) -> None:
    real = torch.randn(4, 6)[:, 1:]  # non-contiguous, with an offset
    x = runner.wrap(real)
    assert _meta(x) == _meta(real)
    cases = [
        (aten.t.default, (real,), {}),
        (aten.add.Tensor, (real, real), {}),
        (aten.add.Tensor, (real.to(torch.int64), 1.5), {}),  # type promotion by the constant's type
        (aten.sum.dim_IntList, (real, [1], True), {}),
        (aten.select.int, (real, 0, 2), {}),
        (aten._to_copy.default, (real,), {"dtype": torch.float16}),
    ]
    for op, args, kwargs in cases:
        shaped = tuple(runner.wrap(a) if isinstance(a, torch.Tensor) else a for a in args)
        out = runner.run(op, shaped, kwargs)
        assert isinstance(out, ShapeTensor)
        assert _meta(out) == _meta(op(*args, **kwargs)), op


def test_int_and_float_constants_are_cached_apart(runner: ShapeRunner) -> None:
    ints = runner.wrap(torch.ones(3, dtype=torch.int64))
    assert runner.run(aten.add.Tensor, (ints, 1), {}).dtype == torch.int64
    assert runner.run(aten.add.Tensor, (ints, 1.0), {}).dtype == torch.float32
    assert runner.run(aten.add.Tensor, (ints, True), {}).dtype == torch.int64


# the last call gives out= a tensor of the wrong size on purpose; torch warns that resizing it is deprecated
@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized:UserWarning")
def test_in_place_and_out_operators_return_their_tensor(runner: ShapeRunner) -> None:
    x, y = runner.empty((2, 3), torch.float32), runner.empty((2, 3), torch.float32)
    assert runner.run(aten.add_.Tensor, (x, y), {}) is x
    out = runner.empty((2, 3), torch.float32)
    assert runner.run(aten.mul.out, (x, y), {"out": out}) is out
    with pytest.raises(ShapeUnsupported, match="changes the shape"):  # an out= tensor torch would resize
        runner.run(aten.mul.out, (x, y), {"out": runner.empty((5,), torch.float32)})


def test_tuple_and_list_outputs(runner: ShapeRunner) -> None:
    x = runner.empty((4, 6), torch.float32)
    values, indices = runner.run(aten.max.dim, (x, 1), {})
    assert (values.shape, values.dtype, indices.shape, indices.dtype) == ((4,), torch.float32, (4,), torch.int64)
    parts = runner.run(aten.split.Tensor, (x, 4, 1), {})
    assert isinstance(parts, list) and [p.shape for p in parts] == [(4, 4), (4, 2)]
    assert runner.run(aten.is_same_size.default, (x, x), {}) is True


def test_factories_and_copies_claim_the_device_asked_for() -> None:
    claimed = torch.device("cuda")  # claimed only: nothing is allocated, no GPU is needed
    runner = ShapeRunner(claimed)
    assert runner.run(aten.zeros.default, ([2, 5],), {"dtype": torch.float16}).device == claimed
    x = runner.run(aten.zeros.default, ([2, 5],), {"device": CPU})
    assert (x.device, x.shape, x.dtype) == (CPU, (2, 5), torch.float32)
    assert runner.run(aten._to_copy.default, (x,), {"device": claimed}).device == claimed


def test_what_shape_only_tensors_cannot_do_is_refused(runner: ShapeRunner) -> None:
    x = runner.empty((2, 3), torch.float32)
    with pytest.raises(ShapeUnsupported, match="changes the shape"):
        runner.run(aten.unsqueeze_.default, (x, 0), {})
    with pytest.raises(RuntimeError, match="meta"):
        runner.run(aten._local_scalar_dense.default, (runner.run(aten.sum.default, (x,), {}),), {})
    with pytest.raises(ShapeUnsupported, match="outside"):
        x + 1  # no tracer: a shape-only tensor has nothing to compute with
    assert repr(x) == "ShapeTensor(shape=[2, 3], dtype=torch.float32, device=cpu)"


def test_recipes_are_shared_by_later_analyses() -> None:
    # Each distinct call runs a meta kernel once per process; a second analysis runs none.
    model = torchvision.models.resnet18(weights=None).eval()
    x = TensorShape((1, 3, 64, 64))
    first = FlopCountAnalysis(model, x, tracer="dispatch", device="meta").total()
    recipes = len(shapes._RECIPES[(CPU, torch.float32)])
    assert FlopCountAnalysis(model, x, tracer="dispatch", device="meta").total() == first
    assert len(shapes._RECIPES[(CPU, torch.float32)]) == recipes


def test_recipes_follow_the_default_dtype() -> None:
    # aten::zeros gets no dtype argument when none is given: the kernel reads the default dtype.
    first = ShapeRunner(CPU).run(aten.zeros.default, ([2],), {"device": CPU})
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        again = ShapeRunner(CPU).run(aten.zeros.default, ([2],), {"device": CPU})
    finally:
        torch.set_default_dtype(previous)
    assert (first.dtype, again.dtype) == (torch.float32, torch.float64)


def _no_fake_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("fell back to fake tensors")

    monkeypatch.setattr(dispatch, "FakeTensors", refuse)


def test_torchvision_and_transformers_models_need_no_fake_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    transformers = pytest.importorskip("transformers")
    resnet = torchvision.models.resnet18(weights=None).eval()
    x = torch.randn(1, 3, 64, 64)
    jit = FlopCountAnalysis(resnet, x).by_module_and_operator()
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    gpt2 = transformers.GPT2LMHeadModel(cfg).eval()
    ids = torch.randint(0, 1000, (1, 16))
    gpt2_jit = FlopCountAnalysis(gpt2, (ids,)).by_module_and_operator()
    _no_fake_tensors(monkeypatch)
    assert FlopCountAnalysis(resnet, x, tracer="dispatch", device="meta").by_module_and_operator() == jit
    meta = FlopCountAnalysis(gpt2, (TensorShape((1, 16), torch.long),), tracer="dispatch", device="meta")
    assert meta.by_module_and_operator() == gpt2_jit


class ReadsAConstant(nn.Module):
    """``.item()`` of a tensor made from a Python number: fake tensors know its value."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * int(torch.tensor(3).item())


class ReshapesInPlace(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        y.unsqueeze_(0)
        return y.mean(1)


@pytest.mark.parametrize("make", [ReadsAConstant, ReshapesInPlace])
def test_what_shape_only_tensors_refuse_runs_on_fake_tensors(make: type[nn.Module]) -> None:
    # fc: 2*4*4 = 32 MACs; ReadsAConstant's product by 3: 8 muls; ReshapesInPlace's mean over
    # the 2 rows of [1, 2, 4]: 4 outputs of 2 elements, 2 flops each (1 add, 1 divide).
    model, x = make().eval(), torch.randn(2, 4)
    expected = FlopCountAnalysis(model, x).by_module_and_operator()
    assert expected[""] == ({"linear": 32, "mul": 8} if make is ReadsAConstant else {"linear": 32, "mean": 8})
    assert FlopCountAnalysis(model, x, tracer="dispatch", device="meta").by_module_and_operator() == expected
