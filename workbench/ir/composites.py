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
           "batch_norm", "gemm", "adam_update", "hard_sigmoid", "hard_swish", "leaky_relu",
           "prelu", "elu", "selu", "celu", "softplus", "softsign", "mish", "sign", "clip",
           "thresholded_relu", "reduce_sum_square", "reduce_l1", "reduce_l2", "reduce_log_sum",
           "tile", "log1p", "expm1"]


def _axes_from(x, axis):
    rank = len(x.shape)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)) \
            or not -rank <= axis < rank:
        raise GraphError(f"axis {axis!r:.40} is out of range for rank {rank} "
                         f"(valid: {-rank} to {rank - 1})")
    return list(range(int(axis) % rank, rank))


def _widened(b, x, *params):
    """float16 and bfloat16 are computed in float32 here and rounded once at the end,
    as torch computes them (its ``opmath`` type) and ONNX's stash_type=1 asks: the
    statistics of a row summed in half precision, or GELU's 1/sqrt(2) held in
    bfloat16 (0.70703125), would be the graph's meaning otherwise, and no fused kernel
    would compute it. Returns (x, params, narrow): the values in float32 (unchanged
    when x is not half) and what turns a result back into x's type."""
    if not x.dtype.is_half:
        return x, params, lambda y: y
    half = x.dtype
    wide = [None if p is None else b.cast(p, to="float32") if p.dtype is half else p
            for p in params]
    return b.cast(x, to="float32"), tuple(wide), lambda y: b.cast(y, to=half)


def layer_norm(b, x, scale=None, bias=None, axis: int = -1, eps: float = 1e-5,
               source: str = "", return_stats: bool = False):
    """LayerNormalization over axes [axis, rank): (x - mean) / sqrt(var + eps) * scale + bias.

    With ``return_stats`` returns ``(y, mean, inv_std)`` (ONNX's optional outputs),
    both kept to rank of x with size 1 on the normalized axes (float32 for a half x).
    """
    with b.composite("LayerNormalization", source):
        x, (scale, bias), narrow = _widened(b, x, scale, bias)
        axes = _axes_from(x, axis)
        mean = b.reduce_mean(x, axes=axes, keepdims=True)
        d = x - mean
        var = b.reduce_mean(d * d, axes=axes, keepdims=True)
        inv = b.rsqrt(var + eps)
        y = d * inv
        if scale is not None:
            y = y * scale
        if bias is not None:
            y = y + bias
        return (narrow(y), mean, inv) if return_stats else narrow(y)


def rms_norm(b, x, scale=None, axis: int = -1, eps: float = 1e-6, source: str = ""):
    """RMSNormalization: x / sqrt(mean(x^2) + eps) * scale."""
    with b.composite("RMSNormalization", source):
        x, (scale,), narrow = _widened(b, x, scale)
        axes = _axes_from(x, axis)
        ms = b.reduce_mean(x * x, axes=axes, keepdims=True)
        y = x * b.rsqrt(ms + eps)
        return narrow(y * scale if scale is not None else y)


def softmax(b, x, axis: int = -1, source: str = ""):
    """Softmax along one axis, max-subtracted for stability."""
    with b.composite("Softmax", source):
        x, _, narrow = _widened(b, x)
        m = b.reduce_max(x, axes=[axis], keepdims=True)
        e = b.exp(x - m)
        return narrow(e / b.reduce_sum(e, axes=[axis], keepdims=True))


def log_softmax(b, x, axis: int = -1, source: str = ""):
    """LogSoftmax: (x - max) - log(sum(exp(x - max)))."""
    with b.composite("LogSoftmax", source):
        x, _, narrow = _widened(b, x)
        m = b.reduce_max(x, axes=[axis], keepdims=True)
        d = x - m
        return narrow(d - b.log(b.reduce_sum(b.exp(d), axes=[axis], keepdims=True)))


