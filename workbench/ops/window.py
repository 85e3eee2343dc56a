"""Sliding windows and padding: the layout ops pooling and Pad are built from.

Pooling is memory-bound, so it is not a library call: a pool is ``window`` (a layout
op that lays each output position's window out along trailing axes, reading the input
through its index rule) followed by an ordinary reduction over those axes --
``reduce_max`` for MaxPool, ``reduce_sum`` times a per-position divisor for
AveragePool. The window is never materialized when the planner fuses it into the
reduction's kernel, and a following ReLU or add joins that kernel like any epilogue.

``pad`` pads (or, with negative pads, crops) every axis: a constant, the edge value,
or the mirror image (``reflect``).

The geometry both frontends share (output sizes with ceil_mode, the average's divisor
with and without the padding counted) is defined here once: :func:`pool_geometry`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import GraphError
from ..dtypes import DType, c_literal
from ..shapes import check_shape
from .footprint import whole_axis, window_positions
from .index import Index, add, mul
from .elementwise import LIMITS
from .layout import CLAMPI
from .registry import Kind, OpDef, RowRole, attr_ints, register

# the value a window reads outside its input: what the pooling reduction ignores
FILLS = ("lowest", "zero")


def _spatial_attr(attrs, key, n, lo, default):
    v = attr_ints(attrs, key, default)
    if len(v) != n or any(x < lo for x in v):
        raise GraphError(f"window attr {key} must be {n} integers >= {lo}, got {list(v)}")
    return v


def window_attrs(shape, attrs):
    """(kernel, strides, dilations, pads) of a window node, validated against shape."""
    kernel = attr_ints(attrs, "kernel")
    d = len(kernel)
    if not 1 <= d <= len(shape) or any(k < 1 for k in kernel):
        raise GraphError(f"window attr kernel {list(kernel)} must be 1 to {len(shape)} "
                         "integers >= 1 (one per trailing axis of the input)")
    strides = _spatial_attr(attrs, "strides", d, 1, (1,) * d)
    dil = _spatial_attr(attrs, "dilations", d, 1, (1,) * d)
    pads = _spatial_attr(attrs, "pads", 2 * d, 0, (0,) * (2 * d))
    fill = attrs.get("fill", "zero")
    if fill not in FILLS:
        raise GraphError(f"window attr fill must be one of {', '.join(FILLS)}, got {fill!r:.40}")
    return kernel, strides, dil, pads


def window_out(n: int, k: int, s: int, d: int, pb: int, pe: int) -> int:
    """Windows along one axis of length n padded by pb, pe (floor mode)."""
    return (n + pb + pe - d * (k - 1) - 1) // s + 1


def _window_infer(ins, attrs):
    x = ins[0]
    kernel, strides, dil, pads = window_attrs(x.shape, attrs)
    d = len(kernel)
    if attrs.get("fill", "zero") == "lowest" and x.dtype.kind == "b":
        raise GraphError("a window of bool values has no lowest value to pad with")
    spatial = x.shape[len(x.shape) - d:]
    out = [window_out(n, k, s, dl, pads[i], pads[i + d])
           for i, (n, k, s, dl) in enumerate(zip(spatial, kernel, strides, dil))]
    if any(o <= 0 for o in out):
        raise GraphError(f"window {list(kernel)} does not fit input {list(x.shape)} "
                         f"with pads {list(pads)}: no output position")
    shape = x.shape[:len(x.shape) - d] + tuple(out) + tuple(kernel)
    return [(check_shape(shape, "window result"), x.dtype)]


def _fill_value(fill: str, dtype: np.dtype):
    if fill == "zero":
        return 0
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _window_ref(xs, attrs):
    x = xs[0]
    kernel, strides, dil, pads = window_attrs(x.shape, attrs)
    d = len(kernel)
    lead = x.ndim - d
    fill = _fill_value(attrs.get("fill", "zero"), x.dtype)
    xp = np.pad(x, [(0, 0)] * lead + [(pads[i], pads[i + d]) for i in range(d)],
                constant_values=fill)
    out_shape = _window_infer([_Arr(x)], attrs)[0][0]
    res = np.empty(out_shape, x.dtype)
    outs = out_shape[lead:lead + d]
    for tap in np.ndindex(*kernel):
        sl = tuple(slice(t * dl, t * dl + s * (o - 1) + 1, s)
                   for t, dl, s, o in zip(tap, dil, strides, outs))
        res[(Ellipsis,) + tap] = xp[(Ellipsis,) + sl]
    return [res]


class _Arr:
    def __init__(self, a):
        self.shape, self.dtype = tuple(a.shape), DType.of(a.dtype)


def _fill_c(fill: str, dt: DType) -> str:
    if fill == "zero":
        return "0" if dt.kind != "f" else "0.0f"
    return "(-INFINITY)" if dt.kind == "f" else f"WB_MIN_{dt.value}"


def _window_index(ctx, node, k, idx: Index) -> str:
    src = node.inputs[0]
    shape = ctx.shape(src)
    kernel, strides, dil, pads = window_attrs(shape, node.attr_map)
    d = len(kernel)
    lead = len(shape) - d
    digits = idx.digits()
    outs = idx.shape[lead:lead + d]
    src_digits = list(digits[:lead])
    inside = []
    for i in range(d):
        o, t = digits[lead + i], digits[lead + d + i]
        pos = add(add(mul(o, strides[i]), mul(t, dil[i])), str(-pads[i]))
        n = shape[lead + i]
        lo_ok = pads[i] == 0                     # the first window starts at 0
        hi_ok = (outs[i] - 1) * strides[i] + (kernel[i] - 1) * dil[i] - pads[i] < n
        if lo_ok and hi_ok:
            src_digits.append(pos)
            continue
        p = ctx.let(DType.int64, f"(long long){pos}")
        conds = ([] if lo_ok else [f"{p} >= 0"]) + ([] if hi_ok else [f"{p} < {n}"])
        inside.append(" && ".join(conds))
        src_digits.append(f"wb_clampi({p}, 0, {n - 1})")
    return _padded_read(ctx, node, src, src_digits, shape, inside,
                        lambda dt: _fill_c(node.attr("fill", "zero"), dt))


def _padded_read(ctx, node, src, digits, shape, inside, fill) -> str:
    """The element of ``src`` at ``digits`` (each in bounds: clamped), or ``fill(dt)``
    (C text) where one of the ``inside`` conditions fails: branch-free padding, shared
    by window and pad."""
    val = ctx.at(src, Index.from_digits(digits, shape))
    if not inside:
        return val
    dt = ctx.dtype(node.outputs[0])
    return ctx.let(dt.compute, f"(({' && '.join(inside)}) ? {val} : {fill(dt)})")


def _window_reads(shapes, attrs, k, consts):
    # A pooling window reads the positions its windows reach -- not the padding, nor
    # what lies between windows whose stride passes their extent (a 1 x 1 pool of
    # stride 2 reads a quarter of its input); a tap in the padding loads the clamped
    # edge element (branch-free), which is counted as read.
    x = shapes[0]
    kernel, strides, dil, pads = window_attrs(x, attrs)
    d, lead = len(kernel), len(x) - len(kernel)
    out = [window_out(n, kk, s, dl, pads[i], pads[i + d])
           for i, (n, kk, s, dl) in enumerate(zip(x[lead:], kernel, strides, dil))]
    return (None,) * lead + tuple(
        whole_axis(window_positions(x[lead + i], out[i], kernel[i], strides[i], dil[i],
                                    pads[i], clamp=True), x[lead + i]) for i in range(d))


register(OpDef("window", Kind.layout, (1, 1), _window_infer, _window_ref, None,
               "sliding windows over the trailing len(kernel) axes: out[..., o, t] = "
               "x[..., o*strides + t*dilations - pads_begin] (attrs kernel, strides, "
               "dilations, pads begin+end, fill zero|lowest outside the input); the "
               "window taps are the trailing axes, for a reduction to pool over",
               helpers=(LIMITS, CLAMPI), index=_window_index, reads=_window_reads,
               # an element of the pooling reduction's row, read from the input by its
               # index rule (its producers cannot join: their shape is not the row's)
               row_role=RowRole.element))


# -- pooling geometry, shared by both frontends ----------------------------------

@dataclass(frozen=True)
class PoolGeometry:
    """A pool's window over the trailing spatial axes, ceil_mode resolved into extra
    end padding (positions past the input, filled and never counted), and the window
    as lowered: clipped to the taps that read the input for some output position.

    A tap no output position ever reads inside the input contributes only its fill
    (zero to a sum, the lowest value to a max), so dropping it changes no result, and
    the average's divisor is counted on the window as given. Without the clip, torch's
    ``AvgPool2d(1280, ceil_mode=True)`` on a 7 x 7 map (EfficientNet's pooler) is a
    reduction over 1280 x 1280 taps of which 49 are real."""
    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    pads: tuple[int, ...]           # begin..., end... as given
    extra: tuple[int, ...]          # end padding ceil_mode adds
    out: tuple[int, ...]
    window_kernel: tuple[int, ...] = ()     # the taps kept, per axis
    window_pads: tuple[int, ...] = ()       # begin..., end... of the kept window

    def divisor(self, spatial, count_include_pad: bool) -> np.ndarray:
        """How many taps of each window an average divides by: those inside the input,
        or (count_include_pad) inside the input and its given padding -- never the
        positions ceil_mode added past it."""
        d = len(self.kernel)
        per_axis = []
        for i, n in enumerate(spatial):
            lo = -self.pads[i] if count_include_pad else 0
            hi = n + self.pads[i + d] if count_include_pad else n
            o = np.arange(self.out[i])[:, None]
            t = np.arange(self.kernel[i])[None, :]
            pos = o * self.strides[i] + t * self.dilations[i] - self.pads[i]
            per_axis.append(((pos >= lo) & (pos < hi)).sum(axis=1))
        div = per_axis[0]
        for a in per_axis[1:]:
            div = np.multiply.outer(div, a)
        # (a window wholly in the padding counts nothing: its sum 0 stays 0, not NaN)
        return np.maximum(div, 1).astype(np.float64)

    def covers(self, spatial) -> bool:
        """Whether the lowered window is one window holding exactly the whole map (no
        padding read): the pool is then a reduction over the spatial axes."""
        return (all(o == 1 for o in self.out) and tuple(self.window_kernel) == tuple(spatial)
                and not any(self.window_pads) and all(dl == 1 for dl in self.dilations))


def pool_geometry(spatial, kernel, strides=None, dilations=None, pads=None,
                  ceil_mode: bool = False) -> PoolGeometry:
    """The window of a pool over ``spatial``; GraphError when it does not fit."""
    d = len(kernel)
    strides = tuple(strides or (1,) * d)
    dilations = tuple(dilations or (1,) * d)
    pads = tuple(pads or (0,) * (2 * d))
    if len(strides) != d or len(dilations) != d or len(pads) != 2 * d:
        raise GraphError(f"pool kernel {list(kernel)}: strides {list(strides)}, dilations "
                         f"{list(dilations)} and pads {list(pads)} must give one entry per "
                         "spatial axis (pads two)")
    if any(p < 0 for p in pads) or any(s < 1 for s in strides + dilations):
        raise GraphError(f"pool pads {list(pads)} must be >= 0 and strides/dilations >= 1")
    out, extra = [], []
    for i, (n, k, s, dl) in enumerate(zip(spatial, kernel, strides, dilations)):
        span = n + pads[i] + pads[i + d] - dl * (k - 1) - 1
        o = (-(-span // s) if ceil_mode else span // s) + 1
        # ceil_mode: the last window must start inside the input or its left padding
        if ceil_mode and (o - 1) * s >= n + pads[i]:
            o -= 1
        if o <= 0:
            raise GraphError(f"pool window {list(kernel)} does not fit spatial size "
                             f"{list(spatial)} with pads {list(pads)}")
        out.append(o)
        extra.append(max(0, (o - 1) * s + dl * (k - 1) + 1 - (n + pads[i] + pads[i + d])))
    clipped = [clip_taps(n, k, s, dl, pads[i], pads[i + d] + e, o)
               for i, (n, k, s, dl, e, o) in enumerate(zip(spatial, kernel, strides,
                                                           dilations, extra, out))]
    return PoolGeometry(tuple(kernel), strides, dilations, pads, tuple(extra), tuple(out),
                        tuple(k for k, _, _ in clipped),
                        tuple(b for _, b, _ in clipped) + tuple(e for _, _, e in clipped))


def clip_taps(n: int, k: int, s: int, dl: int, pb: int, pe: int,
              out: int) -> tuple[int, int, int]:
    """(taps, pad begin, pad end) of one axis's window (pads pb, pe) cut to the taps
    that read the input of length n for some of the ``out`` positions: out[o] reads
    tap t at o*s + t*dl - pb. The kept taps are a run [first, last] (a tap between two
    that read may read only padding: it stays, reading its fill), and the window over
    them has exactly ``out`` positions with the same starts. A window with nothing to
    cut comes back as it was given."""
    if window_out(n, k, s, dl, pb, pe) != out:
        # (ceil_mode dropped a last window that would start in the end padding: the end
        # pad is what the windows kept reach)
        pe = max(0, (out - 1) * s + dl * (k - 1) + 1 - n - pb)
    # the taps position o reads inside the input: t*dl in [pb - o*s, pb + n - 1 - o*s]
    # (per position, not per tap: a kernel may be far longer than the output)
    o = np.arange(out, dtype=np.int64)
    lo = np.maximum(0, -((o * s - pb) // dl))
    hi = np.minimum(k - 1, (pb + n - 1 - o * s) // dl)
    reads = lo <= hi
    if not reads.any():         # every window wholly in the padding: nothing to cut to
        return k, pb, pe
    first = min(int(lo[reads].min()), pb // dl)          # a begin pad stays >= 0
    last = int(hi[reads].max())
    if first == 0 and last == k - 1:
        return k, pb, pe
    pb2 = pb - first * dl
    taps = last - first + 1
    # a shorter window may fit once more before the input ends: keep taps until the
    # position after the last no longer fits (floor((n + pb2 - dl(taps-1) - 1)/s) < out)
    taps = max(taps, (n + pb2 - 1 - out * s) // dl + 2)
    pe2 = max(0, (out - 1) * s + dl * (taps - 1) + 1 - n - pb2)
    if taps >= k - first:       # (the fit check kept every tap after the first)
        taps, pe2 = k - first, pe
    assert window_out(n, taps, s, dl, pb2, pe2) == out, (n, k, s, dl, pb, pe, out)
    return taps, pb2, pe2


# -- pad ----------------------------------------------------------------------------

PAD_MODES = ("constant", "reflect", "edge")


def pad_attrs(shape, attrs):
    """(pads begin+end for every axis, mode, value), validated against shape."""
    rank = len(shape)
    pads = attr_ints(attrs, "pads")
    if len(pads) != 2 * rank:
        raise GraphError(f"pad attr pads must have {2 * rank} entries (begin and end of "
                         f"each axis of rank {rank}), got {len(pads)}")
    mode = attrs.get("mode", "constant")
    if mode not in PAD_MODES:
        raise GraphError(f"pad mode {mode!r:.40} is not one of {', '.join(PAD_MODES)}")
    value = attrs.get("value", 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GraphError(f"pad attr value must be a number, got {value!r:.40}")
    for a, n in enumerate(shape):
        pb, pe = pads[a], pads[a + rank]
        if n + pb + pe < 0 or -pb > n or -pe > n:
            raise GraphError(f"pads {list(pads)} crop axis {a} of length {n} below nothing")
        if mode != "constant" and (pb > 0 or pe > 0) and n == 0:
            raise GraphError(f"pad mode {mode} has no values to repeat on empty axis {a}")
        if mode == "reflect" and max(pb, pe) > n - 1:
            raise GraphError(f"reflect pads {list(pads)} exceed axis {a} of length {n} "
                             f"(at most {n - 1} per side); use mode edge or pad in steps")
    return pads, mode, value


def _pad_infer(ins, attrs):
    x = ins[0]
    pads, mode, _ = pad_attrs(x.shape, attrs)
    rank = len(x.shape)
    shape = tuple(n + pads[a] + pads[a + rank] for a, n in enumerate(x.shape))
    return [(check_shape(shape, "pad result"), x.dtype)]


def _pad_ref(xs, attrs):
    x = xs[0]
    pads, mode, value = pad_attrs(x.shape, attrs)
    rank = x.ndim
    # np.pad with the positive pads, then the negative ones crop (ONNX's definition:
    # reflection is about the original edges)
    pos = [(max(pads[a], 0), max(pads[a + rank], 0)) for a in range(rank)]
    if mode == "constant":
        with np.errstate(invalid="ignore"):
            fill = np.asarray(value).astype(x.dtype)
        y = np.pad(x, pos, mode="constant", constant_values=fill)
    else:
        y = np.pad(x, pos, mode="reflect" if mode == "reflect" else "edge")
    sl = tuple(slice(-min(pads[a], 0), y.shape[a] + min(pads[a + rank], 0))
               for a in range(rank))
    return [np.array(y[sl], order="C")]


def _pad_index(ctx, node, k, idx: Index) -> str:
    src = node.inputs[0]
    shape = ctx.shape(src)
    pads, mode, value = pad_attrs(shape, node.attr_map)
    rank = len(shape)
    digits = idx.digits()
    src_digits, inside = [], []
    for a, n in enumerate(shape):
        pb, pe = pads[a], pads[a + rank]
        pos = add(digits[a], str(-pb))
        if pb <= 0 and pe <= 0:
            src_digits.append(pos)
            continue
        p = ctx.let(DType.int64, f"(long long){pos}")
        if mode == "constant":
            conds = ([f"{p} >= 0"] if pb > 0 else []) + ([f"{p} < {n}"] if pe > 0 else [])
            inside.append(" && ".join(conds))
            src_digits.append(f"wb_clampi({p}, 0, {n - 1})")
        elif mode == "edge":
            src_digits.append(f"wb_clampi({p}, 0, {n - 1})")
        else:   # reflect about the edges: -1 -> 1, n -> n - 2
            src_digits.append(f"({p} < 0 ? -{p} : ({p} > {n - 1} ? {2 * (n - 1)} - {p} : {p}))")
    return _padded_read(ctx, node, src, src_digits, shape, inside,
                        lambda dt: _c_number(value, dt))


def _pad_reads(shapes, attrs, k, consts):
    # Negative pads crop: the cropped positions are never read. Positive pads read the
    # clamped (constant, edge) or mirrored (reflect) positions, all inside the input.
    x = shapes[0]
    pads, mode, _ = pad_attrs(x, attrs)
    rank = len(x)
    out = []
    for a, n in enumerate(x):
        pb, pe = pads[a], pads[a + rank]
        pos = np.arange(n + pb + pe, dtype=np.int64) - pb
        if mode == "reflect":
            pos = np.where(pos < 0, -pos, np.where(pos > n - 1, 2 * (n - 1) - pos, pos))
        out.append(whole_axis(np.unique(np.clip(pos, 0, max(n - 1, 0))), n))
    return tuple(out)


def _c_number(value, dt: DType) -> str:
    """The pad value as C text in the compute type, rounded to the element type first
    (as the reference stores it)."""
    with np.errstate(invalid="ignore"):
        return c_literal(np.asarray(value).astype(dt.np), dt)


register(OpDef("pad", Kind.layout, (1, 1), _pad_infer, _pad_ref, None,
               "pad every axis by attr pads (begin..., end...; negative crops), mode "
               "constant (attr value), edge or reflect", helpers=(CLAMPI,),
               index=_pad_index, row_role=RowRole.never, reads=_pad_reads))
