"""ONNX handlers of the ``com.microsoft`` ops onnxruntime-training's exporter
(``onnxruntime.training.artifacts.generate_artifacts``) writes into a training graph,
each a composition of the workbench's ops: its gradient ops (``ReluGrad``,
``GeluGrad``, ``BiasGeluGrad_dX``, ``SoftmaxGrad_13``, ``LayerNormalizationGrad``,
``SoftmaxCrossEntropyLossGrad``), the fused forward ops its optimizer makes of the
exported forward (``Gelu``, ``BiasGelu``) and the helpers its gradient builders use
(``Scale``, ``FusedMatMul``). The graph around them -- the gradient accumulators, which
outputs are gradients, which nodes are the backward -- is :mod:`.training`'s.

Registered under ``com.microsoft.<op>`` (the default domain's ``Gelu`` is another
handler); an attribute value onnxruntime allows but these do not read is refused
naming it, never guessed at. Importing this module registers them.
"""
from __future__ import annotations

from ...dtypes import DType
from ...ir import composites
from ...ir.composites_nn import gradients
from .common import _axis, _Ctx, _handles, _malformed, _Unsupported

MS = "com.microsoft"


def _ms(*ops: str):
    return _handles(*(f"{MS}.{op}" for op in ops))


@_ms("Scale")
def _scale(c: _Ctx):
    """x * scale, or x / scale with scale_down=1 (scale: one value, any number type)."""
    x, s = c.x(0), c.x(1)
    if len(s.shape) > 1 or (s.shape and s.shape[0] != 1):
        raise _malformed(c, f"scale of shape {list(s.shape)} (one value)")
    s = c.b.reshape(s, shape=[])
    if s.dtype is not x.dtype:
        s = c.b.cast(s, to=x.dtype)
    return [x / s if c.attr("scale_down", 0) else x * s]


@_ms("ReluGrad")
def _relu_grad(c: _Ctx):
    """dY where the ReLU's output Y is positive, else 0."""
    dy, y = c.x(0), c.x(1)
    return [c.b.where(c.b.gt(y, c.scalar(0, y)), dy, c.scalar(0, dy))]


@_ms("Gelu")
def _gelu(c: _Ctx):
    return [composites.gelu(c.b, c.x(0), source=c.display)]


@_ms("BiasGelu")
def _bias_gelu(c: _Ctx):
    return [composites.gelu(c.b, c.x(0) + c.x(1), source=c.display)]


@_ms("GeluGrad")
def _gelu_grad(c: _Ctx):
    return [gradients.gelu_grad(c.b, c.x(0), c.x(1), c.display)]


@_ms("BiasGeluGrad_dX")
def _bias_gelu_grad(c: _Ctx):
    """GeluGrad at X + B (the gradient with respect to X; B's is a ReduceSum after)."""
    return [gradients.gelu_grad(c.b, c.x(0), c.x(1) + c.x(2), c.display)]


@_ms("SoftmaxGrad_13")
def _softmax_grad(c: _Ctx):
    """dX of Softmax (opset 13's: one axis) from dY and the softmax's output Y."""
    dy, y = c.x(0), c.x(1)
    axis = _axis(c, c.attr("axis", -1), len(y.shape))
    return [gradients.softmax_grad(c.b, dy, y, axis, c.display)]


@_ms("FusedMatMul")
def _fused_matmul(c: _Ctx):
    """alpha * op(A) @ op(B), op transposing the last two axes where transA/transB."""
    if c.attr("transBatchA", 0) or c.attr("transBatchB", 0):
        raise _Unsupported("transBatchA/transBatchB (a batch axis moved into the "
                           "matrix) is not supported")
    operands = []
    for i, key in ((0, "transA"), (1, "transB")):
        t = c.x(i)
        if c.attr(key, 0):
            rank = len(t.shape)
            if rank < 2:
                raise _malformed(c, f"{key} on an operand of rank {rank}")
            t = c.b.transpose(t, perm=[*range(rank - 2), rank - 1, rank - 2])
        operands.append(t)
    y = c.b.matmul(*operands)
    alpha = float(c.attr("alpha", 1.0))
    return [y * alpha if alpha != 1.0 else y]


@_ms("LayerNormalizationGrad")
def _layer_norm_grad(c: _Ctx):
    """(dX, dScale, dBias) from dY, X, scale and the forward's saved mean and inverse
    standard deviation; dX is computed only where the graph reads it (the training
    graph's import blanks an output no node reads: a data input's gradient)."""
    dy, x, scale, mean, inv = (c.x(i) for i in range(5))
    if x.dtype is not DType.float32:
        raise _Unsupported(f"{x.dtype.value} inputs (float32 only)")
    axis = _axis(c, c.attr("axis", -1), len(x.shape))
    need_dx = bool(c.node.output[0])
    dx, dscale, dbias = gradients.layer_norm_grad(c.b, dy, x, scale, mean, inv, axis,
                                                  c.display, need_dx)
    return [dx, dscale, dbias]


@_ms("SoftmaxCrossEntropyLossGrad")
def _sce_grad(c: _Ctx):
    """The scores' gradient from dY, the forward's log_prob output, the labels and
    optional per-class weights (the forward's attributes: reduction, ignore_index)."""
    labels = c.x(2)
    if labels.dtype not in (DType.int32, DType.int64):
        raise _malformed(c, f"labels of type {labels.dtype.value} (int32 or int64)")
    if c.n_in > 4:
        raise _Unsupported("a bias input (SoftmaxCrossEntropyLossInternalGrad's)")
    ignore = c.attr("ignore_index")
    return [gradients.softmax_cross_entropy_grad(
        c.b, c.x(0), c.x(1), labels, c.opt(3), c.attr("reduction", "mean"),
        None if ignore is None else int(ignore), c.display)]