def reduce_log_sum_exp(b, x, axes=None, keepdims: bool = True, source: str = ""):
    """log(sum(exp(x))) over axes, computed as max + log(sum(exp(x - max)))."""
    with b.composite("ReduceLogSumExp", source):
        x, _, narrow = _widened(b, x)
        axes = list(range(len(x.shape))) if axes is None else list(axes)
        m = b.reduce_max(x, axes=axes, keepdims=True)
        s = b.reduce_sum(b.exp(x - m), axes=axes, keepdims=True)
        r = b.log(s) + m
        if not keepdims:
            rank = len(x.shape)
            r = b.squeeze(r, axes=[a % rank for a in axes])
        return narrow(r)


def gelu(b, x, approximate: str = "none", source: str = ""):
    """GELU: erf form 0.5 x (1 + erf(x / sqrt 2)) or the tanh approximation."""
    with b.composite("Gelu", source):
        if approximate not in ("none", "tanh"):
            raise GraphError(f"Gelu approximate={approximate!r}; use 'none' or 'tanh'")
        x, _, narrow = _widened(b, x)
        if approximate == "tanh":
            inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
            return narrow(x * 0.5 * (b.tanh(inner) + 1.0))
        return narrow(x * 0.5 * (b.erf(x * (1.0 / math.sqrt(2.0))) + 1.0))


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


# -- activations ---------------------------------------------------------------
# Each takes the ONNX attribute defaults. Constants are made with the dtype of x:
# ``b.where(c, x, 0.0)`` would give the 0.0 the dtype of the bool condition.

def _zero(b, x):
    return b.constant(np.zeros((), x.dtype.np))


def hard_sigmoid(b, x, alpha: float = 0.2, beta: float = 0.5, source: str = ""):
    """HardSigmoid: max(0, min(1, alpha * x + beta))."""
    with b.composite("HardSigmoid", source):
        return b.max(b.min(x * alpha + beta, b.as_tensor(1.0, like=x)), _zero(b, x))


def hard_swish(b, x, source: str = ""):
    """HardSwish: x * HardSigmoid(x) with alpha 1/6, beta 0.5."""
    with b.composite("HardSwish", source):
        return x * hard_sigmoid(b, x, 1.0 / 6.0, 0.5)


def leaky_relu(b, x, alpha: float = 0.01, source: str = ""):
    """LeakyRelu: x if x >= 0 else alpha * x."""
    with b.composite("LeakyRelu", source):
        return b.where(b.lt(x, _zero(b, x)), x * alpha, x)


def prelu(b, x, slope, source: str = ""):
    """PRelu: x if x >= 0 else slope * x (slope broadcasts to x)."""
    with b.composite("PRelu", source):
        return b.where(b.lt(x, _zero(b, x)), x * slope, x)


def elu(b, x, alpha: float = 1.0, source: str = ""):
    """Elu: x if x >= 0 else alpha * (exp(x) - 1)."""
    with b.composite("Elu", source):
        return b.where(b.lt(x, _zero(b, x)), (b.exp(x) - 1.0) * alpha, x)


def selu(b, x, alpha: float = 1.67326319217681884765625,
         gamma: float = 1.05070102214813232421875, source: str = ""):
    """Selu: gamma * (x if x > 0 else alpha * exp(x) - alpha)."""
    with b.composite("Selu", source):
        neg = b.exp(x) * (alpha * gamma) - alpha * gamma
        return b.where(b.le(x, _zero(b, x)), neg, x * gamma)


def celu(b, x, alpha: float = 1.0, source: str = ""):
    """Celu: max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    with b.composite("Celu", source):
        z = _zero(b, x)
        return b.max(x, z) + b.min((b.exp(x * (1.0 / alpha)) - 1.0) * alpha, z)


def softplus(b, x, source: str = ""):
    """Softplus log(1 + exp(x)), as max(x, 0) + log(1 + exp(-|x|)) so large x stays finite."""
    with b.composite("Softplus", source):
        return b.relu(x) + b.log(b.exp(-b.abs(x)) + 1.0)


def softsign(b, x, source: str = ""):
    """Softsign: x / (1 + |x|)."""
    with b.composite("Softsign", source):
        return x / (b.abs(x) + 1.0)


def mish(b, x, source: str = ""):
    """Mish: x * tanh(softplus(x))."""
    with b.composite("Mish", source):
        return x * b.tanh(softplus(b, x))


def thresholded_relu(b, x, alpha: float = 1.0, source: str = ""):
    """ThresholdedRelu: x if x > alpha else 0."""
    with b.composite("ThresholdedRelu", source):
        return b.where(b.gt(x, b.as_tensor(alpha, like=x)), x, _zero(b, x))


def sign(b, x, source: str = ""):
    """Sign: 1, 0 or -1 in x's dtype; NaN stays NaN."""
    with b.composite("Sign", source):
        z = _zero(b, x)
        one = b.as_tensor(1, like=x)
        r = b.where(b.gt(x, z), one, b.where(b.lt(x, z), -one, z))
        return b.where(b.ne(x, x), x, r) if x.dtype.is_float else r


