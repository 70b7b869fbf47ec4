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
