"""Operators that do no arithmetic: views, reshapes, indexing, copies, creation, comparisons.

fvcore's ignore list is kept verbatim as FVCORE_IGNORED so that the ``"fvcore"`` preset
reproduces fvcore's results; note it also ignores a few arithmetic operators (relu, clamp,
max) that the default preset counts.
"""

from __future__ import annotations

from .registry import FLOPS

FVCORE_IGNORED: frozenset[str] = frozenset(
    "aten::" + op
    for op in """Int ScalarImplicit __and__ arange bitwise_not cat chunk clamp clamp_ constant_pad_nd
    contiguous copy_ detach dropout empty eq expand flatten floor floor_divide full full_like gather ge gt
    index index_put_ masked_fill max narrow new_empty new_full new_zeros nonzero ones permute relu relu_
    remainder reshape roll select size slice split split_with_sizes squeeze stack t to transpose type_as
    unbind unsqueeze unsqueeze_ view zeros zeros_like""".split()
)

# Data movement and metadata: zero flops by definition (seed 000: reshape, concat, broadcast).
VIEWS_AND_COPIES: tuple[str, ...] = tuple(
    "aten::" + op
    for op in """Int ScalarImplicit arange cat chunk constant_pad_nd contiguous copy_ detach dropout
    dropout_ feature_dropout alpha_dropout empty empty_like expand expand_as flatten full full_like gather
    index index_put_ index_select narrow new_empty new_full new_zeros new_ones nonzero ones ones_like
    permute reshape roll select size slice split split_with_sizes squeeze squeeze_ stack t to
    transpose type_as unbind unsqueeze unsqueeze_ view view_as zeros zeros_like
    masked_fill masked_fill_ eq ne ge gt le lt __and__ __or__ bitwise_not bitwise_and bitwise_or
    floor_divide remainder floor""".split()
)

FLOPS.zero_cost(*VIEWS_AND_COPIES)

# More data movement, creation and metadata: copies, padding and pixel shuffles move
# values without arithmetic (seed 000: Concat, Transpose, GetItem, Shift are 0 flops).
MORE_COPIES: tuple[str, ...] = tuple(
    "aten::" + op
    for op in """clone repeat repeat_interleave tile unflatten triu triu_ tril tril_ flip fliplr flipud
    rot90 movedim moveaxis swapaxes swapdims unfold as_strided alias lift_fresh _reshape_alias
    _unsafe_view reshape_as numel dim _shape_as_tensor scalar_tensor tensor as_tensor zero_ fill_
    rand randn rand_like randn_like randint randint_like randperm normal normal_ uniform_ bernoulli
    bernoulli_ empty_strided linspace eye meshgrid pad reflection_pad1d reflection_pad2d
    reflection_pad3d replication_pad1d replication_pad2d replication_pad3d _pad_circular
    pixel_shuffle pixel_unshuffle channel_shuffle native_channel_shuffle im2col diagonal diag
    diag_embed tensor_split unsafe_split unsafe_chunk hstack vstack dstack concat concatenate
    index_put index_fill index_fill_ index_copy index_copy_ masked_scatter masked_scatter_
    masked_select scatter scatter_ take take_along_dim put_ select_scatter slice_scatter one_hot
    resize_ feature_dropout_ alpha_dropout_ feature_alpha_dropout feature_alpha_dropout_
    native_dropout _to_copy max_unpool2d max_unpool3d""".split()
)

# Comparisons, logic, rounding and selection: no floating-point arithmetic (the house convention
# above already treats eq/gt/floor as free; sorting and top-k are comparisons and data movement).
COMPARISONS_AND_SELECTION: tuple[str, ...] = tuple(
    "aten::" + op
    for op in """logical_not logical_and logical_or logical_xor __or__ __xor__ bitwise_xor isnan isinf
    isfinite any all sign signbit ceil round trunc eq_ ne_ ge_ gt_ le_ lt_ sort argsort topk
    kthvalue msort unique_consecutive _unique2 unique_dim searchsorted bucketize count_nonzero
    argwhere""".split()
    if "aten::" + op not in VIEWS_AND_COPIES
)

FLOPS.zero_cost(*(op for op in MORE_COPIES if op not in VIEWS_AND_COPIES))
FLOPS.zero_cost(*COMPARISONS_AND_SELECTION)
