"""ONNX handlers for the indexing family: GatherElements, GatherND, ScatterElements,
ScatterND, ArgMax/ArgMin, TopK, CumSum, Trilu, OneHot.

Each maps one node to the op library's indexing ops (:mod:`workbench.ops.indexing`,
:mod:`workbench.ops.ordering`); shapes, axes and counts that ONNX passes as inputs
(TopK's K, CumSum's axis, Trilu's k, OneHot's depth) must be constants.
Importing this module registers the handlers.
"""
from __future__ import annotations

from ...errors import GraphError
from ...dtypes import DType
import numpy as np
from ..indexing import one_hot
from .common import _axis, _Ctx, _handles, _malformed, _Unsupported
from .budget import check_made


def _reduction(c: _Ctx) -> str:
    r = c.attr("reduction", "none")
    if r not in ("none", "add", "mul", "max", "min"):
        raise _Unsupported(f"reduction={r!r}")
    return r


@_handles("GatherElements")
def _gather_elements(c: _Ctx):
    data, idx = c.x(0), c.x(1)
    axis = _axis(c, c.attr("axis", 0), len(data.shape))
    return [c.b.gather_elements(data, idx, axis=axis)]


@_handles("GatherND")
def _gather_nd(c: _Ctx):
    return [c.b.gather_nd(c.x(0), c.x(1), batch_dims=int(c.attr("batch_dims", 0)))]


@_handles("ScatterElements")
def _scatter_elements(c: _Ctx):
    data = c.x(0)
    axis = _axis(c, c.attr("axis", 0), len(data.shape))
    return [c.b.scatter_elements(data, c.x(1), c.x(2), axis=axis, reduction=_reduction(c))]


@_handles("ScatterND")
def _scatter_nd(c: _Ctx):
    return [c.b.scatter_nd(c.x(0), c.x(1), c.x(2), reduction=_reduction(c))]


@_handles("ArgMax", "ArgMin")
def _arg(c: _Ctx):
    x = c.x(0)
    if not x.shape:
        raise _malformed(c, "the input is a scalar (rank 0)")
    axis = _axis(c, c.attr("axis", 0), len(x.shape))
    return [c.b.op(c.node.op_type.lower(), x, axis=axis,
                   keepdims=bool(c.attr("keepdims", 1)),
                   select_last_index=bool(c.attr("select_last_index", 0)))]


@_handles("TopK")
def _topk(c: _Ctx):
    x = c.x(0)
    (k,) = c.ints(1, "K")
    axis = _axis(c, c.attr("axis", -1), len(x.shape))
    if not 0 <= k <= x.shape[axis]:
        raise _malformed(c, f"K={k} is not in [0, {x.shape[axis]}] (axis {axis} of "
                            f"{list(x.shape)})")
    v, i = c.b.topk(x, k=k, axis=axis, largest=bool(c.attr("largest", 1)),
                    sorted=bool(c.attr("sorted", 1)))
    return [v, i]


@_handles("CumSum")
def _cumsum(c: _Ctx):
    x = c.x(0)
    (axis,) = c.ints(1, "axis")
    return [c.b.cumsum(x, axis=_axis(c, axis, len(x.shape)),
                       exclusive=bool(c.attr("exclusive", 0)),
                       reverse=bool(c.attr("reverse", 0)))]


@_handles("Trilu")
def _trilu(c: _Ctx):
    x = c.x(0)
    k = c.ints(1, "k")[0] if c.has(1) else 0
    if any(d == 0 for d in x.shape):
        return [x]   # nothing to keep or zero
    return [c.b.trilu(x, k=k, upper=bool(c.attr("upper", 1)))]


@_handles("OneHot")
def _one_hot(c: _Ctx):
    ind = c.x(0)
    depth = c.const(1, "depth").reshape(-1)
    if depth.size != 1:
        raise _malformed(c, f"depth has {depth.size} values, not one")
    values = c.x(2)
    if values.shape not in ((2,),):
        raise _malformed(c, f"values must hold [off, on], got shape {list(values.shape)}")
    if ind.dtype not in (DType.int32, DType.int64):
        if not ind.dtype.is_float:
            raise GraphError(f"OneHot {c.display!r}: indices of type {ind.dtype.value}")
    axis = _axis(c, c.attr("axis", -1), len(ind.shape) + 1)
    check_made(f"OneHot {c.display!r}'s classes", (max(int(depth[0]), 0),), np.int64)
    return [one_hot(c.b, ind, int(depth[0]), values, axis)]
