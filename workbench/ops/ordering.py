"""Library ops that order or accumulate along an axis, or write at indices:
argmax, argmin, topk, cumsum, scatter_elements, scatter_nd.

None of them is an index rule: an output element depends on a whole axis (argmax,
topk, a prefix sum) or on which update lands on it (a scatter), so they run as library
calls (see :mod:`.opaque`) -- NumPy on the CPU; on the GPU the arrays make a round trip
through the host, which is correct but not fast (a device sort/scan/scatter kernel is
future work). Index arithmetic is total like gather's: negative indices count from the
end and indices still out of range are clamped into the axis, never written outside it.
Where several updates land on one element, ``reduction="none"`` keeps the last (ONNX
leaves it undefined); add/mul/max/min combine them all.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import GraphError
from ..dtypes import DType
from ..shapes import check_shape
from .indexing import clamp_index
from .registry import Kind, OpDef, attr_bool, attr_int, check_axis, register

_REDUCTIONS = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum,
               "min": np.minimum}


def _on_host(fn):
    """A library implementation from a NumPy one: CuPy arrays go through the host."""
    def library(xp, xs, attrs):
        if xp is np:
            return fn(list(xs), attrs)
        outs = fn([xp.asnumpy(x) for x in xs], attrs)
        return [xp.asarray(o) for o in outs]
    return library


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _axis_attr(attrs, rank: int, op: str) -> int:
    return check_axis(attr_int(attrs, "axis", 0 if op.startswith("scatter") else -1),
                      rank)


# -- argmax / argmin ------------------------------------------------------------------

def _arg_infer(op):
    def infer(ins, attrs):
        x = ins[0]
        rank = len(x.shape)
        if rank == 0:
            raise GraphError(f"{op} needs an input of rank >= 1, got a scalar")
        axis = check_axis(attr_int(attrs, "axis", 0), rank)
        keep = attr_bool(attrs, "keepdims", True)
        attr_bool(attrs, "select_last_index", False)
        if x.shape[axis] == 0:
            raise GraphError(f"{op} over axis {axis} of length 0 (input {list(x.shape)}) "
                             "has no answer")
        shape = tuple(1 if i == axis else d for i, d in enumerate(x.shape)
                      if keep or i != axis)
        return [(shape, DType.int64)]
    return infer


def _arg_ref(fn):
    def ref(xs, attrs):
        x = xs[0]
        axis = int(attrs.get("axis", 0)) % x.ndim
        keep = attr_bool(attrs, "keepdims", True)
        if attr_bool(attrs, "select_last_index", False):
            n = x.shape[axis]
            r = n - 1 - fn(np.flip(x, axis=axis), axis=axis)
        else:
            r = fn(x, axis=axis)
        r = r.astype(np.int64)
        return [np.expand_dims(r, axis) if keep else r]
    return ref


for _name, _fn in (("argmax", np.argmax), ("argmin", np.argmin)):
    _ref = _arg_ref(_fn)
    register(OpDef(_name, Kind.opaque, (1, 1), _arg_infer(_name), _ref, None,
                   f"int64 index of the {_name[3:]}imum along attr axis (attrs keepdims, "
                   "select_last_index; the first one unless select_last_index; NaN wins)",
                   library=_on_host(_ref),
                   library_flops=lambda ins, out, attrs: float(_numel(ins[0]))))


# -- topk -------------------------------------------------------------------------------

def _topk_infer(ins, attrs):
    x = ins[0]
    rank = len(x.shape)
    if rank == 0:
        raise GraphError("topk needs an input of rank >= 1, got a scalar")
    axis = check_axis(attr_int(attrs, "axis", -1), rank)
    k = attr_int(attrs, "k")
    if not 0 <= k <= x.shape[axis]:
        raise GraphError(f"topk k={k} must be in [0, {x.shape[axis]}] (the length of axis "
                         f"{axis} of {list(x.shape)})")
    attr_bool(attrs, "largest", True)
    attr_bool(attrs, "sorted", True)
    shape = tuple(k if i == axis else d for i, d in enumerate(x.shape))
    return [(shape, x.dtype), (shape, DType.int64)]


def topk_order(x: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Positions along ``axis`` by value, largest (or smallest) first, ties by the lower
    position first (ONNX's rule); NaN counts as the largest value, as in torch."""
    if not largest:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.shape[axis]
    # a stable ascending sort of the reversed axis, read backwards: descending values,
    # equal values in increasing position (negating would overflow the integer minimum)
    asc = np.argsort(np.flip(x, axis=axis), axis=axis, kind="stable")
    return n - 1 - np.flip(asc, axis=axis)