def clip(b, x, lo=None, hi=None, source: str = ""):
    """Clip: min(max(x, lo), hi); a missing bound is no bound; NaN stays NaN."""
    with b.composite("Clip", source):
        if lo is not None:
            x = b.max(x, lo)
        if hi is not None:
            x = b.min(x, hi)
        return x


# -- reductions built from primitives ----------------------------------------------

def reduce_sum_square(b, x, axes=None, keepdims: bool = True, source: str = ""):
    """sum(x * x) over axes."""
    with b.composite("ReduceSumSquare", source):
        return b.reduce_sum(x * x, axes=axes, keepdims=keepdims)


def reduce_l1(b, x, axes=None, keepdims: bool = True, source: str = ""):
    """sum(|x|) over axes."""
    with b.composite("ReduceL1", source):
        return b.reduce_sum(b.abs(x), axes=axes, keepdims=keepdims)


def reduce_l2(b, x, axes=None, keepdims: bool = True, source: str = ""):
    """sqrt(sum(x * x)) over axes."""
    with b.composite("ReduceL2", source):
        return b.sqrt(b.reduce_sum(x * x, axes=axes, keepdims=keepdims))


def reduce_log_sum(b, x, axes=None, keepdims: bool = True, source: str = ""):
    """log(sum(x)) over axes."""
    with b.composite("ReduceLogSum", source):
        return b.log(b.reduce_sum(x, axes=axes, keepdims=keepdims))


# -- layout ------------------------------------------------------------------------

def tile(b, x, repeats, source: str = ""):
    """Tile: repeat x reps[i] times along axis i, as reshape -> expand -> reshape.

    Interleaving a size-1 axis before each axis and expanding it to the repeat count
    puts the repeats outermost, which is exactly np.tile's layout.
    """
    with b.composite("Tile", source):
        reps = [int(r) for r in repeats]
        if len(reps) != len(x.shape):
            raise GraphError(f"Tile repeats {reps} do not match rank {len(x.shape)}")
        if all(r == 1 for r in reps):
            return x
        split = [d for dim in x.shape for d in (1, dim)]
        wide = [d for r, dim in zip(reps, x.shape) for d in (r, dim)]
        y = b.expand(b.reshape(x, shape=split), shape=wide)
        return b.reshape(y, shape=[r * d for r, d in zip(reps, x.shape)])


# -- accurate near zero --------------------------------------------------------------

def _full_like(b, x, v):
    return b.constant(np.asarray(v, x.dtype.np))


def log1p(b, x, source: str = ""):
    """log(1 + x), accurate for small x: Goldberg's log(u) * x / (u - 1) with u = 1 + x
    (within a few ulps), x itself where u rounds to 1, inf at inf."""
    with b.composite("Log1p", source):
        u = x + 1.0
        d = u - 1.0
        r = b.log(u) * (x / d)
        r = b.where(b.eq(d, _zero(b, x)), x, r)
        inf = _full_like(b, x, np.inf)
        return b.where(b.eq(u, inf), u, r)


def expm1(b, x, source: str = ""):
    """exp(x) - 1, accurate for small x: Kahan's (u - 1) * x / log(u) with u = exp(x)
    (within a few ulps), x itself where u rounds to 1, -1 and inf at the ends."""
    with b.composite("Expm1", source):
        u = b.exp(x)
        d = u - 1.0
        r = d * (x / b.log(u))
        r = b.where(b.eq(u, _full_like(b, x, 1.0)), x, r)
        r = b.where(b.eq(d, _full_like(b, x, -1.0)), d, r)
        return b.where(b.eq(u, _full_like(b, x, np.inf)), u, r)
