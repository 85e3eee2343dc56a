"""ATen handlers for the indexing family and the no-op views.

- advanced indexing (``aten.index.Tensor``, as transformers builds its attention
  masks: ``padding_mask[batch_idx, kv_idx]``) and ``index_put``, through the shared
  translation in :mod:`workbench.frontends.indexing`;
- ``gather`` / ``scatter`` / ``scatter_add`` / ``scatter_reduce``, ``argmax`` /
  ``argmin``, ``max.dim`` / ``min.dim`` (values and indices), ``topk``, ``cumsum``,
  ``triu`` / ``tril``;
- views and copies that move nothing (``alias``, ``detach``, ``lift_fresh_copy``,
  ``contiguous``, ``_unsafe_view``, ``view_as``, ``expand_as``, a plain ``copy``...):
  the value itself, or a reshape/expand/cast where the shape or dtype changes;
  ``as_strided`` of a contiguous tensor: a reshape, or a gather at the positions
  its strides name.

Importing this module registers the handlers.
"""
from __future__ import annotations

import numpy as np

from ..indexing import advanced_index, index_put
from .common import _Ctx, _handles, _Unsupported, cast
from .handlers import _dim


def _index_list(c: _Ctx, key: str = "indices"):
    return [None if a is None else c.scope.tensor(a.name) for a in c.args[key]]


@_handles("index")
def _index(c: _Ctx):
    return advanced_index(c.b, c.x(), _index_list(c))


@_handles("index_put")
def _index_put(c: _Ctx):
    return index_put(c.b, c.x(), _index_list(c), c.x("values"), bool(c.v("accumulate", False)))


# -- views and copies that move nothing -------------------------------------------------

@_handles("alias", "alias_copy", "detach", "detach_copy", "lift_fresh", "lift_fresh_copy",
          "contiguous", "_unsafe_view", "view_copy", "_reshape_alias", "reshape", "view_as",
          "expand_as", "expand_copy")
def _same_data(c: _Ctx):
    # the value itself, under the shape torch recorded (view_as, _unsafe_view, expand_as
    # may change it; alias and friends never do)
    x = cast(c.b, c.x(), c.out_dtype)
    shape = c.out_shape
    if tuple(x.shape) == shape:
        return x
    if int(np.prod(x.shape, dtype=np.int64)) == int(np.prod(shape, dtype=np.int64)) \
            and c.node.target._overloadpacket.__name__ not in ("expand_as", "expand_copy"):
        return c.b.reshape(x, shape=list(shape))
    return c.b.expand(x, shape=list(shape))


@_handles("copy")
def _copy(c: _Ctx):
    # copy(self, src): src broadcast into self's shape and dtype (a functionalized copy_)
    src = cast(c.b, c.x("src"), c.out_dtype)
    return src if tuple(src.shape) == c.out_shape else c.b.expand(src, shape=list(c.out_shape))


@_handles("as_strided", "as_strided_copy")
def _as_strided(c: _Ctx):
    """The elements at ``storage_offset + sum(i_k * stride_k)`` of the input's storage.
    A workbench value is row-major, so this holds only where torch's input is
    contiguous too (then its storage is the flat value, from its own offset). Where
    the strides are the output's own row-major ones (size-1 axes aside) from the
    input's first element -- what a keepdim mean restrides to (Swin's pooler) -- it is
    a reshape; else a gather of the flat input at those positions."""
    x, meta = c.x(), c.meta("self")
    if not meta.is_contiguous():
        raise _Unsupported("as_strided of a tensor torch holds with non-contiguous strides "
                           f"{tuple(meta.stride())}: its storage is not the row-major value")
    size, stride = [int(s) for s in c.v("size")], [int(s) for s in c.v("stride")]
    base = int(meta.storage_offset())
    offset = c.v("storage_offset")
    start = base if offset is None else int(offset)
    numel = int(np.prod(x.shape, dtype=np.int64))
    pos = np.full(size, start - base, dtype=np.int64)
    for k, (n, st) in enumerate(zip(size, stride)):
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(
            [n if j == k else 1 for j in range(len(size))])
    if pos.size and (pos.min() < 0 or pos.max() >= numel):
        raise _Unsupported(f"as_strided reaching outside its input ({numel} elements)")
    if np.array_equal(pos.ravel(), np.arange(numel, dtype=np.int64)):
        return x if list(x.shape) == size else c.b.reshape(x, shape=size)
    return c.b.gather(c.b.reshape(x, shape=[numel]), c.b.constant(pos), axis=0)


