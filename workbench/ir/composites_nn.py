"""Composite ops of CNN and audio models, decomposed into primitives the planners fuse:
pooling (a ``window`` and a reduction), group/instance/mean-variance normalization
(reductions and elementwise ops, as LayerNorm), Resize (``gather`` at constant
indices, and a lerp with constant weights), and Einsum (transposes and reshapes around
one batched ``matmul``, reductions for indices summed away).

One decomposition per composite serves both frontends; every primitive is tagged with
the composite's origin, as in :mod:`.composites`.
"""
from __future__ import annotations

import itertools
import math
import string

import numpy as np

from ..errors import GraphError
from ..ops.window import pool_geometry

__all__ = ["max_pool", "avg_pool", "lp_pool", "group_norm", "instance_norm",
           "mean_variance_norm", "resize", "einsum"]


# -- pooling ------------------------------------------------------------------------

def _window(b, x, geo, fill):
    return b.window(x, kernel=list(geo.kernel), strides=list(geo.strides),
                    dilations=list(geo.dilations), pads=list(geo.window_pads), fill=fill)


def _tap_axes(x, d):
    rank = len(x.shape) + d
    return list(range(rank - d, rank))


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
        w = _window(b, x, geo, "lowest")
        taps = _tap_axes(x, d)
        if indices is None:
            return b.reduce_max(w, axes=taps, keepdims=False)
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
        w = _window(b, x, geo, "zero")
        div = geo.divisor(spatial, count_include_pad)
        axes = _tap_axes(x, d)
        if np.all(div == math.prod(kernel)):
            return b.reduce_mean(w, axes=axes, keepdims=False)
        s = b.reduce_sum(w, axes=axes, keepdims=False)
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
        w = _window(b, x, geo, "zero")
        a = b.abs(w)
        powered = a * a if p == 2 else b.pow(a, b.as_tensor(float(p), like=x))
        s = b.reduce_sum(powered, axes=_tap_axes(x, d), keepdims=False)
        return b.sqrt(s) if p == 2 else b.pow(s, b.as_tensor(1.0 / p, like=x))


# -- transposed convolution ------------------------------------------------------------

# a strided transposed convolution as one convolution per output phase (off: its input
# spread with zeros; benchmarks/conv_transpose.py times the two side by side)
PHASES = True


def conv_transpose(b, x, w, bias=None, strides=None, pads=None, dilations=None,
                   output_padding=None, group: int = 1, source: str = ""):
    """ConvTranspose (torch's ``conv_transpose*d``): the gradient of a convolution with
    respect to its input, made of the convolutions every backend already makes (their
    GEMM template, packing, pad folding). ``w`` is [C_in, C_out / group, *kernel];
    ``pads`` is [begin..., end...].

    Strided, undilated, with every kernel axis at least its stride and no negative
    begin pad (the usual upsampling layer): one convolution per output phase
    (``_conv_transpose_phases``), interleaved. Otherwise the input spread ``strides``
    apart with zeros is convolved at stride 1 (``_conv_transpose_spread``), which
    multiplies those zeros too (strides^d times the arithmetic)."""
    d = len(x.shape) - 2
    ones = [1] * d
    strides, dilations = list(strides or ones), list(dilations or ones)
    pads, extra = list(pads or [0] * 2 * d), list(output_padding or [0] * d)
    kernel = w.shape[2:]
    cin = x.shape[1]
    if w.shape[0] != cin or cin % group:
        raise GraphError(f"ConvTranspose: weight {list(w.shape)} for input {list(x.shape)} "
                         f"with group {group} (the weight's first axis is the input's "
                         "channels, divisible by group)")
    with b.composite("ConvTranspose", source):
        if PHASES and any(s > 1 for s in strides) and dilations == ones \
                and min(pads[:d]) >= 0 \
                and all(k >= s for k, s in zip(kernel, strides)):
            return _conv_transpose_phases(b, x, w, bias, strides, pads, extra, group)
        return _conv_transpose_spread(b, x, w, bias, strides, pads, dilations, extra, group)


