"""Composite ops, decomposed into primitives.

One decomposition per composite serves both the builder (``b.layer_norm(...)``) and
the ONNX importer. Every primitive made here is tagged with the composite's
:class:`Origin`, so the graph view can collapse it back into one box.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GraphError

__all__ = ["layer_norm", "rms_norm", "softmax", "log_softmax", "reduce_log_sum_exp", "gelu",
           "batch_norm", "gemm", "adam_update"]


def _axes_from(x, axis):
    rank = len(x.shape)
    axis = axis % rank
    return list(range(axis, rank))


def layer_norm(b, x, scale=None, bias=None, axis: int = -1, eps: float = 1e-5,
               source: str = ""):
    """LayerNormalization over axes [axis, rank): (x - mean) / sqrt(var + eps) * scale + bias."""
    with b.composite("LayerNormalization", source):
        axes = _axes_from(x, axis)
        mean = b.reduce_mean(x, axes=axes, keepdims=True)
        d = x - mean
        var = b.reduce_mean(d * d, axes=axes, keepdims=True)
        y = d * b.rsqrt(var + eps)
        if scale is not None:
            y = y * scale
        if bias is not None:
            y = y + bias
        return y


def rms_norm(b, x, scale=None, axis: int = -1, eps: float = 1e-6, source: str = ""):
    """RMSNormalization: x / sqrt(mean(x^2) + eps) * scale."""
    with b.composite("RMSNormalization", source):
        axes = _axes_from(x, axis)
        ms = b.reduce_mean(x * x, axes=axes, keepdims=True)
        y = x * b.rsqrt(ms + eps)
        return y * scale if scale is not None else y


def softmax(b, x, axis: int = -1, source: str = ""):
    """Softmax along one axis, max-subtracted for stability."""
    with b.composite("Softmax", source):
        m = b.reduce_max(x, axes=[axis], keepdims=True)
        e = b.exp(x - m)
        return e / b.reduce_sum(e, axes=[axis], keepdims=True)


def log_softmax(b, x, axis: int = -1, source: str = ""):
    """LogSoftmax: (x - max) - log(sum(exp(x - max)))."""
    with b.composite("LogSoftmax", source):
        m = b.reduce_max(x, axes=[axis], keepdims=True)
        d = x - m
        return d - b.log(b.reduce_sum(b.exp(d), axes=[axis], keepdims=True))


def reduce_log_sum_exp(b, x, axes=None, keepdims: bool = True, source: str = ""):
    """log(sum(exp(x))) over axes, computed as max + log(sum(exp(x - max)))."""
    with b.composite("ReduceLogSumExp", source):
        axes = list(range(len(x.shape))) if axes is None else list(axes)
        m = b.reduce_max(x, axes=axes, keepdims=True)
        s = b.reduce_sum(b.exp(x - m), axes=axes, keepdims=True)
        r = b.log(s) + m
        if not keepdims:
            rank = len(x.shape)
            r = b.squeeze(r, axes=[a % rank for a in axes])
        return r


def gelu(b, x, approximate: str = "none", source: str = ""):
    """GELU: erf form 0.5 x (1 + erf(x / sqrt 2)) or the tanh approximation."""
    with b.composite("Gelu", source):
        if approximate == "tanh":
            inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
            return x * 0.5 * (b.tanh(inner) + 1.0)
        if approximate != "none":
            raise GraphError(f"Gelu approximate={approximate!r}; use 'none' or 'tanh'")
        return x * 0.5 * (b.erf(x * (1.0 / math.sqrt(2.0))) + 1.0)


def batch_norm(b, x, scale, bias, mean, var, eps: float = 1e-5, source: str = ""):
    """Inference BatchNormalization over channel axis 1."""
    with b.composite("BatchNormalization", source):
        shape = [-1 if i == 1 else 1 for i in range(len(x.shape))]
        def per_channel(t):
            c = t.shape[0]
            return b.reshape(t, shape=[c if d == -1 else 1 for d in shape])
        inv = b.rsqrt(per_channel(var) + eps) * per_channel(scale)
        return (x - per_channel(mean)) * inv + per_channel(bias)


def gemm(b, a, w, c=None, alpha: float = 1.0, beta: float = 1.0, trans_a: int = 0,
         trans_b: int = 0, source: str = ""):
    """Gemm: alpha * op(A) @ op(B) + beta * C."""
    with b.composite("Gemm", source):
        if trans_a:
            a = b.transpose(a, perm=[1, 0])
        if trans_b:
            w = b.transpose(w, perm=[1, 0])
        y = b.matmul(a, w)
        if alpha != 1.0:
            y = y * alpha
        if c is not None:
            y = y + (c * beta if beta != 1.0 else c)
        return y


def adam_update(b, p, g, m, v, lr=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, step: int = 1,
                source: str = ""):
    """One Adam step with bias correction; returns (new_p, new_m, new_v)."""
    with b.composite("Adam", source):
        m2 = m * beta1 + g * (1.0 - beta1)
        v2 = v * beta2 + g * g * (1.0 - beta2)
        mhat = m2 * (1.0 / (1.0 - beta1 ** step))
        vhat = v2 * (1.0 / (1.0 - beta2 ** step))
        p2 = p - mhat * lr / (b.sqrt(vhat) + eps)
        return p2, m2, v2


def random_array(shape, dtype, seed: int = 0, low: float = -1.0, high: float = 1.0):
    """Deterministic random data for authored constants (used by the JSON format)."""
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return rng.uniform(low, high, size=shape).astype(dt)
    if dt.kind == "b":
        return rng.random(size=shape) < 0.5
    return rng.integers(int(low), int(high) + 1, size=shape).astype(dt)