# -- gather / scatter ---------------------------------------------------------------------

@_handles("gather")
def _gather(c: _Ctx):
    x = c.x()
    return c.b.gather_elements(x, c.x("index"), axis=_dim(c.v("dim"), len(x.shape)))


def _src(c: _Ctx, index) -> object:
    """scatter's source cut to the index's shape (torch reads only that part of it)."""
    if c.is_tensor("src"):
        src = cast(c.b, c.x("src"), c.out_dtype)
        if tuple(src.shape) != tuple(index.shape):
            src = c.b.slice(src, starts=[0] * len(index.shape), ends=list(index.shape),
                            axes=list(range(len(index.shape))))
        return src
    return c.b.constant(np.full(index.shape, c.v("value"), dtype=c.out_dtype.np))


_TORCH_REDUCE = {None: "none", "add": "add", "sum": "add", "multiply": "mul", "prod": "mul",
                 "amax": "max", "amin": "min"}


@_handles("scatter", "scatter_add", "scatter_reduce")
def _scatter(c: _Ctx):
    x = c.x()
    index = c.x("index")
    name = c.node.target._overloadpacket.__name__
    reduce = "add" if name == "scatter_add" else c.v("reduce")
    if reduce not in _TORCH_REDUCE:
        raise _Unsupported(f"reduce={reduce!r}")
    if name == "scatter_reduce" and not c.v("include_self", True):
        raise _Unsupported("include_self=False")
    return c.b.scatter_elements(x, index, _src(c, index), axis=_dim(c.v("dim"), len(x.shape)),
                                reduction=_TORCH_REDUCE[reduce])


# -- ordering -----------------------------------------------------------------------------

def _arg(c: _Ctx, op: str):
    x = c.x()
    dim = c.v("dim")
    keep = bool(c.v("keepdim", False))
    if dim is None:   # over every element: the flat position
        flat = c.b.reshape(x, shape=[int(np.prod(x.shape, dtype=np.int64))]) \
            if len(x.shape) != 1 else x
        r = c.b.op(op, flat, axis=0, keepdims=False)
        return c.b.reshape(r, shape=[1] * len(x.shape)) if keep else r
    return c.b.op(op, x, axis=_dim(dim, len(x.shape)), keepdims=keep)


@_handles("argmax")
def _argmax(c: _Ctx):
    return _arg(c, "argmax")


@_handles("argmin")
def _argmin(c: _Ctx):
    return _arg(c, "argmin")


@_handles("max", "min")
def _max_min(c: _Ctx):
    name = c.node.target._overloadpacket.__name__
    x = c.x()
    if c.overload == "dim":   # (values, indices) along dim
        axis = _dim(c.v("dim"), len(x.shape))
        keep = bool(c.v("keepdim", False))
        values = c.b.op(f"reduce_{name}", x, axes=[axis], keepdims=keep)
        return [values, c.b.op(f"arg{name}", x, axis=axis, keepdims=keep)]
    if c.overload == "default":   # over every element
        return c.b.op(f"reduce_{name}", x, axes=list(range(len(x.shape))), keepdims=False)
    if c.overload == "other":
        dt = c.out_dtype
        return c.b.op(name, cast(c.b, x, dt), cast(c.b, c.x("other"), dt))
    raise _Unsupported(f"overload {c.overload}")


@_handles("topk")
def _topk(c: _Ctx):
    x = c.x()
    v, i = c.b.topk(x, k=int(c.v("k")), axis=_dim(c.v("dim", -1), len(x.shape)),
                    largest=bool(c.v("largest", True)), sorted=bool(c.v("sorted", True)))
    return [v, i]


@_handles("cumsum")
def _cumsum(c: _Ctx):
    x = cast(c.b, c.x(), c.out_dtype)   # torch sums bool and int32 in int64
    if not x.shape:
        return x
    return c.b.cumsum(x, axis=_dim(c.v("dim"), len(x.shape)))


@_handles("triu", "tril")
def _trilu(c: _Ctx):
    x = c.x()
    if any(d == 0 for d in x.shape):
        return x
    return c.b.trilu(x, k=int(c.v("diagonal", 0)),
                     upper=c.node.target._overloadpacket.__name__ == "triu")

