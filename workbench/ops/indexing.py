"""Indexing layout ops: gather_elements, gather_nd, trilu.

Like ``gather`` they are index rules (see :mod:`.layout`): an output element is read
from its input at a position computed from an index tensor or from its own position,
so they fuse into elementwise kernels and read nothing twice. Index arithmetic is
total (docs/ir-and-ops.md, "Total arithmetic"): a negative index counts from the
end, and an index still out of range is clamped into ``[0, n - 1]`` -- a kernel never
reads outside its input, and the NumPy reference clamps the same way (ONNX and torch
leave out-of-range indices undefined or raise).
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..dtypes import DType
from ..shapes import check_shape
from .footprint import whole_axis
from .index import Index
from .layout import CLAMPI
from .registry import Kind, OpDef, RowRole, attr_bool, attr_int, check_axis, register

_INDEX_DTYPES = (DType.int32, DType.int64)


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def clamp_index(idx: np.ndarray, n: int) -> np.ndarray:
    """Indices as the kernels read them: negative ones count from the end, the rest
    are clamped into [0, n - 1] (int64, so int32 + n cannot wrap)."""
    idx = np.asarray(idx, dtype=np.int64)
    return np.clip(np.where(idx < 0, idx + n, idx), 0, max(n - 1, 0))


def _selected(ctx, i: str, n: int) -> str:
    """C text of the clamped index ``i`` into an axis of length ``n`` (bound once)."""
    return ctx.let(DType.int64,
                   f"wb_clampi((long long)({i} < 0 ? {i} + {n}LL : {i}), 0, {n - 1})")


def _check_indices(dt: DType, op: str) -> None:
    if dt not in _INDEX_DTYPES:
        raise GraphError(f"{op} indices must be int32 or int64, got {dt.value}")


# -- gather_elements: out[i_0..i_r] = data[i_0.., idx[i_0..i_r], ..i_r] (along axis) --

def _ge_infer(ins, attrs):
    data, idx = ins
    _check_indices(idx.dtype, "gather_elements")
    rank = len(data.shape)
    axis = check_axis(attr_int(attrs, "axis", 0), rank)
    if len(idx.shape) != rank:
        raise GraphError(f"gather_elements indices {list(idx.shape)} must have the rank of "
                         f"the data {list(data.shape)}")
    big = [d for d in range(rank) if d != axis and idx.shape[d] > data.shape[d]]
    if big:
        raise GraphError(f"gather_elements indices {list(idx.shape)} are longer than the "
                         f"data {list(data.shape)} along axis {big[0]}")
    if data.shape[axis] == 0 and _numel(idx.shape):
        raise GraphError(f"gather_elements from axis {axis} of length 0 (data "
                         f"{list(data.shape)}) has nothing to take")
    return [(tuple(idx.shape), data.dtype)]


def _ge_ref(xs, attrs):
    data, idx = xs
    axis = int(attrs.get("axis", 0)) % data.ndim
    # torch lets the indices be shorter than the data off the axis: those elements only
    part = data[tuple(slice(None) if d == axis else slice(0, n)
                      for d, n in enumerate(idx.shape))]
    return [np.take_along_axis(part, clamp_index(idx, data.shape[axis]), axis=axis)]


def _ge_index(ctx, node, k, idx: Index) -> str:
    data, ind = node.inputs
    shape = ctx.shape(data)
    axis = int(node.attr("axis", 0)) % len(shape)
    d = idx.digits()
    i = ctx.at(ind, Index.from_digits(d, ctx.shape(ind)))
    d[axis] = _selected(ctx, i, shape[axis])
    return ctx.at(data, Index.from_digits(d, shape))


def _ge_reads(shapes, attrs, k, consts):
    # Off the axis the output's position is the data's, so only the indices' extent of
    # each such axis is read; along it, at worst each index a different element.
    if k == 1:
        return None
    data, ind = shapes
    axis = int(attrs.get("axis", 0)) % len(data)
    along = min(ind[axis], data[axis])
    return tuple((None if along == data[a] else along) if a == axis
                 else whole_axis(np.arange(ind[a]), data[a]) for a in range(len(data)))


register(OpDef("gather_elements", Kind.layout, (2, 2), _ge_infer, _ge_ref, None,
               "take along attr axis at an index per output element (ONNX GatherElements, "
               "torch.gather)", helpers=(CLAMPI,), index=_ge_index, row_role=RowRole.never,
               reads=_ge_reads))


# -- gather_nd: the last axis of the indices holds a position in the data ------------

def gather_nd_shape(data, ind, batch_dims: int) -> tuple[int, ...]:
    b, q = batch_dims, len(ind)
    if q < 1:
        raise GraphError("gather_nd indices need rank >= 1 (the last axis holds positions)")
    k = ind[-1]
    if k < 1:
        raise GraphError(f"gather_nd indices {list(ind)} hold positions of length 0; the "
                         "last axis must have length >= 1")
    if not 0 <= b < min(q, len(data) + 1):
        raise GraphError(f"gather_nd batch_dims {b} must be in [0, {min(q, len(data) + 1) - 1}]"
                         f" for data {list(data)} and indices {list(ind)}")
    if tuple(ind[:b]) != tuple(data[:b]):
        raise GraphError(f"gather_nd batch dims of data {list(data)} and indices "
                         f"{list(ind)} differ (batch_dims {b})")
    if k > len(data) - b:
        raise GraphError(f"gather_nd positions of length {k} index data {list(data)} of "
                         f"rank {len(data)} past its {b} batch dims")
    out = tuple(ind[:-1]) + tuple(data[b + k:])
    if _numel(out) and any(data[b + j] == 0 for j in range(k)):
        raise GraphError(f"gather_nd from an axis of length 0 (data {list(data)}) has "
                         "nothing to take")
    return check_shape(out, "gather_nd result")


def _gnd_infer(ins, attrs):
    data, ind = ins
    _check_indices(ind.dtype, "gather_nd")
    return [(gather_nd_shape(data.shape, ind.shape, attr_int(attrs, "batch_dims", 0)),
             data.dtype)]


def _gnd_ref(xs, attrs):
    data, ind = xs
    b = int(attrs.get("batch_dims", 0))
    k = ind.shape[-1]
    out_shape = gather_nd_shape(data.shape, ind.shape, b)
    # one flat batch axis, one flat position axis: data [B, d_b..d_{b+k-1}, rest]
    nb = _numel(data.shape[:b])
    d = data.reshape((nb,) + data.shape[b:])
    pos = ind.reshape(nb, -1, k)
    sel = tuple(clamp_index(pos[..., j], data.shape[b + j]) for j in range(k))
    batch = np.arange(nb).reshape(nb, 1)
    return [d[(batch,) + sel].reshape(out_shape)]


def _gnd_index(ctx, node, k, idx: Index) -> str:
    data_v, ind_v = node.inputs
    data, ind = ctx.shape(data_v), ctx.shape(ind_v)
    b = int(node.attr("batch_dims", 0))
    q, kk = len(ind), ind[-1]
    d = idx.digits()
    lead = d[:q - 1]
    sel = [_selected(ctx, ctx.at(ind_v, Index.from_digits(lead + [str(j)], ind)), data[b + j])
           for j in range(kk)]
    return ctx.at(data_v, Index.from_digits(d[:b] + sel + d[q - 1:], data))


register(OpDef("gather_nd", Kind.layout, (2, 2), _gnd_infer, _gnd_ref, None,
               "take slices at positions held in the last axis of the indices (ONNX "
               "GatherND, attr batch_dims; torch advanced indexing)", helpers=(CLAMPI,),
               index=_gnd_index, row_role=RowRole.never))


# -- trilu: keep the upper (j - i >= k) or lower (j - i <= k) triangle, zero the rest -----

def _trilu_infer(ins, attrs):
    x = ins[0]
    if len(x.shape) < 2:
        raise GraphError(f"trilu needs rank >= 2 (a matrix or a batch of them), got "
                         f"{list(x.shape)}")
    attr_int(attrs, "k", 0)
    attr_bool(attrs, "upper", True)
    return [(tuple(x.shape), x.dtype)]


def _trilu_ref(xs, attrs):
    k = int(attrs.get("k", 0))
    fn = np.triu if attr_bool(attrs, "upper", True) else np.tril
    return [fn(xs[0], k)]


def _trilu_index(ctx, node, k, idx: Index) -> str:
    d = idx.digits()
    i, j = d[-2], d[-1]
    diag = int(node.attr("k", 0))
    keep = f"({j}) - ({i}) >= {diag}" if attr_bool(node.attr_map, "upper", True) else \
        f"({j}) - ({i}) <= {diag}"
    x = ctx.at(node.inputs[0], idx)
    return ctx.let(ctx.dtype(node.outputs[0]).compute, f"(({keep}) ? {x} : 0)")


register(OpDef("trilu", Kind.layout, (1, 1), _trilu_infer, _trilu_ref, None,
               "upper (attr upper, j - i >= k) or lower (j - i <= k) triangle of the last "
               "two axes, zeros elsewhere (ONNX Trilu, torch triu/tril)",
               index=_trilu_index, row_role=RowRole.never))
