"""ONNX handlers of the ops CNN and audio models use: Conv and ConvTranspose (1-3
spatial axes, groups, dilations, auto_pad), MaxPool / AveragePool / LpPool,
GroupNormalization (opset 18's per-group and 21's per-channel scale), InstanceNormalization,
MeanVarianceNormalization, Resize (nearest and linear), Pad, Einsum, Mod and Round.

Importing this module registers them with :func:`~.common._handles`.
"""
from __future__ import annotations

import math


from ...errors import GraphError
from ...ir import composites_nn
from ...ir.composites_nn import COORDINATE_MODES, NEAREST_MODES
from .common import _Ctx, _handles, _Unsupported


def _spatial(c: _Ctx, x, kernel_key: str | None = None, kernel=None):
    """(kernel, strides, dilations, pads) of a Conv or pool node, auto_pad resolved."""
    d = len(x.shape) - 2
    if d < 1:
        raise GraphError(f"{c.node.op_type} {c.display!r}: input {list(x.shape)} has no "
                         "spatial axes (it needs [N, C, *spatial])")
    if kernel is None:
        kernel = c.attr(kernel_key)
        if kernel is None:
            raise GraphError(f"{c.node.op_type} {c.display!r}: no kernel_shape attribute "
                             "-- the model is malformed")
    kernel = tuple(int(k) for k in kernel)
    strides = tuple(int(s) for s in (c.attr("strides") or (1,) * d))
    dil = tuple(int(s) for s in (c.attr("dilations") or (1,) * d))
    if not len(kernel) == len(strides) == len(dil) == d:
        raise GraphError(f"{c.node.op_type} {c.display!r}: kernel_shape {list(kernel)}, "
                         f"strides {list(strides)} and dilations {list(dil)} need {d} "
                         f"entries for input {list(x.shape)} -- the model is malformed")
    pads = conv_pads(c.attr("auto_pad", "NOTSET"), c.attr("pads") or (0,) * (2 * d),
                     x.shape[2:], kernel, strides, dil)
    if len(pads) != 2 * d:
        raise GraphError(f"{c.node.op_type} {c.display!r}: pads {list(pads)} need {2 * d} "
                         "entries -- the model is malformed")
    return kernel, strides, dil, pads


def conv_pads(auto_pad, pads, size, k, strides, dil) -> tuple[int, ...]:
    """ONNX pads [begin..., end...], resolving auto_pad SAME_UPPER/SAME_LOWER and VALID."""
    if auto_pad in ("NOTSET", ""):
        return tuple(int(p) for p in pads)
    if auto_pad == "VALID":
        return (0,) * (2 * len(size))
    begin, end = [], []
    for n, kk, s, d in zip(size, k, strides, dil):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (kk - 1) * d + 1 - n)
        lo = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begin.append(lo)
        end.append(total - lo)
    return tuple(begin + end)


def _conv_operands(c: _Ctx):
    """A Conv or ConvTranspose node's input, weight and kernel (the weight's spatial
    axes, which a kernel_shape attribute must repeat)."""
    x, w = c.x(0), c.x(1)
    kind = "convolution" if c.node.op_type == "Conv" else c.node.op_type
    if len(x.shape) not in (3, 4, 5):
        raise _Unsupported(f"{len(x.shape) - 2}-D {kind} (1-D, 2-D and 3-D are supported)")
    k = w.shape[2:]
    if c.attr("kernel_shape") is not None and tuple(c.attr("kernel_shape")) != k:
        raise GraphError(f"{c.node.op_type} {c.display!r}: kernel_shape "
                         f"{c.attr('kernel_shape')} differs from the weight's {list(k)}")
    return x, w, k


