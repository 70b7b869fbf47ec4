"""The Sparsity Roofline of a traced model: every weight layer's dense time beside its time with
the weight stored sparse, on a :class:`~opcount.hardware.lookup.Hardware` whose ``sparse`` field says
which patterns its tensor unit runs natively (the Sparsity Roofline paper, Shinn et al.)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

from ..errors import OpcountValueError
from ..hardware.lookup import PRESETS, TENSOR, VECTOR, DType, Hardware, dtype_name
from ..hardware.lookup import hardware as lookup_hardware
from ..hardware.sparse_support import SparseSupport
from ..ir import DTYPE_BYTES, OpCall
from ..roofline import FLOPS_PER_MAC, Layer, LayerTime, Source, roofline, speed_of_light
from .backward import WeightProducts
from .declared import Chooser, SparsityArg, SparsitySpec
from .detect import detect_sparsity
from .formats import Format, csr_format, dense_format, nm_format, storage
from .gemm import WeightUse, gemm_view
from .patterns import MEASURED, Sparsity
from .report import SparseLayer, SparsityReport

# Every preset's sparse support, by name: a read-only view of ``Hardware.sparse``, where it is declared.
SPARSE_SUPPORT: Mapping[str, SparseSupport] = MappingProxyType({name: hw.sparse for name, hw in PRESETS.items()})


def sparse_support(hw: Hardware, override: SparseSupport | None = None) -> SparseSupport:
    """``override``, else the hardware's own ``sparse`` field (no N:M unless it declares some)."""
    return override if override is not None else hw.sparse


