"""Opaque library ops: compute-bound work handed to NumPy (CPU) or CuPy (GPU).

Fusion never puts them in a group with other ops; codegen emits a library call, which
the backend runs with the op's ``library`` implementation on its array module. Each
says how much arithmetic it does (``library_flops``) for the kernel IR and the cost
model.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GraphError
from .registry import Kind, OpDef, attr_int, attr_ints, broadcast_shapes, register


def _matmul_infer(ins, attrs):
    a, b = ins
    if a.dtype is not b.dtype or a.dtype.kind != "f":
        raise GraphError("matmul needs two float inputs of one dtype")
    if len(a.shape) < 1 or len(b.shape) < 1:
        raise GraphError("matmul needs inputs of rank >= 1")
    sa, sb = list(a.shape), list(b.shape)
    va, vb = len(sa) == 1, len(sb) == 1
    if va:
        sa = [1] + sa
    if vb:
        sb = sb + [1]
    if sa[-1] != sb[-2]:
        raise GraphError(f"matmul inner dims differ: {list(a.shape)} @ {list(b.shape)}")
    batch = broadcast_shapes(tuple(sa[:-2]), tuple(sb[:-2]))
    shape = list(batch) + ([] if va else [sa[-2]]) + ([] if vb else [sb[-1]])
    return [(tuple(shape), a.dtype)]


def _matmul_ref(xs, attrs):
    a, b = xs
    if a.dtype == np.float16:  # accumulate in float32, as cuBLAS does
        return [np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)]
    return [np.matmul(a, b)]


def _matmul_library(xp, xs, attrs):
    a, b = xs
    if a.dtype == np.float16 and xp is np:   # NumPy would accumulate in half precision
        return _matmul_ref(xs, attrs)
    return [xp.matmul(a, b)]


def _matmul_flops(in_shapes, out_shape, attrs) -> float:
    # 2 per multiply-add; the inner dimension is the first input's last
    return 2.0 * math.prod(out_shape) * in_shapes[0][-1]


register(OpDef("matmul", Kind.opaque, (2, 2), _matmul_infer, _matmul_ref, None,
               "NumPy matmul semantics (batched, broadcast)", library=_matmul_library,
               library_flops=_matmul_flops,
               # a dot product's rounding is bounded by the sum of |a_k b_k| it adds
               error_scale=lambda ab, attrs: np.matmul(ab[0], ab[1])))

# convolution (conv, and conv2d its 2-D spelling) lives in ops/conv.py