@_handles("Conv")
def _conv(c: _Ctx):
    x, w, k = _conv_operands(c)
    _, strides, dil, pads = _spatial(c, x, kernel=k)
    ins = [x, w] + ([c.x(2)] if c.has(2) else [])
    op = "conv2d" if len(x.shape) == 4 else "conv"
    return [c.b.op(op, *ins, strides=list(strides), dilations=list(dil), pads=list(pads),
                   group=int(c.attr("group", 1)))]


@_handles("ConvTranspose")
def _conv_transpose(c: _Ctx):
    x, w, k = _conv_operands(c)
    d = len(x.shape) - 2
    strides = [int(s) for s in (c.attr("strides") or [1] * d)]
    dil = [int(s) for s in (c.attr("dilations") or [1] * d)]
    extra = [int(s) for s in (c.attr("output_padding") or [0] * d)]
    if not len(strides) == len(dil) == len(extra) == d:
        raise GraphError(f"ConvTranspose {c.display!r}: strides {strides}, dilations {dil} "
                         f"and output_padding {extra} need {d} entries for input "
                         f"{list(x.shape)} -- the model is malformed")
    pads = transposed_pads(c.attr("auto_pad", "NOTSET"), c.attr("pads") or [0] * 2 * d,
                           c.attr("output_shape"), x.shape[2:], k, strides, dil, extra)
    return [composites_nn.conv_transpose(c.b, x, w, c.x(2) if c.has(2) else None, strides,
                                         pads, dil, extra, int(c.attr("group", 1)),
                                         source=c.display)]


def transposed_pads(auto_pad, pads, output_shape, size, k, strides, dil, extra) -> list[int]:
    """ConvTranspose's pads [begin..., end...]: given, or what ``output_shape`` or
    auto_pad SAME_* (output = input * stride) leaves to cut (the ONNX operator's
    definition: the odd one at the end under SAME_UPPER, at the beginning otherwise)."""
    if output_shape is None and auto_pad in ("NOTSET", "", "VALID"):
        return [int(p) for p in pads] if auto_pad in ("NOTSET", "") else [0] * 2 * len(size)
    want = list(output_shape)[-len(size):] if output_shape is not None else \
        [n * s for n, s in zip(size, strides)]
    begin, end = [], []
    for n, kk, s, dl, e, o in zip(size, k, strides, dil, extra, want):
        total = s * (n - 1) + e + (kk - 1) * dl + 1 - int(o)
        if output_shape is None:    # SAME_*: never wider than the unpadded output, as
            total = max(total, 0)   # ONNX's shape inference and onnxruntime have it
        lo = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begin.append(lo)
        end.append(total - lo)
    return begin + end


@_handles("MaxPool")
def _max_pool(c: _Ctx):
    x = c.x(0)
    want_indices = len(c.node.output) > 1 and bool(c.node.output[1])
    if want_indices and int(c.attr("storage_order", 0)):
        raise _Unsupported("storage_order=1 with the Indices output (column-major "
                           "indices)")
    kernel, strides, dil, pads = _spatial(c, x, "kernel_shape")
    r = composites_nn.max_pool(c.b, x, kernel, strides, dil, pads,
                               bool(c.attr("ceil_mode", 0)), source=c.display,
                               indices="global" if want_indices else None)
    return list(r) if want_indices else [r]


@_handles("AveragePool")
def _avg_pool(c: _Ctx):
    x = c.x(0)
    kernel, strides, dil, pads = _spatial(c, x, "kernel_shape")
    return [composites_nn.avg_pool(c.b, x, kernel, strides, dil, pads,
                                   bool(c.attr("ceil_mode", 0)),
                                   bool(c.attr("count_include_pad", 0)), source=c.display)]


@_handles("LpPool")
def _lp_pool(c: _Ctx):
    x = c.x(0)
    kernel, strides, dil, pads = _spatial(c, x, "kernel_shape")
    p = int(c.attr("p", 2))
    if p < 1:
        raise GraphError(f"LpPool {c.display!r}: p={p} must be >= 1")
    return [composites_nn.lp_pool(c.b, x, kernel, p, strides, dil, pads,
                                  bool(c.attr("ceil_mode", 0)), source=c.display)]


