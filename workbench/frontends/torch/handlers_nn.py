"""ATen handlers of the ops CNN and audio models use: ``convolution`` (1-3-D, groups,
dilation, transposed), ``max_pool{1,2,3}d(_with_indices)``, ``avg_pool{1,2,3}d``,
``_adaptive_avg_pool{1,2,3}d``, ``native_group_norm``, ``_native_batch_norm_legit``
(instance norm: batch statistics), ``upsample_nearest{1,2,3}d`` /
``upsample_bilinear2d`` / ``upsample_linear1d``, ``constant_pad_nd``, ``fmod``,
``remainder`` and ``round``.

The decompositions are those of :mod:`workbench.ir.composites_nn`, shared with the ONNX
frontend. Importing this module registers the handlers.
"""
from __future__ import annotations


import numpy as np

from ...ir import composites_nn
from .common import _Ctx, _handles, _Unsupported


def _expand_list(v, d: int, what: str) -> list[int]:
    """An int or list argument as d ints (torch repeats a single value)."""
    v = [int(x) for x in (v if isinstance(v, (list, tuple)) else [v])]
    if len(v) == 1:
        v = v * d
    if len(v) != d:
        raise _Unsupported(f"{what} {v} for {d} spatial axes")
    return v


@_handles("convolution")
def _convolution(c: _Ctx):
    x, w = c.x("input"), c.x("weight")
    d = len(x.shape) - 2
    if d not in (1, 2, 3):
        raise _Unsupported(f"{d}-D convolution (1-D, 2-D and 3-D are supported)")
    pad = _expand_list(c.v("padding"), d, "padding")
    attrs = {"strides": _expand_list(c.v("stride"), d, "stride"), "pads": pad + pad,
             "dilations": _expand_list(c.v("dilation"), d, "dilation"),
             "group": int(c.v("groups"))}
    bias = c.x("bias") if c.is_tensor("bias") else None
    if c.v("transposed"):
        return composites_nn.conv_transpose(
            c.b, x, w, bias, output_padding=_expand_list(c.v("output_padding") or 0, d,
                                                         "output_padding"), **attrs)
    if any(int(p) for p in c.v("output_padding") or []):
        raise _Unsupported("output_padding without transposed")
    ins = [x, w] + ([bias] if bias is not None else [])
    return c.b.op("conv2d" if d == 2 else "conv", *ins, **attrs)


def _pool_args(c: _Ctx, d: int):
    kernel = _expand_list(c.v("kernel_size"), d, "kernel_size")
    stride = c.v("stride")
    strides = kernel if not stride else _expand_list(stride, d, "stride")
    pad = _expand_list(c.v("padding", 0), d, "padding")
    return kernel, strides, pad + pad


def _pool_rank(c: _Ctx) -> int:
    name = c.node.target._overloadpacket.__name__
    return int(next(ch for ch in name if ch.isdigit()))


@_handles("max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices",
          "max_pool2d_with_indices", "max_pool3d_with_indices")
def _max_pool(c: _Ctx):
    x = c.x()
    d = _pool_rank(c)
    kernel, strides, pads = _pool_args(c, d)
    dil = _expand_list(c.v("dilation", 1), d, "dilation")
    with_indices = c.node.target._overloadpacket.__name__.endswith("with_indices")
    used = with_indices and any(getattr(u.target, "__name__", "") == "getitem"
                                and u.args[1] == 1 for u in c.node.users)
    y = composites_nn.max_pool(c.b, x, kernel, strides, dil, pads, bool(c.v("ceil_mode")),
                               kind="MaxPool", indices="plane" if used else None)
    if not with_indices:
        return y
    if used:
        return list(y)
    # the indices nobody reads: a placeholder of the recorded shape
    return [y, np.zeros(tuple(int(s) for s in c.out[1].shape), np.int64)]


@_handles("avg_pool1d", "avg_pool2d", "avg_pool3d")
def _avg_pool(c: _Ctx):
    x = c.x()
    d = _pool_rank(c)
    kernel, strides, pads = _pool_args(c, d)
    if c.v("divisor_override") is not None:
        raise _Unsupported("divisor_override")
    return composites_nn.avg_pool(c.b, x, kernel, strides, None, pads,
                                  bool(c.v("ceil_mode")),
                                  bool(c.v("count_include_pad", True)), kind="AveragePool")


@_handles("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d",
          "adaptive_avg_pool2d", "adaptive_avg_pool3d")
def _adaptive_avg_pool(c: _Ctx):
    x = c.x()
    d = _pool_rank(c)
    out = _expand_list(c.v("output_size"), d, "output_size")
    if any(o <= 0 for o in out):
        raise _Unsupported(f"output_size {out} (each must be positive)")
    return composites_nn.adaptive_avg_pool(c.b, x, out)


# -- normalization ------------------------------------------------------------------

