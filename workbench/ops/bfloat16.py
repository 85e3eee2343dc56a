"""bfloat16's bits as array math, and ``round_bf16``.

bfloat16 is a storage type of its own (``DType.bfloat16``): NumPy holds it as
ml_dtypes' bfloat16, and an array module without a bfloat16 type (CuPy) as the same 16
bits in uint16. :func:`to_bits` / :func:`from_bits` convert between float32 and those
bits with integer operations any NumPy-like module runs (round to nearest even; NaN
stays NaN, overflow is inf) -- the arithmetic of the kernels' ``wb_bf16_store`` /
``wb_bf16_load``.

``round_bf16`` rounds a float32 value to bfloat16's precision and keeps it in float32:
the op for formats held in float32 that round like bfloat16, and graphs saved before
bfloat16 storage.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import DType
from .elementwise import BF16, _unary

# the bits of a quiet NaN (a NaN's own bits, rounded, could carry into an inf)
QUIET_NAN = 0x7FC0


def to_bits(xp, x):
    """float32 values as bfloat16 bits (uint16), rounded to nearest even."""
    u = xp.ascontiguousarray(xp.asarray(x, dtype=xp.float32)).view(xp.uint32)
    r = (u >> 16) + (((u & 0xFFFF) + ((u >> 16) & 1) + 0x7FFF) >> 16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return xp.where(nan, (u >> 16) | 0x40, r).astype(xp.uint16)


def from_bits(xp, h):
    """bfloat16 bits (uint16) as float32 values (exact)."""
    return (xp.asarray(h).astype(xp.uint32) << 16).view(xp.float32)


def as_bits(a: np.ndarray) -> np.ndarray:
    """A NumPy array as a store without bfloat16 takes it (.npy, CuPy): a bfloat16
    array as a view of its bits (uint16), anything else as it is."""
    return a.view(np.uint16) if a.dtype == DType.bfloat16.np else a


def bits_as(a: np.ndarray, dtype: DType) -> np.ndarray:
    """The inverse of :func:`as_bits` for a value of the IR's ``dtype``: bits of a
    bfloat16 value as a view of ml_dtypes' bfloat16, anything else as it is."""
    return a.view(DType.bfloat16.np) if dtype is DType.bfloat16 else a


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16's precision (still float32)."""
    x = np.asarray(x, dtype=np.float32)
    return from_bits(np, to_bits(np, x)).reshape(x.shape)


_unary("round_bf16", "wb_round_bf16({0})", round_bf16, helpers=(BF16,),
       doc="round float32 to bfloat16 precision (a cast to bfloat16, held in float32)")
