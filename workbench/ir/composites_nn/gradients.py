"""Backward ops as composites: the gradients of GELU, softmax, LayerNormalization and
softmax cross-entropy, written with the workbench's elementwise ops and reductions so the
planners fuse them like any forward op (onnxruntime-training's ``GeluGrad``,
``SoftmaxGrad_13``, ``LayerNormalizationGrad`` and ``SoftmaxCrossEntropyLossGrad``
import as these:
:mod:`workbench.frontends.onnx.handlers_gradients`).

Each takes the gradient of the forward op's output (``dy``) and what the forward saved,
and returns the gradient of its input (and of its parameters), float32 throughout.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import GraphError
from ..composites import _axes_from
from .losses import check_class_operands

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gelu_grad(b, dy, x, source: str = ""):
    """d/dx of GELU's erf form, times dy: dy * (Phi(x) + x * phi(x)), with
    Phi(x) = 0.5 (1 + erf(x / sqrt 2)) and phi the standard normal density."""
    with b.composite("GeluGrad", source):
        cdf = (b.erf(x * _INV_SQRT2) + 1.0) * 0.5
        pdf = b.exp(x * x * -0.5) * _INV_SQRT_2PI
        return dy * (cdf + x * pdf)


def softmax_grad(b, dy, y, axis: int = -1, source: str = ""):
    """The gradient of Softmax along ``axis`` from its output y:
    y * (dy - sum(dy * y)), the sum along the axis."""
    with b.composite("SoftmaxGrad", source):
        return y * (dy - b.reduce_sum(dy * y, axes=[axis], keepdims=True))


def layer_norm_grad(b, dy, x, scale, mean, inv_std, axis: int = -1, source: str = "",
                    need_dx: bool = True):
    """The gradients of LayerNormalization over axes [axis, rank) from its saved mean and
    inverse standard deviation (kept to x's rank): ``(dx, dscale, dbias)``, dx None
    when not ``need_dx``. With xhat = (x - mean) * inv_std and g = dy * scale:
    dbias = sum of dy and dscale = sum of dy * xhat over the leading axes, and
    dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)), means over the normalized
    axes."""
    with b.composite("LayerNormalizationGrad", source):
        axes = _axes_from(x, axis)
        lead = list(range(axes[0]))
        xhat = (x - mean) * inv_std
        dbias = b.reduce_sum(dy, axes=lead, keepdims=False) if lead else dy
        dxhat = dy * xhat
        dscale = b.reduce_sum(dxhat, axes=lead, keepdims=False) if lead else dxhat
        dx = None
        if need_dx:
            g = dy * scale
            mg = b.reduce_mean(g, axes=axes, keepdims=True)
            mgx = b.reduce_mean(g * xhat, axes=axes, keepdims=True)
            dx = (g - mg - xhat * mgx) * inv_std
        return dx, dscale, dbias


def softmax_cross_entropy_grad(b, dy, logp, labels, weight=None, reduction: str = "mean",
                               ignore_index: int | None = None, source: str = ""):
    """The gradient of SoftmaxCrossEntropyLoss (:func:`.losses.softmax_cross_entropy`)
    with respect to its scores, from its log-probabilities [N, C, d...] (classes on
    axis 1): (softmax - one_hot(labels)) times, per position, dy (a scalar for ``sum``
    and ``mean``, [N, d...] for ``none``), the label's weight, 0 where the label is
    ``ignore_index``, and for ``mean`` divided by the summed weights of the positions
    counted (their count without weights) -- the forward's normalization."""
    check_class_operands("SoftmaxCrossEntropyLossGrad", source, logp, labels, reduction)
    rank = len(logp.shape)
    want_dy = tuple(labels.shape) if reduction == "none" else ()
    if tuple(dy.shape) not in (want_dy, (1,) * len(want_dy) if want_dy else (1,)):
        raise GraphError(f"SoftmaxCrossEntropyLossGrad {source!r}: dY {list(dy.shape)} "
                         f"must have the loss's shape {list(want_dy)} (reduction "
                         f"{reduction!r})")
    with b.composite("SoftmaxCrossEntropyLossGrad", source):
        classes = np.arange(logp.shape[1], dtype=labels.dtype.np)
        classes = classes.reshape([1, -1] + [1] * (rank - 2))
        one_hot = b.cast(b.eq(b.constant(classes), b.unsqueeze(labels, axes=[1])),
                         to=logp.dtype)
        zero = b.constant(np.asarray(0, logp.dtype.np))
        keep = idx = None
        if ignore_index is not None:
            keep = b.ne(labels, b.constant(np.asarray(ignore_index, labels.dtype.np)))
            # (an ignored label may be no class at all, such as -100: read class 0)
            idx = b.where(keep, labels, b.constant(np.asarray(0, labels.dtype.np)))
        w = None                                  # each position's weight, [N, d...]
        if weight is not None:
            w = b.gather(weight, idx if idx is not None else labels, axis=0)
            if keep is not None:
                w = b.where(keep, w, zero)
        elif keep is not None:
            w = b.cast(keep, to=logp.dtype)
        scale = b.reshape(dy, shape=list(want_dy)) if want_dy else b.reshape(dy, shape=[])
        if reduction == "mean":
            every = list(range(len(labels.shape)))
            total = (b.reduce_sum(w, axes=every, keepdims=False) if w is not None else
                     float(np.prod(labels.shape)))
            scale = scale / total
        if w is not None:
            scale = scale * w
        if want_dy or w is not None:
            scale = b.unsqueeze(scale, axes=[1])
        return (b.exp(logp) - one_hot) * scale