@_handles("GlobalLpPool")
def _global_lp_pool(c: _Ctx):
    x = c.x(0)
    p = int(c.attr("p", 2))
    return [composites_nn.lp_pool(c.b, x, x.shape[2:], p, source=c.display)]


# -- normalization ------------------------------------------------------------------

@_handles("InstanceNormalization")
def _instance_norm(c: _Ctx):
    return [composites_nn.instance_norm(c.b, c.x(0), c.x(1), c.x(2),
                                        float(c.attr("epsilon", 1e-5)), c.display)]


@_handles("GroupNormalization")
def _group_norm(c: _Ctx):
    x = c.x(0)
    if int(c.attr("stash_type", 1)) != 1:
        raise _Unsupported("stash_type other than 1 (float32)")
    groups = c.attr("num_groups")
    if groups is None:
        raise GraphError(f"GroupNormalization {c.display!r}: no num_groups attribute -- "
                         "the model is malformed")
    eps = float(c.attr("epsilon", 1e-5))
    if x.dtype.is_half:    # stash_type 1: statistics in float32
        y = composites_nn.group_norm(c.b, c.b.cast(x, to="float32"), int(groups), None,
                                     None, eps, c.display)
        y = c.b.cast(y, to=x.dtype)
        with c.b.composite("GroupNormalization", c.display):
            return [_group_affine(c, y, int(groups))]
    return [composites_nn.group_norm(c.b, x, int(groups), c.x(1), c.x(2), eps, c.display)]


