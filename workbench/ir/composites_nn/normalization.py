"""Normalizations of CNN and audio models as composites: instance, group and
mean-variance normalization, reductions and elementwise ops as LayerNorm is."""
from __future__ import annotations

import math

from ...errors import GraphError


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
