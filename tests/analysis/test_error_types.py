"""Every mistake in a call to the Python API is an ``opcount.OpcountError`` naming the bad value.

A table of bad calls across the public API, each with the words its message must hold; and a
source scan that no ``raise ValueError`` / ``raise TypeError`` is left in the package outside an
allow-list whose every entry says why. ``OpcountValueError`` and ``OpcountTypeError`` are also
``ValueError`` and ``TypeError``, so callers' ``except ValueError`` keeps working.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import opcount
from opcount import (
    ActivationCountAnalysis,
    FlopCountAnalysis,
    Hardware,
    MemoryTrafficAnalysis,
    OpcountError,
    OpcountTypeError,
    OpcountValueError,
    Sparsity,
    TensorShape,
    flop_count,
    flop_count_table,
    hardware,
    mac_array_scale,
    profile,
    prune,
    roofline,
    sparsity_roofline,
    trace,
)
from opcount.report import module_table
from opcount.units import NumberFormat

PACKAGE = Path(opcount.__file__).resolve().parent


def tiny() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU())


X = torch.randn(2, 4)
TOY = {"tensor": {"float16": 1e12}, "vector": {"float32": 1e11}}


def flops() -> FlopCountAnalysis:
    return FlopCountAnalysis(tiny(), X)


# (id, the bad call, words its message must hold)
BAD_CALLS: list[tuple[str, Callable[[], Any], str]] = [
    # analyses
    ("preset", lambda: FlopCountAnalysis(tiny(), X, preset="bogus-preset"), "'bogus-preset'"),
    ("flops_per_mac", lambda: FlopCountAnalysis(tiny(), X, flops_per_mac=3), "flops_per_mac must be 1 or 2, got 3"),
    ("causal_attention", lambda: FlopCountAnalysis(tiny(), X, causal_attention="half"), "'half'"),
    ("model type", lambda: FlopCountAnalysis("resnet50", X), "got str"),
    ("no inputs", lambda: ActivationCountAnalysis(tiny()), "needs the model's inputs"),
    ("ancestor_mode", lambda: flops().ancestor_mode("sideways"), "'sideways'"),
    ("tracer_warnings", lambda: flops().tracer_warnings("loud"), "'loud'"),
    ("set_op_handle name", lambda: flops().set_op_handle("mm", None), "'mm'"),
    ("set_op_handle handle", lambda: flops().set_op_handle("aten::mm", 42), "handle for aten::mm"),
    ("copy new_model", lambda: flops().copy(new_model="resnet"), "new_model must be a torch.nn.Module, got str"),
    ("module name", lambda: flops().by_operator("body.9"), "no module named 'body.9'"),
    ("memory kind", lambda: MemoryTrafficAnalysis(tiny(), X).by_module(kind="sideways"), "'sideways'"),
    ("flop_count supported_ops", lambda: flop_count(tiny(), (X,), supported_ops=["aten::mm"]), "got list"),
    # trace
    ("tracer", lambda: trace(tiny(), X, tracer="fx"), "'fx'"),
    ("mode", lambda: trace(tiny(), X, tracer="dispatch", mode="infer"), "'infer'"),
    ("jit options", lambda: trace(tiny(), X, mode="train"), "tracer='dispatch'"),
    ("device", lambda: trace(tiny(), X, tracer="dispatch", device="cpu"), "got 'cpu'"),
    ("kwargs", lambda: trace(tiny(), X, kwargs=[("x", 1)]), "kwargs must be a mapping"),
    ("numpy input", lambda: trace(tiny(), np.zeros((2, 4), dtype=np.float32)), "numpy ndarray"),
    ("TensorShape", lambda: TensorShape("1,3"), "'1,3'"),  # type: ignore[arg-type]
    # reports
    ("max_depth", lambda: flop_count_table(flops(), max_depth=-1), "got -1"),
    ("column", lambda: module_table(flops(), columns=("params", "flopz")), "'flopz'"),
    ("column's analysis", lambda: module_table(flops(), columns=("flops", "activations")), "'activations'"),
    ("number format", lambda: NumberFormat(unit="furlongs"), "'furlongs'"),
    # roofline
    ("no hardware", lambda: roofline(tiny(), X, hardware=None), "needs hardware"),
    ("dtype", lambda: roofline(tiny(), X, "h100-sxm", dtype="float17"), "'float17'"),
    ("pipeline module", lambda: roofline(tiny(), X, "h100-sxm", pipeline=[["9"]]), "pipeline: "),
    ("report by", lambda: roofline(tiny(), X, "h100-sxm").top(by="colour"), "'colour'"),
    ("mac_array_scale", lambda: mac_array_scale(0, 8, 4, 4), "c=0"),
    # hardware
    ("hardware name", lambda: hardware("no-such-gpu"), "no-such-gpu"),
    ("peak dtype", lambda: Hardware("toy", {"tensor": {"float17": 1e12}}, bandwidth=1e9), "'float17'"),
    ("ridge", lambda: hardware("h100-sxm").ridge("vector", "int8"), "no vector peak for int8"),
    ("bandwidth", lambda: Hardware("toy", TOY, bandwidth=-1.0), "got -1.0"),
    ("hardware keys", lambda: Hardware.from_dict({"name": "t", "peak": TOY, "bandwidth": 1, "colour": 1}), "colour"),
    # sparsity
    ("pattern", lambda: Sparsity.parse("sparse-ish"), "'sparse-ish'"),
    ("N:M", lambda: Sparsity.parse("3:2"), "3:2"),
    ("sparsity names", lambda: sparsity_roofline(tiny(), X, "h100-sxm", {"body.9": "2:4"}), "'body.9'"),
    ("index_dtype", lambda: sparsity_roofline(tiny(), X, "h100-sxm", index_dtype="float32"), "'float32'"),
    ("prune scope", lambda: prune(tiny(), "2:4", scope="everywhere"), "'everywhere'"),
    # profile
    ("profile model", lambda: profile("resnet50", X), "got str"),  # type: ignore[arg-type]
    ("repeats", lambda: profile(tiny(), X, repeats=0), "repeats must be a positive integer, got 0"),
    ("statistic", lambda: profile(tiny(), X, statistic="mode"), "'mode'"),
    ("profile device", lambda: profile(tiny(), X, device="tpu"), "'tpu'"),
]


@pytest.mark.parametrize("call,words", [pytest.param(c, w, id=i) for i, c, w in BAD_CALLS])
def test_bad_call_raises_an_opcount_error_naming_the_value(call: Callable[[], Any], words: str) -> None:
    with pytest.raises(OpcountError) as caught:
        call()
    assert words in str(caught.value)


def test_llm_bad_calls_are_opcount_errors() -> None:
    transformers = pytest.importorskip("transformers")
    from opcount.llm.causal_lm import CausalLM
    from opcount.llm.generation import generation
    from opcount.llm.models.catalogue import config as architecture
    from opcount.llm.precision.dtypes import Precision

    config = transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2, vocab_size=50
    )
    llm = CausalLM(config)
    for call, words in [
        (lambda: llm.phase("finetune", seq_len=4), "'finetune'"),
        (lambda: llm.phase("prefill", seq_len=0), "got 0"),
        (lambda: llm.phase("prefill", seq_len=4, preset="bogus-preset"), "'bogus-preset'"),
        (lambda: Precision(weight="int3"), "'int3'"),
        (lambda: llm.phase("prefill", seq_len=4, kv_len=-1), "kv_len"),
        (lambda: llm.phase("prefill"), "seq_len"),
        (lambda: generation(llm, prompt_len=4, gen_len=-1), "got -1"),
        (lambda: architecture("llama-9"), "'llama-9'"),
    ]:
        # wrong values: ValueErrors too, as the error table in docs/tracing.md says
        with pytest.raises(OpcountValueError) as caught:
            call()
        assert words in str(caught.value)


def test_value_and_type_errors_are_still_caught_by_their_builtin_class() -> None:
    with pytest.raises(ValueError, match="'fx'") as value_error:
        trace(tiny(), X, tracer="fx")
    assert type(value_error.value) is OpcountValueError
    with pytest.raises(TypeError, match="got str") as type_error:
        trace("resnet50", X)  # type: ignore[arg-type]
    assert type(type_error.value) is OpcountTypeError


# ----- torch.dtype wherever a dtype name is taken ---------------------------------------------


def test_roofline_takes_a_torch_dtype_as_its_name() -> None:
    by_name = roofline(tiny(), X, "h100-sxm", dtype="float16")
    by_dtype = roofline(tiny(), X, "h100-sxm", dtype=torch.float16)
    assert by_dtype.dtype == "float16"
    assert by_dtype.total_time == by_name.total_time
    # the linear's weight, 4 x 3 float16 values, is priced at 2 bytes each
    assert sum(t.layer.weight_bytes for t in by_dtype.layers) == 4 * 3 * 2 + 3 * 2


def test_sparsity_roofline_takes_torch_dtypes() -> None:
    def run(dtype: Any, index_dtype: Any) -> float:
        report = sparsity_roofline(tiny(), X, "h100-sxm", "unstructured=0.5", dtype=dtype, index_dtype=index_dtype)
        assert report.dtype == "float16"
        return report.sparse_time

    assert run(torch.float16, torch.int16) == run("float16", "int16")
    assert run(torch.float16, torch.int16) != run("float16", "int64")  # CSR indices are priced in index_dtype


def test_hardware_peaks_take_torch_dtypes() -> None:
    h100 = hardware("h100-sxm")
    assert h100.peak_of("tensor", torch.bfloat16) == h100.peak_of("tensor", "bfloat16") is not None
    assert h100.ridge("tensor", torch.float16) == h100.ridge("tensor", "float16")
    toy = Hardware("toy", {"tensor": {torch.float16: 1e12}}, bandwidth=1e9)  # type: ignore[dict-item]
    assert dict(toy.peak["tensor"]) == {"float16": 1e12}


def test_llm_precision_takes_torch_dtypes() -> None:
    pytest.importorskip("transformers")
    from opcount.llm.precision.dtypes import Precision

    assert Precision(weight=torch.int8, act=torch.float16) == Precision(weight="int8", act="float16")  # type: ignore[arg-type]


# ----- no builtin ValueError / TypeError left in the package -------------------------------------

IN_HANDLE = "inside a handle: invoke_handle re-raises it as a HandleError naming the operator, module and shapes"

# (file, enclosing function) -> why a builtin ValueError / TypeError is right there
ALLOWED: dict[tuple[str, str], str] = {
    ("handles/invoke.py", "invoke_handle"): "raised inside invoke_handle's try, which re-raises it as a HandleError",
    ("ir.py", "tensor"): IN_HANDLE + " (handles read their arguments with it)",
    ("ir.py", "const"): IN_HANDLE + " (handles read their arguments with it)",
    ("handles/_shapes.py", "first_tensor_out"): IN_HANDLE,
    ("handles/_shapes.py", "dim_index"): IN_HANDLE,
    ("handles/_shapes.py", "broadcast_shapes"): IN_HANDLE,
    ("handles/attention.py", "attention_macs"): IN_HANDLE,
    ("handles/attention.py", "native_multi_head_attention"): IN_HANDLE,
    ("handles/backward.py", "handle"): IN_HANDLE + " (a backward handle's forward handle returned no count)",
    ("handles/backward_args.py", "required_output_mask"): IN_HANDLE,
    ("handles/backward_args.py", "rebuild"): IN_HANDLE,
    ("handles/backward_args.py", "_mkldnn_lstm_layer"): IN_HANDLE,
    ("handles/loss.py", "reduced"): IN_HANDLE + " (an unknown reduction code)",
    ("handles/loss.py", "cross_entropy_loss"): IN_HANDLE,
    ("handles/conv.py", "convolution"): IN_HANDLE,
    ("handles/conv.py", "_conv"): IN_HANDLE,
    ("handles/conv.py", "convolution_public"): IN_HANDLE,
    ("handles/einsum.py", "parse_einsum"): IN_HANDLE,
    ("handles/einsum.py", "_term_labels"): IN_HANDLE,
    ("handles/einsum.py", "einsum"): IN_HANDLE,
    ("handles/matmul.py", "mm_macs"): IN_HANDLE,
    ("handles/matmul.py", "matmul_macs"): IN_HANDLE,
    ("handles/matmul.py", "_broadcast"): IN_HANDLE,
    ("handles/matmul.py", "bmm_macs"): IN_HANDLE,
    ("handles/matmul.py", "mv_macs"): IN_HANDLE,
    ("handles/matmul.py", "dot"): IN_HANDLE,
    ("handles/matmul.py", "tensordot"): IN_HANDLE,
    ("handles/memory.py", "batch_norm"): IN_HANDLE,
    ("handles/memory.py", "handle"): IN_HANDLE,
    ("handles/memory.py", "grid_sampler"): IN_HANDLE,
    ("handles/memory.py", "index_put"): IN_HANDLE,
    ("handles/memory.py", "accumulate"): IN_HANDLE,
    ("handles/memory.py", "dropout"): IN_HANDLE,
    ("handles/memory.py", "convert"): IN_HANDLE,
    ("handles/nonlinearity.py", "gelu"): IN_HANDLE,
    ("handles/norm.py", "norm_flops"): IN_HANDLE,
    ("handles/norm.py", "batch_norm"): IN_HANDLE,
    ("handles/fold.py", "_pairs"): IN_HANDLE,
    ("handles/fold.py", "col2im"): IN_HANDLE,
    ("handles/pool.py", "_window"): IN_HANDLE,
    ("handles/reduction.py", "vector_norm_flops"): IN_HANDLE,
    ("handles/reduction.py", "diff"): IN_HANDLE,
    ("handles/resize.py", "grid_sampler_2d"): IN_HANDLE,
    ("handles/resize.py", "grid_sampler_3d"): IN_HANDLE,
    ("handles/rnn.py", "_params"): IN_HANDLE,
    ("handles/rnn.py", "rnn_gate_flops"): IN_HANDLE,
    ("handles/tv_ops.py", "roi_align"): IN_HANDLE,
    ("handles/tv_ops.py", "deform_conv2d"): IN_HANDLE,
}


def builtin_raises() -> set[tuple[str, str, int]]:
    """(file, enclosing function, line) of every ``raise ValueError`` / ``raise TypeError`` in the package."""
    found = set()

    def visit(rel: str, node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(exc, ast.Name) and exc.id in ("ValueError", "TypeError"):
                    found.add((rel, function, child.lineno))
            visit(rel, child, inner)

    for path in sorted(PACKAGE.rglob("*.py")):
        visit(path.relative_to(PACKAGE).as_posix(), ast.parse(path.read_text(encoding="utf-8")), "<module>")
    return found


def test_no_builtin_value_or_type_error_outside_the_allow_list() -> None:
    found = builtin_raises()
    stray = sorted(f"opcount/{f}:{line} in {fn}()" for f, fn, line in found if (f, fn) not in ALLOWED)
    assert not stray, f"raise OpcountValueError / OpcountTypeError (opcount.errors) instead: {stray}"
    stale = sorted(k for k in ALLOWED if k not in {(f, fn) for f, fn, _ in found})
    assert not stale, f"allow-list entries that no longer raise a builtin error: {stale}"