def _topk_ref(xs, attrs):
    x = xs[0]
    axis = int(attrs.get("axis", -1)) % x.ndim
    k = int(attrs["k"])
    order = topk_order(x, axis, attr_bool(attrs, "largest", True))
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return [np.take_along_axis(x, idx, axis=axis), idx]


register(OpDef("topk", Kind.opaque, (1, 1), _topk_infer, _topk_ref, None,
               "the k largest (attr largest) values along attr axis, sorted, and their "
               "int64 indices; ties keep the lower index first",
               library=_on_host(_topk_ref),
               library_flops=lambda ins, out, attrs: float(
                   _numel(ins[0]) * max(1.0, math.log2(max(ins[0][int(attrs.get("axis", -1))
                                                                  % len(ins[0])], 2))))))


# -- cumsum -----------------------------------------------------------------------------

def _cumsum_infer(ins, attrs):
    x = ins[0]
    if x.dtype is DType.bool:
        raise GraphError("cumsum of bool values: cast them to an integer type first")
    if len(x.shape) == 0:
        raise GraphError("cumsum needs an input of rank >= 1, got a scalar")
    check_axis(attr_int(attrs, "axis", 0), len(x.shape))
    attr_bool(attrs, "exclusive", False)
    attr_bool(attrs, "reverse", False)
    return [(tuple(x.shape), x.dtype)]


def _cumsum_ref(xs, attrs):
    x = xs[0]
    axis = int(attrs.get("axis", 0)) % x.ndim
    rev = attr_bool(attrs, "reverse", False)
    # float16 accumulates in float32; integers wrap in their own type (NumPy would
    # widen int32 to int64)
    acc = np.float32 if x.dtype == np.float16 else x.dtype
    y = np.flip(x, axis) if rev else x
    if attr_bool(attrs, "exclusive", False):
        # the sum of the elements before: shifted by one, so no sum is a difference
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)),
                            np.take(y, np.arange(y.shape[axis] - 1), axis=axis)], axis=axis) \
            if y.shape[axis] else y
    s = np.cumsum(y, axis=axis, dtype=acc)
    s = np.flip(s, axis) if rev else s
    return [np.ascontiguousarray(s).astype(x.dtype)]


register(OpDef("cumsum", Kind.opaque, (1, 1), _cumsum_infer, _cumsum_ref, None,
               "running sum along attr axis (attrs exclusive, reverse)",
               library=_on_host(_cumsum_ref),
               library_flops=lambda ins, out, attrs: float(_numel(ins[0])),
               # a prefix sum's rounding is bounded by the prefix sum of |x|
               error_scale=lambda ms, attrs: _cumsum_ref([np.asarray(ms[0], np.float64)],
                                                         attrs)[0]))


# -- scatter -----------------------------------------------------------------------------

def _reduction(attrs, dt: DType, op: str) -> str:
    r = attrs.get("reduction", "none")
    if r not in _REDUCTIONS:
        raise GraphError(f"{op} reduction {r!r:.40} is not one of "
                         f"{', '.join(_REDUCTIONS)}")
    if r != "none" and dt is DType.bool:
        raise GraphError(f"{op} reduction {r!r} of bool values is not defined; cast them "
                         "to an integer type")
    return r


def _apply(out: np.ndarray, where: tuple, upd: np.ndarray, reduction: str) -> np.ndarray:
    fn = _REDUCTIONS[reduction]
    if fn is None:
        out[where] = upd     # NumPy's assignment keeps the last of repeated positions
    else:
        fn.at(out, where, upd)
    return out