def _group_affine(c: _Ctx, y, groups):
    # (a half-precision GroupNormalization: scale and bias in the input type, after the cast)
    b, rank, ch = c.b, len(y.shape), y.shape[1]
    out = y
    for i, op in ((1, "mul"), (2, "add")):
        t = c.x(i)
        if t.shape != (ch,):
            t = b.reshape(b.expand(b.reshape(t, shape=[groups, 1]),
                                   shape=[groups, ch // groups]), shape=[ch])
        out = b.op(op, out, b.reshape(t, shape=[ch] + [1] * (rank - 2)))
    return out


@_handles("MeanVarianceNormalization")
def _mvn(c: _Ctx):
    x = c.x(0)
    axes = c.attr("axes")
    axes = [0, 2, 3] if axes is None else [int(a) for a in axes]
    rank = len(x.shape)
    if any(not -rank <= a < rank for a in axes):
        raise GraphError(f"MeanVarianceNormalization {c.display!r}: axes {axes} out of "
                         f"range for rank {rank} -- the model is malformed")
    return [composites_nn.mean_variance_norm(c.b, x, axes, c.display)]


# -- elementwise ----------------------------------------------------------------------

@_handles("Mod")
def _mod(c: _Ctx):
    a, b = c.x(0), c.x(1)
    # (ONNX asks fmod=1 of floats; its own tests take fmod=0 as Python's %, as here)
    fmod = int(c.attr("fmod", 0))
    return [c.b.op("mod", a, b, fmod=bool(fmod))]


@_handles("Round")
def _round(c: _Ctx):
    return [c.b.op("round", c.x(0))]


@_handles("Einsum")
def _einsum(c: _Ctx):
    eq = c.attr("equation")
    if not eq:
        raise GraphError(f"Einsum {c.display!r}: no equation -- the model is malformed")
    return [composites_nn.einsum(c.b, eq, *c.xs(), source=c.display)]


# -- layout ---------------------------------------------------------------------------

@_handles("Pad")
def _pad(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    pads = c.ints(1, "pads") if c.has(1) else c.attr("pads")
    if pads is None:
        raise GraphError(f"Pad {c.display!r}: no pads -- the model is malformed")
    pads = [int(p) for p in pads]
    axes = c.ints(3, "axes") if c.has(3) else None
    if axes is not None:   # opset 18: pads for the listed axes only
        full = [0] * (2 * rank)
        k = len(axes)
        if len(pads) != 2 * k:
            raise GraphError(f"Pad {c.display!r}: {len(pads)} pads for {k} axes -- the "
                             "model is malformed")
        for i, a in enumerate(axes):
            a = int(a) % rank
            full[a], full[a + rank] = pads[i], pads[i + k]
        pads = full
    if len(pads) != 2 * rank:
        raise GraphError(f"Pad {c.display!r}: {len(pads)} pads for rank {rank} -- the model "
                         "is malformed")
    mode = c.attr("mode", "constant")
    if mode == "wrap":
        raise _Unsupported("mode wrap (constant, reflect and edge are supported)")
    value = 0.0
    if c.has(2):
        v = c.const(2, "constant_value").reshape(-1)
        value = v[0].item() if v.size else 0.0
    if not any(pads):
        return [x]
    return [c.b.pad(x, pads=pads, mode=mode, value=float(value) if x.dtype.is_float
                    else int(value))]


@_handles("Resize")
def _resize(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    mode = c.attr("mode", "nearest")
    if mode not in ("nearest", "linear"):
        raise _Unsupported(f"mode {mode} (nearest and linear are supported)")
    coord = c.attr("coordinate_transformation_mode", "half_pixel")
    if coord not in COORDINATE_MODES:
        raise _Unsupported(f"coordinate_transformation_mode {coord} (supported: "
                           f"{', '.join(COORDINATE_MODES)})")
    nearest = c.attr("nearest_mode", "round_prefer_floor")
    if nearest not in NEAREST_MODES:
        raise GraphError(f"Resize {c.display!r}: nearest_mode {nearest!r} -- the model is "
                         "malformed")
    if int(c.attr("antialias", 0)) and mode == "linear":
        raise _Unsupported("antialias=1")
    axes = c.attr("axes")
    axes = list(range(rank)) if axes is None else [int(a) % rank for a in axes]
    scales = c.const(2, "scales").reshape(-1) if c.has(2) else None
    sizes = c.const(3, "sizes").reshape(-1) if c.has(3) else None
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and sizes.size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        raise GraphError(f"Resize {c.display!r}: give exactly one of scales and sizes -- "
                         "the model is malformed")
    full_scales = [1.0] * rank
    out = list(x.shape)
    if scales is not None:
        if len(scales) != len(axes):
            raise GraphError(f"Resize {c.display!r}: {len(scales)} scales for {len(axes)} "
                             "axes -- the model is malformed")
        for a, s in zip(axes, scales):
            full_scales[a] = float(s)
            out[a] = int(math.floor(x.shape[a] * float(s)))
    else:
        if len(sizes) != len(axes):
            raise GraphError(f"Resize {c.display!r}: {len(sizes)} sizes for {len(axes)} "
                             "axes -- the model is malformed")
        policy = c.attr("keep_aspect_ratio_policy", "stretch")
        want = [int(s) for s in sizes]
        if policy == "stretch":
            for a, s in zip(axes, want):
                out[a] = s
                full_scales[a] = s / x.shape[a]
        elif policy in ("not_larger", "not_smaller"):
            ratios = [s / x.shape[a] for a, s in zip(axes, want)]
            r = min(ratios) if policy == "not_larger" else max(ratios)
            for a in axes:
                out[a] = int(math.floor(x.shape[a] * r + 0.5))
                full_scales[a] = r
        else:
            raise GraphError(f"Resize {c.display!r}: keep_aspect_ratio_policy {policy!r} -- "
                             "the model is malformed")
    if any(o <= 0 for o in out):
        raise GraphError(f"Resize {c.display!r}: output {out} has an empty axis")
    return [composites_nn.resize(c.b, x, out, full_scales, mode, coord, nearest,
                                 source=c.display)]
