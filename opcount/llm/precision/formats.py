"""What one weight matrix costs in bytes in each storage format, its scales (and zero-points) included.

A matrix is ``out x in``: ``out`` output rows, each a dot product over ``in`` input elements; a
block or group runs along ``in``, as the kernels that dequantize it read it. A fused stack of
expert matrices (``[experts, out, in]``) is quantized per expert matrix, so a per-tensor scale is
one per expert. With ``n = out x in``:

========================  ==========================================================  ============
format                    storage                                                     bytes
========================  ==========================================================  ============
``float32`` / 16-bit      plain                                                       ``4n`` / ``2n``
``float8_e4m3fn``         one float32 scale per tensor                                ``n + 4``
``fp8-block``             float8_e4m3fn, one float32 scale per 128 x 128 block         ``n + 4 ceil(out/128) ceil(in/128)``
                          (DeepSeek-V3's ``weight_block_size``; an edge block that
                          is partial still has its scale)
``int8``                  one float16 scale per output row                            ``n + 2 out``
``int4``                  groups of 128 along ``in``, float16 scale and zero-point     ``ceil(n/2) + 4 out ceil(in/128)``
``mxfp4``                 OCP Microscaling: E2M1 values, one E8M0 scale per 32        ``n/2 + n/32`` (4.25 bits)
``nvfp4``                 NVIDIA: E2M1 values, one E4M3 scale per 16, one float32     ``n/2 + n/16 + 4`` (4.5 bits)
                          scale per tensor
========================  ==========================================================  ============

The two FP4 block formats need ``in`` to be a whole number of blocks (their kernels do not pad a
row): :func:`refusal` says why a matrix cannot take one.
"""

from __future__ import annotations

import math

from ...ir import DTYPE_BYTES

PLAIN = ("float32", "bfloat16", "float16")
TRAINABLE = PLAIN  # what a training step computes in and keeps gradients of (opcount.llm.training)
FORMATS = (*PLAIN, "float8_e4m3fn", "fp8-block", "int8", "int4", "mxfp4", "nvfp4")
ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
    "fp8": "float8_e4m3fn",
    "float8": "float8_e4m3fn",
    "fp8_block": "fp8-block",
    "float8-block": "fp8-block",
    "mx-fp4": "mxfp4",
    "nv-fp4": "nvfp4",
}
# Nominal bits of a value (the w4 of w4a16), scales aside.
BITS = {
    "float32": 32,
    "bfloat16": 16,
    "float16": 16,
    "float8_e4m3fn": 8,
    "fp8-block": 8,
    "int8": 8,
    "int4": 4,
    "mxfp4": 4,
    "nvfp4": 4,
}
GROUP_SIZE = 128  # int4
FP8_BLOCK = 128  # fp8-block: 128 x 128
MX_BLOCK = 32  # mxfp4: one E8M0 scale per 32 values
NV_BLOCK = 16  # nvfp4: one E4M3 scale per 16 values
_HALF = 2  # float16 scales and zero-points
_FP32 = 4  # float32 per-tensor and per-block scales


def matrix_bytes(fmt: str, out: int, inner: int) -> int:
    """Bytes of one ``out x inner`` matrix stored in ``fmt`` (see the module's table)."""
    n = out * inner
    if fmt == "float8_e4m3fn":
        return n + _FP32
    if fmt == "fp8-block":
        return n + _FP32 * math.ceil(out / FP8_BLOCK) * math.ceil(inner / FP8_BLOCK)
    if fmt == "int8":
        return n + _HALF * out
    if fmt == "int4":
        return math.ceil(n / 2) + 2 * _HALF * out * math.ceil(inner / GROUP_SIZE)
    if fmt == "mxfp4":
        return n // 2 + n // MX_BLOCK
    if fmt == "nvfp4":
        return n // 2 + n // NV_BLOCK + _FP32
    return n * int(DTYPE_BYTES[fmt])


def refusal(fmt: str, inner: int) -> str | None:
    """Why a matrix whose rows hold ``inner`` elements cannot be stored in ``fmt`` (None: it can)."""
    block = {"mxfp4": MX_BLOCK, "nvfp4": NV_BLOCK}.get(fmt)
    if block is not None and inner % block:
        return f"{fmt} stores rows in blocks of {block} elements and its rows hold {inner} (not padded)"
    return None


def stacked_bytes(fmt: str, shape: tuple[int, ...], transposed: bool = False) -> int:
    """Bytes of a weight of ``shape``: ``[out, in]``, a vector (one row), or a stack
    ``[experts, out, in]`` quantized per expert matrix (``[experts, in, out]`` when ``transposed``)."""
    if len(shape) < 2:
        return matrix_bytes(fmt, 1, math.prod(shape))
    *stack, rows, cols = shape
    out, inner = (cols, rows) if transposed else (rows, cols)
    return math.prod(stack) * matrix_bytes(fmt, out, inner)


def inner_size(shape: tuple[int, ...], transposed: bool = False) -> int:
    """The elements of one row (the dot product's length) of a weight of ``shape``."""
    if len(shape) < 2:
        return math.prod(shape)
    return shape[-2] if transposed else shape[-1]
