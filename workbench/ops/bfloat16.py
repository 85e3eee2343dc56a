"""bfloat16, held in float32: ``round_bf16`` rounds a float32 value to bfloat16's
precision (8 significant bits, round to nearest even; NaN stays NaN, overflow is inf).

The workbench has no bfloat16 storage type: an importer holds bfloat16 values in
float32 (exactly -- every bfloat16 is a float32) and a cast to bfloat16 becomes this
op, so a model that rounds to bfloat16 rounds here too; its arithmetic then runs in
float32, more precise than bfloat16 arithmetic between the casts.
"""
from __future__ import annotations

import numpy as np

from .elementwise import _unary
from .registry import Helper

# (a union reads the float's bits in C and CUDA alike; NaN is returned as it is, since
# adding the rounding bias could carry a NaN payload into the exponent)
ROUND_BF16 = Helper("wb_round_bf16", r"""/* float32 -> bfloat16 precision, round to nearest even */
WB_FN float wb_round_bf16(float x) {
  union { float f; unsigned int u; } v; v.f = x;
  if (x != x) return x;
  v.u = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) & 0xffff0000u;
  return v.f;
}
""")


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16's precision (still float32)."""
    x = np.asarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, r).reshape(x.shape)


_unary("round_bf16", "wb_round_bf16({0})", round_bf16, helpers=(ROUND_BF16,),
       doc="round float32 to bfloat16 precision (a cast to bfloat16, held in float32)")