def sparsity_roofline(
    model: Source,
    inputs: Any = None,
    hardware: Hardware | str = "h100-sxm",
    sparsity: SparsityArg = MEASURED,
    dtype: DType | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    default: SparsitySpec = MEASURED,
    support: SparseSupport | None = None,
    index_dtype: DType = "int32",
    flops_per_mac: int = FLOPS_PER_MAC,
    dense_if_faster: bool = False,
    weights: nn.Module | Mapping[str, torch.Tensor] | None = None,
    **options: Any,
) -> SparsityReport:
    """The Sparsity Roofline (Shinn et al.) of ``model(*inputs, **kwargs)`` on ``hardware``.

    ``sparsity``: ``"measured"`` (count the zeros of the actual weights and detect their
    pattern), one pattern for every weight layer (a :class:`Sparsity` or its text, e.g. ``"2:4"``),
    or a mapping from module or parameter names or glob patterns (``"layer4.*"``) to either;
    exact names win over globs, globs apply in order, other layers get ``default``. A name that
    matches no weight layer is an error. ``support``: the device's N:M / block capabilities
    (default: the hardware's ``sparse`` field). ``index_dtype``: of CSR / BSR indices.
    ``flops_per_mac`` only changes the FLOPs reported per weight layer; times always count 2.
    ``dense_if_faster``: a layer whose sparse time exceeds its dense time runs dense (a real
    deployment would keep it dense); off by default, as in the paper.
    ``weights``: where measured weights are read, by parameter name, when not from the traced
    model: a pruned copy of it, or a state dict (one trace then serves many what-if copies).
    ``options`` go to :func:`~opcount.roofline.roofline` (``allow_tf32``, ``fuse``, ``pipeline``, the
    trace options ``tracer``, ``device``, ...). ``model`` may be a :class:`~opcount.Trace` or an
    analysis, as for :func:`~opcount.roofline.roofline`.
    """
    index_dtype = dtype_name(index_dtype)
    if index_dtype not in DTYPE_BYTES or index_dtype.startswith(("float", "bfloat", "complex")):
        raise OpcountValueError(f"index_dtype must be an integer dtype name such as 'int32', got {index_dtype!r}")
    if flops_per_mac not in (1, 2):
        raise OpcountValueError(f"flops_per_mac must be 1 or 2, got {flops_per_mac!r}")
    hw = lookup_hardware(hardware)
    dense = roofline(model, inputs, hw, dtype, kwargs, **options)
    net = model if isinstance(model, nn.Module) else model.model
    caps = sparse_support(hw, support)
    chooser = Chooser(sparsity, default)
    source_model = weights if isinstance(weights, nn.Module) else net
    if weights is None:
        tensors = _named_tensors(net)
    elif isinstance(weights, nn.Module):
        tensors = _named_tensors(weights)
    else:
        tensors = dict(weights)
    value_size = DTYPE_BYTES[dense.dtype]
    index_size = DTYPE_BYTES[index_dtype]

    measured: dict[int, tuple[Sparsity, int]] = {}  # by tensor: a weight used by several calls is read once
    layers = []
    found: list[tuple[int, SparseLayer]] = []  # (index in layers, the layer with its sparse time unset)
    products = WeightProducts()  # forward weight layers, and the backward products reading them
    seen: set[int] = set()  # calls matched already (convolution_backward's bias sum is a layer of its own)
    for t in dense.layers:
        call = t.layer.call
        product = products.match(call) if call is not None and id(call) not in seen else None
        if call is None or product is None:
            layers.append(t.layer)
            continue
        seen.add(id(call))
        named, use = product.named, product.use
        name, tensor = _weight_of(named, call, source_model, tensors)
        if tensor is None and named.spec.param is None:
            layers.append(t.layer)  # a computed weight that no module holds
            continue
        owner = name.rpartition(".")[0] if named.spec.param is not None else t.layer.module
        spec = chooser.choose(owner, name)
        if spec == MEASURED:
            if tensor is None:
                raise OpcountValueError(
                    f"cannot read the weight {name!r} of {call.kind} in '{t.layer.module}' to measure "
                    "it; declare its sparsity instead"
                )
            if tuple(tensor.shape) != named.spec.shape:
                raise OpcountValueError(
                    f"weight {name!r} is {tuple(tensor.shape)} but the traced model uses "
                    f"{named.spec.shape}: weights= must hold the traced model's parameters"
                )
            if id(tensor) not in measured:
                measured[id(tensor)] = (
                    detect_sparsity(gemm_view(tensor, named.view)),
                    int(torch.count_nonzero(tensor)),
                )
            (chosen, nnz), source = measured[id(tensor)], "measured"
        else:
            chosen, source = Sparsity.parse(spec), "declared"
            nnz = _implied_nnz(chosen, use.rows, use.cols)
        fmt, unit, precision = _stored_format(chosen, nnz, use, t, hw, caps, value_size, index_size)
        if product.rest and unit != t.layer.unit:
            # One kernel runs on one unit: the call's dense gradients keep it on the dense unit,
            # where a format that needs another unit cannot run, so the product stays dense.
            fmt, unit, precision = dense_format(use.rows, use.cols, value_size), t.layer.unit, t.layer.precision
        layer = _sparse_layer(t, use, fmt, unit, precision, value_size)
        if dense_if_faster and layer is not t.layer and _time_of(layer, hw) > t.time:
            layer, fmt = t.layer, dense_format(use.rows, use.cols, value_size)
        found.append(
            (len(layers), SparseLayer(t, t, name, use.rows, use.cols, use.n, chosen, source, fmt, nnz, flops_per_mac))
        )
        layers.append(layer)
    chooser.check_used()

    sparse = speed_of_light(layers, hw, pipeline=dense.pipeline, dtype=dense.dtype)
    sparse.unsupported = dense.unsupported
    sparse.fused = dense.fused
    sparse.uncalled = dense.uncalled
    timed = [replace(w, sparse=sparse.layers[i]) for i, w in found]
    return SparsityReport(dense, sparse, timed, caps, index_dtype)


def _time_of(layer: Layer, hw: Hardware) -> float:
    peak = hw.peak_of(layer.unit, layer.precision) or math.inf
    return max(layer.flops / peak, layer.bytes / hw.bandwidth)


def _implied_nnz(s: Sparsity, rows: int, cols: int) -> int:
    if s.pattern == "nm":
        return storage(s, rows, cols).values
    if s.pattern == "block":  # the non-zeros of whole blocks, clipped to the matrix
        return min(round((1 - s.level) * rows * cols), storage(s, rows, cols).values)
    return round((1 - s.level) * rows * cols)


