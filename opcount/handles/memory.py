"""Memory traffic: the bytes each operator reads and writes (chainer-computational-cost's mread / mwrite).

A memory handle returns a :class:`Traffic`: the tensors it reads and writes and how many
bytes of each. Naming the tensors (rather than returning two numbers) lets the analysis
apply the cross-operator conventions afterwards: resident parameters (a weight read once
per model) and fused chains (an intermediate neither written nor read).

Bytes come from each tensor's own dtype (``TensorSpec.itemsize``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from ..ir import ListSpec, Spec, TensorSpec, const, maybe_tensor
from ._shapes import first_tensor_out
from .registry import MEMORY


class Access(NamedTuple):
    """``nbytes`` moved to or from ``tensor`` (None: not attributed to a known tensor)."""

    tensor: TensorSpec | None
    nbytes: float


@dataclass(frozen=True, slots=True)
class Traffic:
    """What one operator call reads and writes.

    ``alias``: the outputs are the first tensor input under another shape (a view), so data
    flow can be followed through them; such a call moves nothing.
    ``fusable``: the call can run as the epilogue of the kernel that produced its inputs
    (elementwise, eval batch norm), so ``fuse=True`` may absorb an intermediate into it.
    """

    read: tuple[Access, ...] = ()
    write: tuple[Access, ...] = ()
    alias: bool = False
    fusable: bool = False

    @property
    def read_bytes(self) -> float:
        return sum(a.nbytes for a in self.read)

    @property
    def write_bytes(self) -> float:
        return sum(a.nbytes for a in self.write)


TrafficFn = Callable[[Sequence[Spec], Sequence[Spec]], Traffic]


def _register(*ops: str, name: str | None = None) -> Callable[[TrafficFn], TrafficFn]:
    """``MEMORY.register`` for handles that return :class:`Traffic` (the registry is typed for counts)."""
    return MEMORY.register(*ops, name=name)  # type: ignore[return-value]


NOTHING = Traffic()
VIEW = Traffic(alias=True)


def flat_tensors(specs: Iterable[Spec]) -> Iterator[TensorSpec]:
    """Every tensor among ``specs``, list arguments (``cat``'s operands) flattened."""
    for s in specs:
        if isinstance(s, TensorSpec):
            yield s
        elif isinstance(s, ListSpec):
            yield from flat_tensors(s.items)


def whole(specs: Iterable[Spec]) -> tuple[Access, ...]:
    """Each tensor moved once, in full."""
    return tuple(Access(t, t.nbytes) for t in flat_tensors(specs))


def each_once(specs: Iterable[Spec]) -> tuple[Access, ...]:
    """Each distinct tensor moved once, in full: one tensor passed as two operands (attention over a
    latent that is both keys and values) is read once by the fused kernel."""
    seen: set[int] = set()
    out = []
    for t in flat_tensors(specs):
        if t.id is not None and t.id in seen:
            continue
        if t.id is not None:
            seen.add(t.id)
        out.append(Access(t, t.nbytes))
    return tuple(out)


def part(t: TensorSpec, elements: float) -> Access:
    """``elements`` elements of ``t`` (in ``t``'s dtype)."""
    return Access(t, elements * t.itemsize)


# ----- the default rule ----------------------------------------------------------------------
def generic_traffic(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Reads every tensor input once, in full (parameters included); writes every tensor output once."""
    return Traffic(whole(inputs), whole(outputs))


def _rule(name: str, doc: str, fusable: bool = False, once: bool = False) -> TrafficFn:
    """The default rule under its own name and docstring, so each family documents itself; with
    ``once`` a tensor given as several operands is read once."""

    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
        return Traffic(each_once(inputs) if once else whole(inputs), whole(outputs), fusable=fusable)

    handle.__name__ = handle.__qualname__ = name
    handle.__doc__ = doc
    return handle


# Elementwise operators without an in-place aten variant.
_NO_INPLACE = frozenset({"hardshrink", "softshrink", "softplus", "prelu", "rsub", "maximum", "minimum", "fmax", "fmin"})


def _aten(names: str, inplace: bool = False) -> tuple[str, ...]:
    ops = names.split()
    if inplace:  # `relu_` writes in place: the same bytes as `relu` (see ``elementwise``)
        ops += [op + "_" for op in ops if op not in _NO_INPLACE]
    return tuple("aten::" + op for op in ops)


ELEMENTWISE: tuple[str, ...] = _aten(
    """abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal square sin cos tan tanh sinh
    cosh asin acos atan sigmoid erf erfc erfinv relu relu6 leaky_relu elu selu celu gelu silu mish
    hardswish hardsigmoid hardtanh hardshrink softshrink softplus threshold prelu
    clamp clamp_min clamp_max clip sign sgn floor ceil round trunc frac pow nan_to_num logit add sub rsub mul
    div true_divide floor_divide remainder fmod maximum minimum fmax fmin atan2 hypot xlogy eq ne lt le
    gt ge logical_not logical_and logical_or logical_xor bitwise_not bitwise_and bitwise_or bitwise_xor
    masked_fill lerp addcmul addcdiv""",
    inplace=True,
) + _aten(
    "__and__ __or__ __xor__ __lshift__ __rshift__ __iand__ __ior__ __ixor__ where isnan isinf isfinite log_sigmoid"
)

elementwise = _register(*ELEMENTWISE)(
    _rule(
        "elementwise",
        "Elementwise (in place too): reads each operand once at its own size (a broadcast operand is "
        "not expanded), writes the output once. An in-place op (`relu_`, `add_`) moves the same bytes: "
        "it reads its operands and writes the result once, into the first operand's storage instead of a "
        "new allocation. Fusable: may absorb the producer of an operand (`fuse=True`).",
        fusable=True,
    )
)

convolution = _register(
    "aten::_convolution",
    "aten::_convolution_mode",
    "aten::convolution",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::conv_transpose1d",
    "aten::conv_transpose2d",
    "aten::conv_transpose3d",
    name="conv",
)(
    _rule(
        "convolution",
        "Reads the input, weight and bias once each (overlapping windows and padding are not re-read); "
        "writes the output once.",
    )
)

products = _register(
    *_aten(
        "linear matmul mm bmm addmm addmv addbmm baddbmm mv dot vdot einsum bilinear outer scaled_dot_product_attention"
    )
)(
    _rule(
        "products",
        "Matrix products and attention: reads each operand (weights, bias) once, a tensor given as two operands "
        "once, writes the output once; tiles re-read by a blocked kernel are not counted (attention's score "
        "matrix is not materialized).",
        once=True,
    )
)

reductions = _register(
    *_aten("""sum mean prod max min amax amin argmax argmin var std var_mean std_mean norm
    linalg_vector_norm frobenius_norm logsumexp all any cumsum cumprod diff topk sort argsort kthvalue
    median softmax _softmax log_softmax _log_softmax layer_norm native_layer_norm group_norm
    native_group_norm instance_norm rms_norm""")
)(
    _rule(
        "reductions",
        "Reductions, softmax and non-batch norms: reads the input (and weight, bias) once, writes the "
        "output(s) once; a second pass over the input (statistics, then normalization) is assumed to hit "
        "in cache.",
    )
)

pooling = _register(
    *_aten("""max_pool1d max_pool2d max_pool3d max_pool2d_with_indices max_pool3d_with_indices avg_pool1d
    avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d adaptive_max_pool1d
    adaptive_max_pool2d adaptive_max_pool3d""")
)(
    _rule(
        "pooling",
        "Pooling: reads the input once (overlapping windows are not re-read), writes the output (and indices).",
    )
)

copies = _register(
    *_aten("""cat concat concatenate stack hstack vstack dstack constant_pad_nd pad reflection_pad1d
    reflection_pad2d reflection_pad3d replication_pad1d replication_pad2d replication_pad3d roll flip
    repeat tile repeat_interleave index_put index_copy index_add scatter_add tril triu pixel_shuffle pixel_unshuffle channel_shuffle im2col
    col2im clone contiguous""")
)(
    _rule(
        "copies",
        "Copies: reads its inputs and writes the output, so concat (`cat`, `stack`) reads and writes the "
        "output's size. `contiguous` is counted as a copy: it usually follows a permute or transpose; "
        "on an already contiguous tensor it moves nothing in fact.",
    )
)


# ----- special handles -----------------------------------------------------------------------
# aten::batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn)
BN_INPUT, BN_WEIGHT, BN_BIAS, BN_MEAN, BN_VAR, BN_TRAINING = 0, 1, 2, 3, 4, 5


@_register("aten::batch_norm")
def batch_norm(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Eval: reads x and a folded scale and shift once (2*C values, not mean, var, weight and bias
    separately); writes the output; fusable like an elementwise op. Training: reads x, weight, bias
    and the running statistics; writes the output and the updated running statistics (2*C values)."""
    x = maybe_tensor(inputs[BN_INPUT])
    if x is None:
        raise ValueError("aten::batch_norm: the input is not a tensor")
    training = const(inputs[BN_TRAINING])
    if not isinstance(training, bool):
        raise ValueError(f"aten::batch_norm: argument {BN_TRAINING} is not 'training': {training!r}")
    weight, bias, mean, var = (maybe_tensor(inputs[i]) for i in (BN_WEIGHT, BN_BIAS, BN_MEAN, BN_VAR))
    out = whole(outputs)
    if training:
        stats = tuple(Access(s, s.nbytes) for s in (mean, var) if s is not None)
        affine = whole(s for s in (weight, bias) if s is not None)
        return Traffic((Access(x, x.nbytes), *affine, *stats), out + stats)
    channels = x.shape[1] if x.rank > 1 else x.shape[0]
    # The folded scale and shift live where the parameters do: charge each to the tensor it
    # replaces, so resident_params can recognize them.
    scale = weight if weight is not None else var
    shift = bias if bias is not None else mean
    folded = tuple(part(t, channels) if t is not None else Access(None, channels * x.itemsize) for t in (scale, shift))
    return Traffic((Access(x, x.nbytes), *folded), out, fusable=True)


def resize_read(x: TensorSpec, out_elements: int, taps: int) -> Access:
    """min(input, taps x output) elements: an upscale reads its input once, a downscale only its taps."""
    return part(x, min(x.numel, taps * out_elements))


def _resize(taps: int, kind: str) -> TrafficFn:
    """The resampling rule for ``taps`` source values per output element."""

    def handle(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
        x = maybe_tensor(inputs[0])
        if x is None:
            raise ValueError("resize: the input is not a tensor")
        return Traffic((resize_read(x, first_tensor_out(outputs).numel, taps),), whole(outputs))

    handle.__doc__ = (
        f"{kind.capitalize()} resize: reads min(numel(x), {taps} * numel(out)) input elements ({taps} source "
        f"value{'s' if taps > 1 else ''} per output element, but an upscale reads its input only once; chainer-computational-cost), "
        "writes the output once."
    )
    handle.__name__ = handle.__qualname__ = f"resize_{kind}"
    return handle


resize_nearest = _register(
    *_aten(
        "upsample_nearest1d upsample_nearest2d upsample_nearest3d _upsample_nearest_exact1d "
        "_upsample_nearest_exact2d _upsample_nearest_exact3d"
    )
)(_resize(1, "nearest"))
resize_linear = _register("aten::upsample_linear1d")(_resize(2, "linear"))
resize_bilinear = _register("aten::upsample_bilinear2d", "aten::_upsample_bilinear2d_aa")(_resize(4, "bilinear"))
resize_trilinear = _register("aten::upsample_trilinear3d")(_resize(8, "trilinear"))
resize_bicubic = _register("aten::upsample_bicubic2d", "aten::_upsample_bicubic2d_aa")(_resize(16, "bicubic"))

# aten::grid_sampler(input, grid, interpolation_mode, padding_mode, align_corners)
GRID_MODE = 2
GRID_TAPS = {0: 4, 1: 1, 2: 16}  # bilinear, nearest, bicubic


@_register("aten::grid_sampler", "aten::grid_sampler_2d", "aten::grid_sampler_3d")
def grid_sampler(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Reads the grid once and min(numel(x), taps * numel(out)) input elements (bilinear 4, nearest 1,
    bicubic 16; 3-D bilinear 8), writes the output once."""
    x, grid = maybe_tensor(inputs[0]), maybe_tensor(inputs[1])
    if x is None or grid is None:
        raise ValueError("grid_sampler: the input or grid is not a tensor")
    mode = const(inputs[GRID_MODE])
    if mode not in GRID_TAPS:
        raise ValueError(f"grid_sampler: unknown interpolation mode {mode!r}")
    taps = GRID_TAPS[mode]
    if x.rank == 5 and taps == 4:
        taps = 8  # trilinear on volumes
    out = first_tensor_out(outputs)
    return Traffic((resize_read(x, out.numel, taps), Access(grid, grid.nbytes)), whole(outputs))


@_register(*_aten("index index_select gather embedding take masked_select"))
def gather(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Indexing copies: reads only the source elements it copies (the output's size, chainer-computational-cost's
    slicing rule) plus the indices or mask in full; writes the output once. An embedding reads the
    rows it looks up, not the whole table."""
    source, *indices = flat_tensors(inputs)
    out = first_tensor_out(outputs)
    return Traffic((part(source, out.numel), *whole(indices)), whole(outputs))


@_register("aten::index_put_", "aten::_index_put_impl_", "aten::index_copy_")
def index_put(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """In-place scatter ``self[indices] = values`` (and ``index_copy_``, a KV cache's update):
    reads the indices and values once, writes numel(values) elements of ``self``; no other byte
    of ``self`` is touched. (Out of place, they are copies: see the copies rule.)"""
    target, *rest = flat_tensors(inputs)
    if not rest:
        raise ValueError("index_put_: no values tensor")
    return Traffic(whole(rest), (part(target, rest[-1].numel),))


@_register("aten::index_add_", "aten::scatter_add_")
def accumulate(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """In-place ``self[index] += source`` (``index_add_``, ``scatter_add_``): reads the index, the
    source and the numel(source) elements of ``self`` it adds to, writes those back."""
    target, *rest = flat_tensors(inputs)
    if not rest:
        raise ValueError("index_add_: no source tensor")
    touched = part(target, rest[-1].numel)
    return Traffic((*whole(rest), touched), (touched,))


@_register("aten::copy_", "aten::fill_", "aten::zero_")
def overwrite(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """In-place overwrite (``copy_``, ``fill_``, ``zero_``): reads the source (a tensor or scalar),
    not the destination; writes the destination once."""
    _, *sources = flat_tensors(inputs)
    return Traffic(whole(sources), whole(outputs))


@_register(
    *_aten("""zeros ones full arange linspace logspace eye zeros_like ones_like full_like new_zeros new_ones
    new_full scalar_tensor rand randn randint rand_like randn_like randint_like randperm
    bernoulli normal""")
)
def creation(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Creation: writes the output once; reads nothing (a ``*_like`` argument only gives the shape)."""
    return Traffic((), whole(outputs))


# aten::dropout(input, p, train)
DROPOUT_TRAIN = 2


@_register(*_aten("dropout feature_dropout alpha_dropout feature_alpha_dropout", inplace=True))
def dropout(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Training: reads the input, writes the output (the random mask is generated, not read);
    fusable. Eval: the identity; moves nothing."""
    train = const(inputs[DROPOUT_TRAIN])
    if not isinstance(train, bool):
        raise ValueError(f"dropout: argument {DROPOUT_TRAIN} is not 'train': {train!r}")
    return Traffic(whole(inputs[:1]), whole(outputs), fusable=True) if train else VIEW


@_register("aten::to", "aten::type_as", "aten::_to_copy")
def convert(inputs: Sequence[Spec], outputs: Sequence[Spec]) -> Traffic:
    """Dtype conversion: reads the input in its dtype, writes the output in the new one. To the same
    dtype it returns its input: moves nothing. (A device transfer is not seen by the tracer.)"""
    x, out = maybe_tensor(inputs[0]), first_tensor_out(outputs)
    if x is None:
        raise ValueError("to: the input is not a tensor")
    if x.dtype == out.dtype and x.shape == out.shape:
        return VIEW
    return Traffic((Access(x, x.nbytes),), (Access(out, out.nbytes),))


# ----- explicitly free -----------------------------------------------------------------------
# Views: metadata over the same storage (chainer-computational-cost: reshape; PyTorch also views for transpose,
# permute, expand and basic slicing). A reshape that PyTorch has to copy (non-contiguous input)
# is still counted as free, as chainer-computational-cost does.
VIEWS: tuple[str, ...] = _aten(
    """view reshape flatten unflatten squeeze squeeze_ unsqueeze unsqueeze_ permute transpose transpose_ t t_
    numpy_T expand expand_as broadcast_tensors view_as reshape_as slice select narrow chunk split split_with_sizes unbind
    tensor_split detach detach_ alias as_strided diagonal movedim moveaxis swapaxes swapdims unfold
    view_as_real view_as_complex real imag mT mH adjoint lift_fresh _unsafe_view resolve_conj resolve_neg
    positive _reshape_alias"""
)
# Metadata queries: read no tensor data at all.
METADATA: tuple[str, ...] = _aten(
    "size Int Float Bool ScalarImplicit dim numel stride is_floating_point is_contiguous sym_size sym_numel "
    "_shape_as_tensor item"
)
# Allocations: a new, uninitialized tensor; nothing is written until an operator fills it.
ALLOCATIONS: tuple[str, ...] = _aten("empty empty_like new_empty empty_strided")

# What each explicitly free family means, for the generated docs.
FREE_FAMILIES: dict[str, str] = {
    "views": "Views: metadata over the same storage; move nothing (chainer-computational-cost's reshape). A reshape that "
    "PyTorch has to copy (non-contiguous input) is still free, as in chainer-computational-cost; data flow is followed through "
    "views for `fuse` and `resident_params`.",
    "metadata": "Metadata queries: read no tensor data.",
    "allocations": "Allocations: a new uninitialized tensor; nothing is written until an operator fills it.",
}

MEMORY.zero_cost(*VIEWS, family="views")
MEMORY.zero_cost(*METADATA, family="metadata")
MEMORY.zero_cost(*ALLOCATIONS, family="allocations")
