"""Transposed convolution (ConvTranspose, torch's ``conv_transpose*d``) as a composite
of the convolutions every backend already makes: one convolution per output phase, or
the input spread with zeros and convolved at stride 1."""
from __future__ import annotations

import itertools

import numpy as np

from ...errors import GraphError


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