def _stored_format(
    s: Sparsity,
    nnz: int,
    use: WeightUse,
    t: LayerTime,
    hw: Hardware,
    caps: SparseSupport,
    value_size: float,
    index_size: float,
) -> tuple[Format, str, str]:
    """The weight's stored format and the unit and precision its product runs on."""
    unit, precision = t.layer.unit, t.layer.precision
    rows, cols = use.rows, use.cols
    if s.pattern == "dense":
        return dense_format(rows, cols, value_size), unit, precision
    if s.pattern == "block":
        on_tensor = unit == TENSOR and caps.block and s.block_size >= caps.min_block
        where = (unit, precision) if on_tensor or unit != TENSOR else _vector(hw, precision, t)
        return storage(s, rows, cols, value_size, index_size), *where
    if s.pattern == "nm" and unit == TENSOR and (fit := caps.fit_nm(s.n, s.m, precision)) is not None:
        return nm_format(rows, cols, fit[0], fit[1], value_size), unit, precision
    # Unstructured, and N:M the tensor unit cannot run: CSR of the actual non-zeros on the vector unit.
    return csr_format(rows, cols, nnz, value_size, index_size), *_vector(hw, precision, t)


def _vector(hw: Hardware, precision: str, t: LayerTime) -> tuple[str, str]:
    dtype = "float32" if precision == "tf32" else precision
    for candidate in ((VECTOR, dtype), (VECTOR, "float32")):
        if hw.peak_of(*candidate) is not None:
            return candidate
    return t.layer.unit, t.layer.precision  # no vector unit: the dense layer's


def _sparse_layer(t: LayerTime, use: WeightUse, fmt: Format, unit: str, precision: str, value_size: float) -> Any:
    """The dense layer with the weight's flops and bytes replaced; a dense weight is left as is."""
    layer = t.layer
    if fmt.name == "dense" and unit == layer.unit:
        return layer
    numel = use.rows * use.cols
    dense_macs = numel * use.n
    # Flops the handle counts beyond the product (none for fvcore's formulas) stay.
    flops = layer.flops - FLOPS_PER_MAC * dense_macs * (1 - fmt.values / numel) if numel else layer.flops
    dense_bytes = numel * value_size
    weight_bytes, ifmap_bytes = layer.weight_bytes, layer.ifmap_bytes
    # The weight's read is in the weight bytes when it is a parameter, else in the ifmap; it may
    # be absent (resident parameters read by an earlier call): then there is nothing to replace.
    if use.spec.param is not None and weight_bytes >= dense_bytes * (1 - 1e-9):
        weight_bytes += fmt.bytes - dense_bytes
    elif use.spec.param is None and ifmap_bytes >= dense_bytes * (1 - 1e-9):
        ifmap_bytes += fmt.bytes - dense_bytes
    return replace(
        layer, flops=max(flops, 0.0), weight_bytes=weight_bytes, ifmap_bytes=ifmap_bytes, unit=unit, precision=precision
    )


def _named_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    named: dict[str, torch.Tensor] = dict(model.named_buffers(remove_duplicate=False))
    named.update(model.named_parameters(remove_duplicate=False))
    return named


def _weight_of(
    use: WeightUse, call: OpCall, model: nn.Module, tensors: Mapping[str, torch.Tensor]
) -> tuple[str, torch.Tensor | None]:
    """The weight's qualified name and tensor; a non-parameter weight is the running module's
    ``weight`` attribute when its shape matches (torch.nn.utils.prune computes it in a hook)."""
    if use.spec.param is not None:
        return use.spec.param, tensors.get(use.spec.param)
    module_name = call.scope[-1]
    try:
        module = model.get_submodule(module_name) if module_name else model
    except AttributeError:
        return f"{module_name}.weight", None
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and tuple(weight.shape) == use.spec.shape:
        return f"{module_name}.weight" if module_name else "weight", weight
    return f"{module_name}.weight", None
