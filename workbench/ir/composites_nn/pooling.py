"""Pooling as composites: MaxPool, AveragePool, LpPool and torch's adaptive average
pooling, each a ``window`` over the trailing axes and a reduction over its taps (or, for
adaptive windows no one window holds, a product with each axis's averaging matrix)."""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError
from ...ops.window import pool_geometry


def _window(b, x, geo, fill):
    # the window clipped to the taps that read the input (PoolGeometry): a pool larger
    # than its map reduces over what it reads, not over its padding
    return b.window(x, kernel=list(geo.window_kernel), strides=list(geo.strides),
                    dilations=list(geo.dilations), pads=list(geo.window_pads), fill=fill)


def _tap_axes(x, d):
    rank = len(x.shape) + d
    return list(range(rank - d, rank))


def _taps(b, x, geo, fill):
    """(what the pool reduces, its axes, keepdims): the map itself over its spatial axes
    (kept, as size-1 output axes) when one window holds exactly the whole map -- the
    pool is then GlobalAveragePool's or GlobalMaxPool's reduction -- else the window
    over its taps."""
    d, rank = len(geo.kernel), len(x.shape)
    if geo.covers(x.shape[rank - d:]):
        return x, list(range(rank - d, rank)), True
    return _window(b, x, geo, fill), _tap_axes(x, d), False


def max_pool(b, x, kernel, strides=None, dilations=None, pads=None, ceil_mode=False,
             source: str = "", kind: str = "MaxPool", indices: str | None = None):
    """MaxPool over the trailing len(kernel) axes; padding never wins.

    ``indices`` also returns where each maximum is (its first occurrence in the
    window): ``"plane"`` as a flat index into its spatial plane (torch), ``"global"``
    into the whole input (ONNX, storage_order 0). The positions are a constant the
    same window reads, so the index is a reduction beside the max, no gather."""
    with b.composite(kind, source):
        d = len(kernel)
        spatial = x.shape[len(x.shape) - d:]
        geo = pool_geometry(spatial, kernel, strides, dilations, pads, ceil_mode)
        if indices is None:
            w, taps, keep = _taps(b, x, geo, "lowest")
            return b.reduce_max(w, axes=taps, keepdims=keep)
        w = _window(b, x, geo, "lowest")
        taps = _tap_axes(x, d)
        m = b.reduce_max(w, axes=taps, keepdims=True)
        lead = len(x.shape) - d
        if indices == "plane":
            pos = np.arange(math.prod(spatial), dtype=np.int64).reshape(
                (1,) * lead + tuple(spatial))
        elif indices == "global":
            pos = np.arange(math.prod(x.shape), dtype=np.int64).reshape(x.shape)
        else:
            raise GraphError(f"max_pool indices {indices!r}: use 'plane' or 'global'")
        at = _window(b, b.constant(pos), geo, "lowest")
        big = b.constant(np.array(np.iinfo(np.int64).max, np.int64))
        idx = b.reduce_min(b.where(b.eq(w, m), at, big), axes=taps, keepdims=False)
        out_shape = list(x.shape[:lead]) + list(geo.out)
        return b.reshape(m, shape=out_shape), idx


def avg_pool(b, x, kernel, strides=None, dilations=None, pads=None, ceil_mode=False,
             count_include_pad=False, source: str = "", kind: str = "AveragePool"):
    """AveragePool: the window's sum over the taps counted (inside the input, or inside
    it and its padding with count_include_pad; never what ceil_mode adds)."""
    with b.composite(kind, source):
        d = len(kernel)
        spatial = x.shape[len(x.shape) - d:]
        geo = pool_geometry(spatial, kernel, strides, dilations, pads, ceil_mode)
        w, axes, keep = _taps(b, x, geo, "zero")
        div = geo.divisor(spatial, count_include_pad)
        # (the taps clipped off read only zeros: the sum is the whole window's)
        if np.all(div == math.prod(geo.window_kernel)):
            return b.reduce_mean(w, axes=axes, keepdims=keep)
        s = b.reduce_sum(w, axes=axes, keepdims=keep)
        return s * b.constant((1.0 / div).astype(x.dtype.np))


def adaptive_avg_pool(b, x, out, source: str = ""):
    """torch's adaptive average pooling to ``out`` (one size per trailing axis): output i
    of an axis of n averages inputs floor(i n / out) to ceil((i + 1) n / out) - 1.
    Windows of one size (out divides n) are an AveragePool; otherwise they differ in size
    or overlap (VGG's pool to 7 x 7 from a smaller image), which no window holds, and
    each axis is a product with its averaging matrix."""
    d = len(out)
    rank = len(x.shape)
    spatial = x.shape[rank - d:]
    if all(o == 1 for o in out):
        with b.composite("AdaptiveAvgPool", source):
            return b.reduce_mean(x, axes=list(range(rank - d, rank)), keepdims=True)
    if all(n % o == 0 for n, o in zip(spatial, out)):
        kernel = [n // o for n, o in zip(spatial, out)]
        return avg_pool(b, x, kernel, kernel, source=source, kind="AdaptiveAvgPool")
    with b.composite("AdaptiveAvgPool", source):
        y = x
        for axis, n, o in zip(range(rank - d, rank), spatial, out):
            mean = np.zeros((n, o), x.dtype.np)
            for i in range(o):
                lo, hi = i * n // o, -(-(i + 1) * n // o)
                mean[lo:hi, i] = 1.0 / (hi - lo)
            # the axis moved last, multiplied, moved back (a swap: its own inverse)
            swap = list(range(rank))
            swap[axis], swap[-1] = swap[-1], swap[axis]
            t = y if axis == rank - 1 else b.transpose(y, perm=swap)
            t = b.matmul(t, b.constant(mean))
            y = t if axis == rank - 1 else b.transpose(t, perm=swap)
        return y


def lp_pool(b, x, kernel, p: int = 2, strides=None, dilations=None, pads=None,
            ceil_mode=False, source: str = ""):
    """LpPool: (sum over the window of |x|^p)^(1/p); padding adds nothing."""
    with b.composite("LpPool", source):
        d = len(kernel)
        geo = pool_geometry(x.shape[len(x.shape) - d:], kernel, strides, dilations, pads,
                            ceil_mode)
        w, axes, keep = _taps(b, x, geo, "zero")
        a = b.abs(w)
        powered = a * a if p == 2 else b.pow(a, b.as_tensor(float(p), like=x))
        s = b.reduce_sum(powered, axes=axes, keepdims=keep)
        return b.sqrt(s) if p == 2 else b.pow(s, b.as_tensor(1.0 / p, like=x))
