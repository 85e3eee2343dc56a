"""Convolution over 1, 2 or 3 spatial axes, with groups (depthwise included), strides,
dilations and pads: a compute-bound library op (NumPy on the CPU, CuPy on the GPU).

``conv`` takes any of the three ranks; ``conv2d`` is its 2-D spelling, kept for graphs
that name it. Both are this one definition: one shape rule, one implementation (per
filter tap, a batched matmul of every group's channels at once) and one count of its
arithmetic, which the kernel IR and the cost model both read.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GraphError
from .footprint import whole_axis, window_positions
from .registry import Kind, OpDef, attr_int, attr_ints, register


def _attr(name, attrs, key, default, n, lo):
    v = attr_ints(attrs, key, default)
    if len(v) != n or any(x < lo for x in v):
        raise GraphError(f"{name} attr {key} must be {n} integers >= {lo}, got {list(v)}")
    return v


def conv_attrs(attrs, d: int, name: str = "conv"):
    """(group, strides, dilations, pads begin..end) of a convolution over d axes."""
    group = attr_int(attrs, "group", 1)
    if group < 1:
        raise GraphError(f"{name} attr group must be >= 1, got {group}")
    return (group, _attr(name, attrs, "strides", (1,) * d, d, 1),
            _attr(name, attrs, "dilations", (1,) * d, d, 1),
            _attr(name, attrs, "pads", (0,) * (2 * d), 2 * d, 0))


def conv_out_shape(x, w, attrs, name: str = "conv"):
    d = len(x) - 2
    n, c = x[:2]
    k, cg = w[:2]
    group, strides, dil, pads = conv_attrs(attrs, d, name)
    if c != cg * group or k % group:
        raise GraphError(f"{name} channels {c} do not match weight {list(w)} with group "
                         f"{group} (the weight needs {c}/group input channels and a "
                         "multiple of group filters)")
    out = [(size + pads[i] + pads[i + d] - dil[i] * (r - 1) - 1) // strides[i] + 1
           for i, (size, r) in enumerate(zip(x[2:], w[2:]))]
    if any(o <= 0 for o in out):
        raise GraphError(f"{name} output would be empty: kernel {list(w[2:])} does not fit "
                         f"input {list(x[2:])} with pads {list(pads)}")
    return (n, k, *out)


def _infer(name, ranks):
    def infer(ins, attrs):
        x, w = ins[0], ins[1]
        if len(x.shape) not in ranks or len(w.shape) != len(x.shape):
            want = " or ".join(str(r - 2) for r in ranks)
            raise GraphError(f"{name} needs an input [N, C, *spatial] and a weight [K, C/group,"
                             f" *kernel] of one rank with {want} spatial axes, got "
                             f"{list(x.shape)} and {list(w.shape)}")
        if any(v.dtype is not x.dtype for v in ins) or x.dtype.kind != "f":
            raise GraphError(f"{name} needs float inputs of one dtype (input, weight and "
                             f"bias), got {', '.join(v.dtype.value for v in ins)}")
        shape = conv_out_shape(x.shape, w.shape, attrs, name)
        if len(ins) == 3 and ins[2].shape != (shape[1],):
            raise GraphError(f"{name} bias must have shape [{shape[1]}]")
        return [(shape, x.dtype)]
    return infer


# the im2col buffer (every tap's patch of the input) a convolution may build to run as
# one matmul; larger ones run tap by tap
IM2COL_BYTES = 64 << 20


def conv_reference(xs, attrs, xp=np):
    """Convolution as matmuls over every group: the taps' input patches side by side
    (im2col, [N, G, C/G x taps, positions]) times the weight [G, K/G, C/G x taps] in
    one matmul -- the input itself reordered when the patches do not overlap (strides
    equal to the kernel), else built when it stays within IM2COL_BYTES -- or else one
    batched matmul per filter tap, accumulated; xp is NumPy or CuPy. Half precision
    accumulates in float32, as cuDNN does (tests/ops/test_conv_paths.py)."""
    x, w = xs[0], xs[1]
    d = x.ndim - 2
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    group, strides, dil, pads = conv_attrs(attrs, d)
    out_sp = conv_out_shape(x.shape, w.shape, attrs)[2:]
    acc = xp.float32 if x.dtype == xp.float16 else x.dtype
    xpad = xp.pad(x.astype(acc), [(0, 0), (0, 0)] + [(pads[i], pads[i + d]) for i in range(d)])
    kg, npos = k // group, math.prod(out_sp)
    wt = w.astype(acc).reshape(group, kg, cg, -1)        # [G, K/G, C/G, taps]
    taps = wt.shape[-1]

    def patch(tap):
        sl = tuple(slice(r * dl, r * dl + s * (o - 1) + 1, s)
                   for r, dl, s, o in zip(tap, dil, strides, out_sp))
        return xpad[(slice(None), slice(None)) + sl].reshape(n, group, cg, npos)

    kernel = tuple(w.shape[2:])
    if tuple(strides) == kernel and all(x == 1 for x in dil):
        # patches side by side without overlap (a ViT's patch embedding): the im2col
        # buffer is the input itself, its axes reordered to [C, kernel..., out...]
        crop = xpad[(slice(None), slice(None)) + tuple(slice(0, o * s)
                                                        for o, s in zip(out_sp, strides))]
        split = crop.reshape((n, c) + tuple(v for o, s in zip(out_sp, kernel) for v in (o, s)))
        order = (0, 1) + tuple(3 + 2 * i for i in range(d)) + tuple(2 + 2 * i for i in range(d))
        cols = split.transpose(order).reshape(n, group, cg * taps, npos)
        out = xp.matmul(wt.reshape(group, kg, cg * taps)[None], cols)
    elif n * c * taps * npos * np.dtype(acc).itemsize <= IM2COL_BYTES:
        # every tap's patch side by side (im2col), one matmul per group: a ViT's patch
        # embedding (64 taps of 3 channels) is one product instead of 64 tiny ones
        cols = xp.stack([patch(t) for t in np.ndindex(*w.shape[2:])], axis=3)
        out = xp.matmul(wt.reshape(group, kg, cg * taps)[None],
                        cols.reshape(n, group, cg * taps, npos))
    else:
        out = xp.zeros((n, group, kg, npos), dtype=acc)
        for t, tap in enumerate(np.ndindex(*w.shape[2:])):
            out += xp.matmul(wt[None, :, :, :, t], patch(tap))
    out = out.reshape((n, k) + tuple(out_sp))
    if len(xs) == 3:
        out += xs[2].astype(acc).reshape((k,) + (1,) * d)
    return [out.astype(x.dtype)]


def conv_flops(in_shapes, out_shape, attrs) -> float:
    """Each output element: one multiply-add per weight of its filter (C/group x taps)."""
    return 2.0 * math.prod(out_shape) * math.prod(in_shapes[1][1:])


def _conv_reads(shapes, attrs, k, consts):
    # A generated convolution (a GEMM's patches, codegen/lower/convolution.py) reads the
    # input positions its taps reach: not the padding (its patches test the bounds),
    # nor the positions between taps that a stride past the filter's extent skips. (A
    # library call reads its whole input: fusion/footprint.py asks no rule of it.)
    if k != 0:
        return None
    x, w = shapes[0], shapes[1]
    d = len(x) - 2
    _, strides, dil, pads = conv_attrs(attrs, d)
    out = conv_out_shape(x, w, attrs)[2:]
    return (None, None) + tuple(
        whole_axis(window_positions(x[2 + i], out[i], w[2 + i], strides[i], dil[i],
                                    pads[i], clamp=False), x[2 + i]) for i in range(d))


def _register(name, ranks, doc):
    register(OpDef(name, Kind.opaque, (2, 3), _infer(name, ranks), conv_reference, None, doc,
                   reads=_conv_reads,
                   library=lambda xp, xs, attrs: conv_reference(xs, attrs, xp=xp),
                   library_flops=conv_flops,
                   # each output's rounding is bounded by the sum of |x w| it adds
                   error_scale=lambda ms, attrs: conv_reference(list(ms), attrs)[0]))


_register("conv2d", (4,), "2-D convolution NCHW x KCRS (+bias); attrs strides, pads "
          "(begin..., end...), dilations, group")
_register("conv", (3, 4, 5), "convolution over 1 to 3 spatial axes, [N, C, *spatial] x "
          "[K, C/group, *kernel] (+bias [K]); attrs strides, pads (begin..., end...), "
          "dilations, group (group = C: depthwise)")
# the convolution ops' names (conv2d is conv's 2-D spelling), for the passes that treat
# both alike
CONVS = ("conv", "conv2d")