def _transposed_filters(b, w, taps, group: int):
    """Filters [C_out, C_in / group, *taps' lengths] for a convolution, from a transposed
    convolution's [C_in, C_out / group, *kernel]: along each spatial axis the taps listed
    (in that order), the two channel axes swapped within each group."""
    cin, per_out = w.shape[:2]
    for axis, idx in enumerate(taps, start=2):
        if list(idx) != list(range(w.shape[axis])):
            w = b.gather(w, b.constant(np.asarray(idx, dtype=np.int64)), axis=axis)
    sizes = [len(t) for t in taps]
    w = b.reshape(w, shape=[group, cin // group, per_out] + sizes)
    w = b.transpose(w, perm=[0, 2, 1] + list(range(3, 3 + len(taps))))
    return b.reshape(w, shape=[per_out * group, cin // group] + sizes)


def _conv(b, x, w, bias, group: int, dilations=None):
    d = len(x.shape) - 2
    ins = [x, w] + ([bias] if bias is not None else [])
    return b.op("conv2d" if d == 2 else "conv", *ins, strides=[1] * d,
                dilations=list(dilations or [1] * d), pads=[0] * 2 * d, group=group)


def _conv_transpose_spread(b, x, w, bias, strides, pads, dilations, extra, group):
    """The input spread ``strides`` apart with zeros between, bordered with
    ``dilation * (kernel - 1)`` zeros less ``pads`` (more at the end by
    ``output_padding``), convolved at stride 1 with the filters mirrored."""
    d = len(strides)
    n, cin = x.shape[:2]
    spatial, kernel = x.shape[2:], w.shape[2:]
    if any(s > 1 for s in strides):
        # a unit axis after each spatial one, padded to the stride with zeros, merged
        t = b.reshape(x, shape=[n, cin] + [v for L in spatial for v in (L, 1)])
        gaps = [0] * (2 + 2 * d)
        for i, s in enumerate(strides):
            gaps[3 + 2 * i] = s - 1
        t = b.pad(t, pads=[0] * (2 + 2 * d) + gaps, mode="constant", value=0.0)
        x = b.reshape(t, shape=[n, cin] + [L * s for L, s in zip(spatial, strides)])
    # the border: the zeros after the last element (stride - 1) already there
    reach = [dl * (k - 1) for dl, k in zip(dilations, kernel)]
    begin = [r - p for r, p in zip(reach, pads[:d])]
    end = [r - p + e - (s - 1) for r, p, e, s in zip(reach, pads[d:], extra, strides)]
    if any(begin + end):
        x = b.pad(x, pads=[0, 0] + begin + [0, 0] + end, mode="constant", value=0.0)
    mirrored = [list(range(k - 1, -1, -1)) for k in kernel]
    return _conv(b, x, _transposed_filters(b, w, mirrored, group), bias, group, dilations)


def _conv_transpose_phases(b, x, w, bias, strides, pads, extra, group):
    """One convolution per output phase r (the outputs s j + r, before the begin pad is
    cut): y_r[j] = sum over u of x[j - u] w[r + s u], the taps of w that meet phase r,
    mirrored -- no zeros multiplied. The phases are interleaved (a unit axis each,
    joined, moved beside its spatial axis, merged) and the pads cut. Each phase carries
    the bias: every output is one phase's."""
    d = len(strides)
    n = x.shape[0]
    spatial, kernel = x.shape[2:], w.shape[2:]
    cout = w.shape[1] * group
    size = [(L - 1) * s - pb - pe + k + e for L, s, pb, pe, k, e in
            zip(spatial, strides, pads[:d], pads[d:], kernel, extra)]
    reach = [-(-(pb + o) // s) for pb, o, s in zip(pads[:d], size, strides)]
    phases = []
    for r in itertools.product(*(range(s) for s in strides)):
        taps = [-(-(k - ra) // s) for k, ra, s in zip(kernel, r, strides)]
        idx = [[ra + s * (u - 1 - v) for v in range(u)] for ra, s, u in zip(r, strides, taps)]
        begin = [u - 1 for u in taps]
        end = [j - L for j, L in zip(reach, spatial)]
        xr = b.pad(x, pads=[0, 0] + begin + [0, 0] + end, mode="constant", value=0.0) \
            if any(begin + end) else x
        y = _conv(b, xr, _transposed_filters(b, w, idx, group), bias, group)
        phases.append(b.reshape(y, shape=[n, cout] + reach + [1]))
    y = b.op("concat", *phases, axis=2 + d)
    y = b.reshape(y, shape=[n, cout] + reach + list(strides))
    y = b.transpose(y, perm=[0, 1] + [v for a in range(d) for v in (2 + a, 2 + d + a)])
    y = b.reshape(y, shape=[n, cout] + [j * s for j, s in zip(reach, strides)])
    if any(pb != 0 or j * s != pb + o
           for pb, o, j, s in zip(pads[:d], size, reach, strides)):
        y = b.op("slice", y, starts=list(pads[:d]),
                 ends=[pb + o for pb, o in zip(pads[:d], size)], axes=list(range(2, 2 + d)))
    return y


# -- normalization --------------------------------------------------------------------

def _per_channel(b, t, rank):
    """A [C] tensor shaped [C, 1, ...] to broadcast over [N, C, *spatial]."""
    return b.reshape(t, shape=[t.shape[0]] + [1] * (rank - 2))


def _normalize(b, x, axes, eps):
    mean = b.reduce_mean(x, axes=axes, keepdims=True)
    dev = x - mean
    var = b.reduce_mean(dev * dev, axes=axes, keepdims=True)
    inv = b.rsqrt(var + eps)
    return dev * inv, mean, inv


def instance_norm(b, x, scale=None, bias=None, eps: float = 1e-5, source: str = "",
                  return_stats: bool = False):
    """InstanceNormalization: each (sample, channel) normalized over its spatial axes,
    then a per-channel scale and bias."""
    with b.composite("InstanceNormalization", source):
        rank = len(x.shape)
        y, mean, inv = _normalize(b, x, list(range(2, rank)), eps)
        if scale is not None:
            y = y * _per_channel(b, scale, rank)
        if bias is not None:
            y = y + _per_channel(b, bias, rank)
        return (y, mean, inv) if return_stats else y


def group_norm(b, x, groups: int, scale=None, bias=None, eps: float = 1e-5,
               source: str = "", return_stats: bool = False):
    """GroupNormalization: channels in ``groups`` groups, each (sample, group)
    normalized over its channels and spatial axes; scale and bias per channel ([C],
    opset 21 and torch) or per group ([groups], opset 18).

    Stats (return_stats): mean and 1/std, [N, groups]."""
    with b.composite("GroupNormalization", source):
        rank = len(x.shape)
        n, c = x.shape[:2]
        if groups < 1 or c % groups:
            raise GraphError(f"GroupNormalization: {c} channels do not split into "
                             f"{groups} groups")
        for name, t in (("scale", scale), ("bias", bias)):
            if t is not None and t.shape not in ((c,), (groups,)):
                raise GraphError(f"GroupNormalization {name} has shape {list(t.shape)}; "
                                 f"it needs [{c}] (per channel) or [{groups}] (per group)")
        if groups == c:
            # one channel per group: instance normalization, no reshape
            y, mean, inv = _normalize(b, x, list(range(2, rank)), eps)
        elif groups == 1:
            y, mean, inv = _normalize(b, x, list(range(1, rank)), eps)
        else:
            grouped = b.reshape(x, shape=[n, groups, math.prod(x.shape[1:]) // groups])
            yg, mean, inv = _normalize(b, grouped, [2], eps)
            y = b.reshape(yg, shape=list(x.shape))

        def affine(t):
            if t.shape == (c,):
                return _per_channel(b, t, rank)
            # per group: each group's value repeated over its channels
            rep = b.expand(b.reshape(t, shape=[groups, 1]), shape=[groups, c // groups])
            return b.reshape(rep, shape=[c] + [1] * (rank - 2))
        if scale is not None:
            y = y * affine(scale)
        if bias is not None:
            y = y + affine(bias)
        if not return_stats:
            return y
        return y, b.reshape(mean, shape=[n, groups]), b.reshape(inv, shape=[n, groups])


def mean_variance_norm(b, x, axes=(0, 2, 3), source: str = ""):
    """MeanVarianceNormalization: (x - mean) / (sqrt(var) + 1e-9) over axes."""
    with b.composite("MeanVarianceNormalization", source):
        rank = len(x.shape)
        axes = sorted({int(a) % rank for a in axes})
        mean = b.reduce_mean(x, axes=axes, keepdims=True)
        dev = x - mean
        var = b.reduce_mean(dev * dev, axes=axes, keepdims=True)
        return dev / (b.sqrt(var) + 1e-9)


# -- resize ---------------------------------------------------------------------------

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric",
                    "half_pixel_symmetric")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def source_coordinates(n: int, out: int, scale: float, mode: str) -> np.ndarray:
    """Where each of ``out`` resized positions samples an axis of length ``n`` (float64;
    ``scale`` is out / n, or the scale the model gives)."""
    x = np.arange(out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else np.zeros(out)
    if mode == "align_corners":
        # (the resized length as the scale gives it, unrounded: ONNX's definition)
        span = n * scale - 1
        return x * (n - 1) / span if out > 1 and span > 0 else np.zeros(out)
    if mode == "asymmetric":
        return x / scale
    if mode == "half_pixel_symmetric":
        adj = out / (scale * n)
        offset = n / 2 * (1 - adj)
        return offset + (x + 0.5) / scale - 0.5
    raise GraphError(f"Resize coordinate_transformation_mode {mode!r}; supported: "
                     f"{', '.join(COORDINATE_MODES)}")


def _nearest(src: np.ndarray, mode: str, n: int) -> np.ndarray:
    if mode == "round_prefer_floor":
        i = np.ceil(src - 0.5)
    elif mode == "round_prefer_ceil":
        i = np.floor(src + 0.5)
    elif mode == "floor":
        i = np.floor(src)
    elif mode == "ceil":
        i = np.ceil(src)
    else:
        raise GraphError(f"Resize nearest_mode {mode!r}; supported: {', '.join(NEAREST_MODES)}")
    return np.clip(i, 0, n - 1).astype(np.int64)


def resize(b, x, sizes, scales, mode: str = "nearest", coordinate_mode: str = "half_pixel",
           nearest_mode: str = "round_prefer_floor", clamp_linear: bool = True,
           source: str = "", kind: str = "Resize"):
    """Resize every axis to ``sizes`` (with ``scales`` the factor each source
    coordinate divides by; None: sizes / input sizes). Nearest: one gather per
    resized axis at constant indices; linear: two gathers and a lerp with constant
    weights per axis -- so the whole resize fuses into one elementwise kernel."""
    if mode not in ("nearest", "linear"):
        raise GraphError(f"Resize mode {mode!r}; supported: nearest, linear")
    with b.composite(kind, source):
        y = x
        for axis, (n, out) in enumerate(zip(x.shape, sizes)):
            scale = float(scales[axis]) if scales is not None else out / n
            if out == n and scale == 1.0:
                continue
            src = source_coordinates(n, out, scale, coordinate_mode)
            if mode == "nearest":
                y = b.gather(y, b.constant(_nearest(src, nearest_mode, n)), axis=axis)
                continue
            if clamp_linear:
                src = np.clip(src, 0, n - 1)
            i0 = np.clip(np.floor(src), 0, n - 1).astype(np.int64)
            i1 = np.minimum(i0 + 1, n - 1)
            frac = (src - i0).astype(x.dtype.np)
            shape = [out if a == axis else 1 for a in range(len(x.shape))]
            lo = b.gather(y, b.constant(i0), axis=axis)
            hi = b.gather(y, b.constant(i1), axis=axis)
            y = lo + (hi - lo) * b.constant(frac.reshape(shape))
        return y


# -- einsum ---------------------------------------------------------------------------

def _parse_einsum(equation: str, ranks):
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise GraphError(f"Einsum {equation!r} names {len(terms)} operands, got {len(ranks)}")
    used = set(c for c in eq if c.isalpha())
    spare = [c for c in string.ascii_letters if c not in used]
    widths = [r - (len(t) - 3) for t, r in zip(terms, ranks) if "..." in t]
    ell = "".join(spare[:max(widths)]) if widths and max(widths) > 0 else ""
    out_terms = []
    for t, r in zip(terms, ranks):
        if "..." in t:
            k = r - (len(t) - 3)
            # (right-aligned: a shorter ellipsis broadcasts against the longest)
            t = t.replace("...", ell[len(ell) - k:] if k > 0 else "")
        if len(t) != r or not all(c.isalpha() for c in t):
            raise GraphError(f"Einsum {equation!r}: term {t!r} does not fit an operand of "
                             f"rank {r}")
        out_terms.append(t)
    if arrow:
        out = rhs.replace("...", ell)
    else:   # implicit: the ellipsis, then letters appearing once, in order
        counts = {}
        for t in out_terms:
            for ch in t:
                counts[ch] = counts.get(ch, 0) + 1
        out = ell + "".join(sorted(c for c, k in counts.items() if k == 1
                                   and c not in ell))
    return out_terms, out


def _diagonal(b, t, term):
    """Take the diagonal of every letter repeated within one operand's term."""
    while len(set(term)) < len(term):
        ch = next(c for c in term if term.count(c) > 1)
        i = term.index(ch)
        j = term.index(ch, i + 1)
        n = t.shape[i]
        rest = [a for a in range(len(term)) if a not in (i, j)]
        perm = rest + [i, j]
        t = b.transpose(t, perm=perm) if perm != list(range(len(term))) else t
        lead = [t.shape[a] for a in range(len(rest))]
        flat = b.reshape(t, shape=lead + [n * n])
        # the diagonal of an n x n block: every (n + 1)-th element
        t = b.slice(flat, starts=[0], ends=[n * n], axes=[len(lead)], steps=[n + 1])
        term = "".join(term[a] for a in rest) + ch
    return t, term


def _sum_away(b, t, term, keep):
    axes = [a for a, ch in enumerate(term) if ch not in keep]
    if not axes:
        return t, term
    t = b.reduce_sum(t, axes=axes, keepdims=False)
    return t, "".join(ch for ch in term if ch in keep)


def _arrange(b, t, term, order):
    perm = [term.index(ch) for ch in order]
    return (t if perm == list(range(len(perm))) else b.transpose(t, perm=perm)), order


def _contract(b, a, ta, c, tc, keep):
    """Two operands into one over the letters they share that ``keep`` does not."""
    batch = [ch for ch in ta if ch in tc and ch in keep]
    inner = [ch for ch in ta if ch in tc and ch not in keep]
    left = [ch for ch in ta if ch not in tc]
    right = [ch for ch in tc if ch not in ta]
    size = {ch: d for t, term in ((a, ta), (c, tc)) for ch, d in zip(term, t.shape)}
    for ch in batch + inner:
        da, dc = a.shape[ta.index(ch)], c.shape[tc.index(ch)]
        if da != dc and 1 not in (da, dc):
            raise GraphError(f"Einsum index {ch!r} has sizes {da} and {dc}")
        if da != dc:      # one of them broadcasts: expand it
            tgt = max(da, dc)
            if da == 1:
                a = b.expand(a, shape=[tgt if x == ch else size_a for x, size_a
                                       in zip(ta, a.shape)])
            else:
                c = b.expand(c, shape=[tgt if x == ch else size_c for x, size_c
                                       in zip(tc, c.shape)])
            size[ch] = tgt
    a, ta = _arrange(b, a, ta, "".join(batch + left + inner))
    c, tc = _arrange(b, c, tc, "".join(batch + inner + right))
    bs = [size[ch] for ch in batch]
    m = math.prod(size[ch] for ch in left)
    k = math.prod(size[ch] for ch in inner)
    n = math.prod(size[ch] for ch in right)
    a3 = b.reshape(a, shape=bs + [m, k]) if list(a.shape) != bs + [m, k] else a
    c3 = b.reshape(c, shape=bs + [k, n]) if list(c.shape) != bs + [k, n] else c
    r = b.matmul(a3, c3)
    full = bs + [size[ch] for ch in left] + [size[ch] for ch in right]
    if list(r.shape) != full:
        r = b.reshape(r, shape=full)
    return r, "".join(batch + left + right)


def einsum(b, equation: str, *xs, source: str = ""):
    """Einsum as transposes and reshapes around batched matmuls (operands contracted
    left to right), diagonals as strided slices, and reductions for indices that
    appear in one operand only."""
    with b.composite("Einsum", source):
        terms, out = _parse_einsum(equation, [len(x.shape) for x in xs])
        if len(set(out)) != len(out) or any(ch not in "".join(terms) for ch in out):
            raise GraphError(f"Einsum {equation!r}: output {out!r} repeats or invents an "
                             "index")
        ops = []
        for x, t in zip(xs, terms):
            x, t = _diagonal(b, x, t)
            ops.append((x, t))
        for i, (x, t) in enumerate(ops):    # indices no one else needs: sum them now
            later = out + "".join(tt for j, (_, tt) in enumerate(ops) if j != i)
            ops[i] = _sum_away(b, x, t, later)
        acc, ta = ops[0]
        for i in range(1, len(ops)):
            c, tc = ops[i]
            keep = out + "".join(tt for _, tt in ops[i + 1:])
            if not acc.dtype.is_float:
                raise GraphError("Einsum of integer operands is not supported (matmul is "
                                 "float only); cast them to float")
            acc, ta = _contract(b, acc, ta, c, tc, keep)
        acc, ta = _sum_away(b, acc, ta, out)
        acc, ta = _arrange(b, acc, ta, out)
        return acc