def _se_infer(ins, attrs):
    data, idx, upd = ins
    if idx.dtype not in (DType.int32, DType.int64):
        raise GraphError(f"scatter_elements indices must be int32 or int64, got "
                         f"{idx.dtype.value}")
    rank = len(data.shape)
    axis = _axis_attr(attrs, rank, "scatter_elements")
    _reduction(attrs, data.dtype, "scatter_elements")
    if upd.dtype is not data.dtype:
        raise GraphError(f"scatter_elements updates ({upd.dtype.value}) must have the data's "
                         f"dtype ({data.dtype.value})")
    if tuple(upd.shape) != tuple(idx.shape) or len(idx.shape) != rank:
        raise GraphError(f"scatter_elements indices {list(idx.shape)} and updates "
                         f"{list(upd.shape)} must have one shape, of the data's rank {rank}")
    if any(i > d for a, (i, d) in enumerate(zip(idx.shape, data.shape)) if a != axis):
        raise GraphError(f"scatter_elements indices {list(idx.shape)} are longer than the "
                         f"data {list(data.shape)} off axis {axis}")
    if data.shape[axis] == 0 and _numel(idx.shape):
        raise GraphError(f"scatter_elements into axis {axis} of length 0 has nowhere to write")
    return [(tuple(data.shape), data.dtype)]


def _se_ref(xs, attrs):
    data, idx, upd = xs
    axis = int(attrs.get("axis", 0)) % data.ndim
    where = list(np.indices(idx.shape, sparse=True))
    where[axis] = clamp_index(idx, data.shape[axis])
    return [_apply(data.copy(), tuple(where), upd, attrs.get("reduction", "none"))]


register(OpDef("scatter_elements", Kind.opaque, (3, 3), _se_infer, _se_ref, None,
               "the data with each update written at its index along attr axis (attr "
               "reduction: none, add, mul, max, min; ONNX ScatterElements, torch.scatter)",
               library=_on_host(_se_ref),
               library_flops=lambda ins, out, attrs: float(_numel(ins[1]))))


def _snd_infer(ins, attrs):
    data, ind, upd = ins
    if ind.dtype not in (DType.int32, DType.int64):
        raise GraphError(f"scatter_nd indices must be int32 or int64, got {ind.dtype.value}")
    _reduction(attrs, data.dtype, "scatter_nd")
    if upd.dtype is not data.dtype:
        raise GraphError(f"scatter_nd updates ({upd.dtype.value}) must have the data's dtype "
                         f"({data.dtype.value})")
    if len(ind.shape) < 1 or not 1 <= ind.shape[-1] <= len(data.shape):
        raise GraphError(f"scatter_nd indices {list(ind.shape)} must hold positions of length "
                         f"1 to {len(data.shape)} (the data's rank) in their last axis")
    k = ind.shape[-1]
    want = tuple(ind.shape[:-1]) + tuple(data.shape[k:])
    if tuple(upd.shape) != want:
        raise GraphError(f"scatter_nd updates {list(upd.shape)} must have shape {list(want)} "
                         f"(indices {list(ind.shape)}, data {list(data.shape)})")
    if _numel(ind.shape[:-1]) and any(d == 0 for d in data.shape[:k]):
        raise GraphError(f"scatter_nd into data {list(data.shape)} with an empty axis has "
                         "nowhere to write")
    return [(check_shape(tuple(data.shape), "scatter_nd result"), data.dtype)]


def _snd_ref(xs, attrs):
    data, ind, upd = xs
    k = ind.shape[-1]
    pos = ind.reshape(-1, k)
    where = tuple(clamp_index(pos[:, j], data.shape[j]) for j in range(k))
    return [_apply(data.copy(), where, upd.reshape((-1,) + data.shape[k:]),
                   attrs.get("reduction", "none"))]


register(OpDef("scatter_nd", Kind.opaque, (3, 3), _snd_infer, _snd_ref, None,
               "the data with update slices written at positions held in the last axis of "
               "the indices (attr reduction; ONNX ScatterND, torch index_put)",
               library=_on_host(_snd_ref),
               library_flops=lambda ins, out, attrs: float(_numel(ins[2]))))