@_handles("native_group_norm")
def _group_norm(c: _Ctx):
    x = c.x("input")
    y, mean, inv = composites_nn.group_norm(c.b, x, int(c.v("group")), c.opt("weight"),
                                            c.opt("bias"), float(c.v("eps")),
                                            return_stats=True)
    return [y, mean, inv]


@_handles("_native_batch_norm_legit", "_native_batch_norm_legit_functional")
def _batch_norm_batch_stats(c: _Ctx):
    # instance_norm exports as a training-mode batch norm over [1, N*C, *spatial]:
    # statistics of the batch itself, per channel over every other axis
    x = c.x("input")
    if not c.v("training", True):
        raise _Unsupported("training=False with running statistics (use eval() export)")
    rank = len(x.shape)
    axes = [0] + list(range(2, rank))
    b = c.b
    with b.composite("InstanceNormalization"):
        mean = b.reduce_mean(x, axes=axes, keepdims=True)
        dev = x - mean
        var = b.reduce_mean(dev * dev, axes=axes, keepdims=True)
        inv = b.rsqrt(var + float(c.v("eps")))
        y = dev * inv
        ch = x.shape[1]
        shape = [ch] + [1] * (rank - 2)
        if c.is_tensor("weight"):
            y = y * b.reshape(c.x("weight"), shape=shape)
        if c.is_tensor("bias"):
            y = y + b.reshape(c.x("bias"), shape=shape)
        outs = [y, b.reshape(mean, shape=[ch]), b.reshape(inv, shape=[ch])]
    # (the functional variant also returns the running stats, unchanged in eval)
    for key in ("running_mean", "running_var"):
        if len(c.out) > len(outs) and c.is_tensor(key):
            outs.append(c.x(key))
    return outs


# -- resampling and padding ---------------------------------------------------------------

def _resize_sizes(c: _Ctx, x, d: int):
    """(output sizes of every axis, the scale each spatial source coordinate uses)."""
    spatial = x.shape[len(x.shape) - d:]
    out = list(c.out_shape)
    factors = c.v("scale_factors") or c.v("scales")
    if isinstance(factors, (int, float)):
        factors = [factors] * d
    scales = [1.0] * (len(x.shape) - d)
    for i, n in enumerate(spatial):
        f = factors[i] if factors and i < len(factors) and factors[i] else None
        # torch divides by the given factor when there is one, else uses in/out
        scales.append(float(f) if f else out[len(x.shape) - d + i] / n)
    return out, scales


@_handles("upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d")
def _upsample_nearest(c: _Ctx):
    x = c.x("input")
    d = len(x.shape) - 2
    out, scales = _resize_sizes(c, x, d)
    # torch: src = floor(dst * in / out) (or / factor), clamped
    return composites_nn.resize(c.b, x, out, scales, "nearest", "asymmetric", "floor",
                                kind="Upsample")


@_handles("upsample_bilinear2d", "upsample_linear1d", "upsample_trilinear3d")
def _upsample_linear(c: _Ctx):
    x = c.x("input")
    d = len(x.shape) - 2
    out, scales = _resize_sizes(c, x, d)
    if c.v("align_corners"):
        # (torch's align_corners ignores the factor: (n - 1) / (out - 1))
        n_sp = x.shape[2:]
        scales = scales[:2] + [o / n for o, n in zip(out[2:], n_sp)]
        return composites_nn.resize(c.b, x, out, scales, "linear", "align_corners",
                                    kind="Upsample")
    return composites_nn.resize(c.b, x, out, scales, "linear", "half_pixel",
                                kind="Upsample")


@_handles("constant_pad_nd")
def _constant_pad(c: _Ctx):
    x = c.x()
    rank = len(x.shape)
    pad = [int(p) for p in c.v("pad")]
    if len(pad) % 2 or len(pad) // 2 > rank:
        raise _Unsupported(f"pad {pad} for rank {rank}")
    begin, end = [0] * rank, [0] * rank
    # torch lists (begin, end) pairs from the last axis backwards
    for k in range(len(pad) // 2):
        begin[rank - 1 - k], end[rank - 1 - k] = pad[2 * k], pad[2 * k + 1]
    if not any(begin + end):
        return x
    value = c.v("value", 0)
    return c.b.pad(x, pads=begin + end, mode="constant",
                   value=float(value) if x.dtype.is_float else int(value))


# -- elementwise --------------------------------------------------------------------------

@_handles("fmod", "remainder")
def _mod(c: _Ctx):
    dt = c.out_dtype
    a, b = c.operand("self", dt), c.operand("other", dt)
    return c.b.op("mod", a, b, fmod=c.node.target._overloadpacket.__name__ == "fmod")


@_handles("round")
def _round(c: _Ctx):
    if c.v("decimals", 0):
        raise _Unsupported("decimals other than 0")
    x = c.x()
    return x if x.dtype.kind == "i" else c.b.op("round", x)
