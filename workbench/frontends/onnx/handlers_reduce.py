"""ONNX handlers of the reductions and what is built on them: Reduce* (with ONNX's
value for an empty reduction), GlobalAveragePool and GlobalMaxPool, Softmax and
LogSoftmax, the losses SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss, and the
normalizations LayerNormalization, RMSNormalization and inference BatchNormalization
(group and instance normalization: :mod:`.handlers_nn`).

Importing this module registers them with :func:`~.common._handles`.
"""
from __future__ import annotations

import math

import numpy as np

from ...dtypes import DType
from ...ir import Tensor, composites, composites_nn
from .common import _axis, _Ctx, _handles, _malformed, _Unsupported
from .budget import check_made

_REDUCE = {"ReduceSum": "reduce_sum", "ReduceMean": "reduce_mean", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceProd": "reduce_prod",
           "ReduceSumSquare": "reduce_sum_square", "ReduceL1": "reduce_l1",
           "ReduceL2": "reduce_l2", "ReduceLogSum": "reduce_log_sum",
           "ReduceLogSumExp": "reduce_log_sum_exp"}
# result of reducing an empty set (static shapes make it a constant); None: undefined
_EMPTY = {"ReduceSum": 0.0, "ReduceSumSquare": 0.0, "ReduceL1": 0.0, "ReduceL2": 0.0,
          "ReduceProd": 1.0, "ReduceMax": -math.inf, "ReduceMin": math.inf,
          "ReduceLogSum": -math.inf, "ReduceLogSumExp": -math.inf, "ReduceMean": None}


@_handles(*_REDUCE)
def _reduce(c: _Ctx):
    x = c.x(0)
    rank = len(x.shape)
    # axes: an input (ReduceSum since 13, the others since 18) or an attribute before
    axes = c.ints(1, "axes") if c.has(1) else c.attr("axes")
    keep = bool(c.attr("keepdims", 1))
    if not axes:
        if c.attr("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(rank))
    axes = sorted({_axis(c, a, rank) for a in axes}) if rank else []
    if any(x.shape[a] == 0 for a in axes):
        return [_empty_reduce(c, x, axes, keep)]
    op = _REDUCE[c.node.op_type]
    if op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"):
        return [c.b.op(op, x, axes=axes, keepdims=keep)]
    fn = getattr(composites, op)
    return [fn(c.b, x, axes=axes, keepdims=keep, source=c.display)]


def _empty_reduce(c: _Ctx, x: Tensor, axes, keep) -> np.ndarray:
    fill = _EMPTY[c.node.op_type]
    if fill is None or (math.isinf(fill) and not x.dtype.is_float):
        raise _Unsupported("reduction over an empty set (result undefined)")
    shape = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
    check_made(f"{c.node.op_type} {c.display!r} of an empty set", shape, x.dtype.np)
    return np.full(shape, fill, dtype=x.dtype.np)


@_handles("Softmax", "LogSoftmax")
def _softmax(c: _Ctx):
    fn = composites.softmax if c.node.op_type == "Softmax" else composites.log_softmax
    return [fn(c.b, c.x(0), axis=int(c.attr("axis", -1)), source=c.display)]


@_handles("SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss")
def _loss(c: _Ctx):
    x, labels = c.x(0), c.x(1)
    if labels.dtype not in (DType.int32, DType.int64):
        raise _malformed(c, f"labels of type {labels.dtype.value} (int32 or int64)")
    reduction = c.attr("reduction", "mean")
    if reduction not in composites_nn.losses.REDUCTIONS:
        raise _malformed(c, f"reduction {reduction!r} is not none, sum or mean")
    ignore = c.attr("ignore_index")
    args = (c.b, x, labels, c.opt(2), reduction,
            None if ignore is None else int(ignore), c.display)
    if c.node.op_type == "NegativeLogLikelihoodLoss":
        return [composites_nn.nll_loss(*args)]
    loss, log_prob = composites_nn.softmax_cross_entropy(*args)
    return [loss, log_prob]


@_handles("LayerNormalization")
def _layer_norm(c: _Ctx):
    x, scale, bias = c.x(0), c.x(1), c.opt(2)
    axis, eps = int(c.attr("axis", -1)), float(c.attr("epsilon", 1e-5))
    stash = int(c.attr("stash_type", 1))
    if stash != 1:
        raise _Unsupported(f"stash_type={stash} (only 1, float32, is supported)")
    b = c.b
    if not x.dtype.is_half:
        y, mean, inv = composites.layer_norm(b, x, scale, bias, axis, eps, c.display,
                                             return_stats=True)
        return [y, mean, inv]
    # stash_type=1: normalize in float32, then scale and shift in the input type
    with b.composite("LayerNormalization", c.display):
        n, mean, inv = composites.layer_norm(b, b.cast(x, to="float32"), None, None, axis,
                                             eps, c.display, return_stats=True)
        y = b.cast(n, to=x.dtype) * scale
        return [y + bias if bias is not None else y, mean, inv]


@_handles("RMSNormalization")
def _rms_norm(c: _Ctx):
    x, scale = c.x(0), c.x(1)
    axis, eps = int(c.attr("axis", -1)), float(c.attr("epsilon", 1e-5))
    if int(c.attr("stash_type", 1)) != 1:
        raise _Unsupported("stash_type other than 1 (float32)")
    if not x.dtype.is_half:
        return [composites.rms_norm(c.b, x, scale, axis, eps, c.display)]
    n = composites.rms_norm(c.b, c.b.cast(x, to="float32"), None, axis, eps, c.display)
    return [c.b.cast(n, to=x.dtype) * scale]


@_handles("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(c: _Ctx):
    x = c.x(0)
    op = "reduce_mean" if c.node.op_type == "GlobalAveragePool" else "reduce_max"
    return [c.b.op(op, x, axes=list(range(2, len(x.shape))), keepdims=True)]


@_handles("BatchNormalization")
def _batch_norm(c: _Ctx):
    if int(c.attr("training_mode", 0)):
        raise _Unsupported("training_mode=1 (only inference batch norm is supported)")
    return [composites.batch_norm(c.b, c.x(0), c.x(1), c.x(2), c.x(3), c.x(4),
                                  eps=float(c.attr("epsilon", 1e-5)), source=c.display)]
