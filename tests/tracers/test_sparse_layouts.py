"""Sparse tensors are refused, naming the layout and where it is: every formula prices dense
tensors, and a sparse x dense product costs its stored values x the output columns (torch's
sparse addmm), which neither tracer can see. Counted dense, a sparse input to nn.Linear was a
wrong number under the dispatch tracer, and a bare HandleError under jit."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from opcount import FlopCountAnalysis, trace
from opcount.errors import OpcountValueError

TRACERS = [{"tracer": "jit"}, {"tracer": "dispatch"}, {"tracer": "dispatch", "device": "meta"}]


def _sparse_input() -> torch.Tensor:
    dense = torch.zeros(4, 8)
    dense[0, 1], dense[2, 5] = 1.0, 2.0  # 2 stored values: torch runs 2 x 16 multiply-adds, not 4 x 8 x 16
    return dense.to_sparse()


@pytest.mark.parametrize("options", TRACERS, ids=lambda o: "-".join(o.values()))
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_a_sparse_input_is_refused_naming_its_layout(options: dict, layout: str) -> None:
    x = _sparse_input() if layout == "coo" else _sparse_input().to_sparse_csr()
    with pytest.raises(OpcountValueError) as e:
        FlopCountAnalysis(nn.Linear(8, 16), x, **options).total()
    message = str(e.value)
    assert f"torch.sparse_{layout}" in message and "inputs[0]" in message and "Linear" in message
    assert "[4, 8]" in message and "to_dense()" in message


def test_a_sparse_keyword_input_is_named_by_its_key() -> None:
    class Kw(nn.Module):
        def forward(self, *, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    with pytest.raises(OpcountValueError, match=r"kwargs\['x'\]"):
        trace(Kw(), kwargs={"x": _sparse_input()})


class SparseMask(nn.Module):
    def __init__(self, densify: bool) -> None:
        super().__init__()
        self.densify = densify
        self.register_buffer("mask", _sparse_input())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.mm(self.mask.to_dense() if self.densify else self.mask, x)


@pytest.mark.parametrize("options", TRACERS, ids=lambda o: "-".join(o.values()))
def test_a_sparse_buffer_is_refused_where_an_operator_prices_it(options: dict) -> None:
    # The mask has 2 stored values: torch's sparse mm runs 2 x 3 multiply-adds, not 4 x 8 x 3.
    with pytest.raises(OpcountValueError, match=r"aten::mm in the model .*torch\.sparse_coo.*'mask'"):
        FlopCountAnalysis(SparseMask(densify=False), torch.randn(8, 3), **options).total()


@pytest.mark.parametrize("options", TRACERS, ids=lambda o: "-".join(o.values()))
def test_a_sparse_buffer_made_dense_counts(options: dict) -> None:
    # [4, 8] x [8, 3]: 4 x 8 x 3 multiply-adds, once the model has made the mask dense.
    assert FlopCountAnalysis(SparseMask(densify=True), torch.randn(8, 3), **options).by_operator()["mm"] == 4 * 8 * 3


class ToSparse(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.to_sparse())


@pytest.mark.parametrize("options", TRACERS[1:], ids=lambda o: "-".join(o.values()))
def test_a_sparse_tensor_made_inside_the_model_is_refused_naming_the_operator(options: dict) -> None:
    with pytest.raises(OpcountValueError, match=r"aten::to_sparse.*torch\.sparse_coo tensor of shape \[4, 8\]"):
        trace(ToSparse(), torch.randn(4, 8), **options)


class SparseProduct(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(x.to_sparse(), self.weight)


def test_the_jit_tracer_refuses_a_sparse_tensor_made_inside_the_model_by_its_operator() -> None:
    # The jit graph keeps no layout: the operator's name is what says sparse (it counted 0, listing
    # to_sparse and _sparse_mm as unsupported, where the dispatch tracer refuses the model).
    with pytest.raises(OpcountValueError, match=r"operator aten::to_sparse in the model works on sparse tensors"):
        trace(SparseProduct(), torch.randn(4, 8), tracer="jit")


def test_dense_inputs_still_count() -> None:
    # Linear(8 -> 16) on [4, 8]: 4 x 8 x 16 multiply-adds (fvcore's convention).
    for options in TRACERS:
        assert FlopCountAnalysis(nn.Linear(8, 16), _sparse_input().to_dense(), **options).total() == 4 * 8 * 16
