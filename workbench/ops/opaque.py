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


def _conv_attr(attrs, key, default, n, lo):
    v = attr_ints(attrs, key, default)
    if len(v) != n or any(x < lo for x in v):
        raise GraphError(f"conv2d attr {key} must be {n} integers >= {lo}, got {list(v)}")
    return v


def conv_attrs(attrs):
    """(group, strides, dilations, pads) of a conv2d, validated."""
    group = attr_int(attrs, "group", 1)
    if group < 1:
        raise GraphError(f"conv2d attr group must be >= 1, got {group}")
    return (group, _conv_attr(attrs, "strides", (1, 1), 2, 1),
            _conv_attr(attrs, "dilations", (1, 1), 2, 1),
            _conv_attr(attrs, "pads", (0, 0, 0, 0), 4, 0))


def conv_out_shape(x, w, attrs):
    n, c, h, wd = x
    k, cg, r, s = w
    group, (sh, sw), (dh, dw), (pt, pl, pb, pr) = conv_attrs(attrs)
    if c != cg * group or k % group:
        raise GraphError(f"conv2d channels {c} do not match weight {list(w)} with group {group}")
    oh = (h + pt + pb - dh * (r - 1) - 1) // sh + 1
    ow = (wd + pl + pr - dw * (s - 1) - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise GraphError("conv2d output would be empty")
    return (n, k, oh, ow)


def _conv_infer(ins, attrs):
    x, w = ins[0], ins[1]
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise GraphError("conv2d needs NCHW input and KCRS weight")
    if any(v.dtype is not x.dtype for v in ins) or x.dtype.kind != "f":
        raise GraphError("conv2d needs float inputs of one dtype (input, weight and bias), "
                         f"got {', '.join(v.dtype.value for v in ins)}")
    shape = conv_out_shape(x.shape, w.shape, attrs)
    if len(ins) == 3 and ins[2].shape != (shape[1],):
        raise GraphError(f"conv2d bias must have shape [{shape[1]}]")
    return [(shape, x.dtype)]


def conv2d_reference(xs, attrs, xp=np):
    """Direct convolution as one tensordot per filter tap; xp is numpy or cupy."""
    x, w = xs[0], xs[1]
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    group, (sh, sw), (dh, dw), (pt, pl, pb, pr) = conv_attrs(attrs)
    _, _, oh, ow = conv_out_shape(x.shape, w.shape, attrs)
    acc = xp.float32 if x.dtype == xp.float16 else x.dtype
    xpad = xp.pad(x.astype(acc), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    out = xp.zeros((n, k, oh, ow), dtype=acc)
    kg = k // group
    for g in range(group):
        xg = xpad[:, g * cg:(g + 1) * cg]
        wg = w[g * kg:(g + 1) * kg].astype(acc)
        for i in range(r):
            for j in range(s):
                patch = xg[:, :, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                           j * dw: j * dw + sw * (ow - 1) + 1: sw]
                out[:, g * kg:(g + 1) * kg] += xp.einsum("nchw,kc->nkhw", patch, wg[:, :, i, j])
    if len(xs) == 3:
        out += xs[2].astype(acc)[None, :, None, None]
    return [out.astype(x.dtype)]


def _conv_flops(in_shapes, out_shape, attrs) -> float:
    # each output element: one multiply-add per weight of its filter (C/group x R x S)
    return 2.0 * math.prod(out_shape) * math.prod(in_shapes[1][1:])


register(OpDef("conv2d", Kind.opaque, (2, 3), _conv_infer, conv2d_reference, None,
               "2-D convolution NCHW x KCRS (+bias); attrs strides, pads, dilations, group",
               library=lambda xp, xs, attrs: conv2d_reference(xs, attrs, xp=xp),
               library_flops=_conv_flops,
               error_scale=lambda xs, attrs: conv2d_reference(list(xs), attrs)[0]))
