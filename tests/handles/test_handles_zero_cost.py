"""Views, reshapes, indexing, copies and creation are explicitly free; arithmetic never is."""

import pytest

from opcount.handles import FLOPS

VIEWS_AND_COPIES = [
    "view",
    "reshape",
    "flatten",
    "unflatten",
    "permute",
    "transpose",
    "t",
    "contiguous",
    "expand",
    "expand_as",
    "squeeze",
    "unsqueeze",
    "select",
    "slice",
    "narrow",
    "index",
    "index_select",
    "gather",
    "cat",
    "stack",
    "split",
    "chunk",
    "unbind",
    "clone",
    "copy_",
    "to",
    "type_as",
    "detach",
    "repeat",
    "roll",
    "flip",
    "pad",
    "constant_pad_nd",
    "pixel_shuffle",
    "zeros",
    "ones",
    "full",
    "arange",
    "embedding",
    "masked_fill",
    "triu",
    "tril",
]


@pytest.mark.parametrize("op", VIEWS_AND_COPIES)
def test_data_movement_is_explicitly_free(op: str) -> None:
    assert f"aten::{op}" in FLOPS.zero
    assert f"aten::{op}" not in FLOPS.handles


ARITHMETIC = [
    "add",
    "mul",
    "sub",
    "div",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "pow",
    "tanh",
    "sigmoid",
    "relu",
    "gelu",
    "silu",
    "softmax",
    "sum",
    "mean",
    "max",
    "min",
    "var",
    "std",
    "cumsum",
    "linalg_vector_norm",
    "clamp",
    "where",
    "mm",
    "bmm",
    "matmul",
    "einsum",
    "linear",
    "layer_norm",
]


@pytest.mark.parametrize("op", ARITHMETIC)
def test_arithmetic_is_counted(op: str) -> None:
    assert f"aten::{op}" in FLOPS.handles
    assert f"aten::{op}" not in FLOPS.zero
