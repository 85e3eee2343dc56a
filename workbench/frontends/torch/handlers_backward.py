"""ATen ops that torch's decomposed backward passes use and forward graphs rarely do:
``slice_scatter`` and ``select_scatter`` (the gradients of slicing and of ``unbind`` /
``select``, e.g. splitting a fused QKV projection), as a zero pad of the source into
the destination's shape -- joined with the destination by a mask where it is not all
zeros. Importing this module registers the handlers."""
from __future__ import annotations

import numpy as np

from .common import _Ctx, _handles, _Unsupported

_INT64_MAX = 2 ** 63 - 1


def _scatter_slice(c: _Ctx, src, dim: int, start: int, end: int):
    """``self`` with ``self[..., start:end, ...] = src`` along dim (step 1)."""
    base = c.args["self"]
    shape = c.out_shape
    rank = len(shape)
    begin, after = [0] * rank, [0] * rank
    begin[dim], after[dim] = start, shape[dim] - end
    padded = c.b.pad(src, pads=begin + after, mode="constant",
                     value=0.0 if src.dtype.is_float else 0) if start or after[dim] else src
    known = c.scope.value(base.name)
    if isinstance(known, np.ndarray) and not known.any():
        return padded   # (the gradient's usual case: scattered into zeros)
    inside = np.zeros([shape[dim]] + [1] * (rank - 1 - dim), dtype=bool)
    inside[start:end] = True
    return c.b.where(c.b.constant(inside), padded, c.x("self"))


def _bounds(c: _Ctx, size: int) -> tuple[int, int]:
    start, end = c.v("start"), c.v("end")
    start = 0 if start is None else int(start)
    end = size if end is None or end >= _INT64_MAX else int(end)
    start, end = (s + size if s < 0 else s for s in (start, end))
    return max(0, min(start, size)), max(0, min(end, size))


@_handles("slice_scatter")
def _slice_scatter(c: _Ctx):
    rank = len(c.out_shape)
    dim = int(c.v("dim", 0)) % rank
    if int(c.v("step", 1)) != 1:
        raise _Unsupported("slice_scatter with a step other than 1")
    start, end = _bounds(c, c.out_shape[dim])
    return _scatter_slice(c, c.x("src"), dim, start, max(start, end))


@_handles("select_scatter")
def _select_scatter(c: _Ctx):
    shape = c.out_shape
    dim = int(c.v("dim")) % len(shape)
    index = int(c.v("index")) % shape[dim]
    src = c.x("src")
    src = c.b.reshape(src, shape=[*src.shape[:dim], 1, *src.shape[dim:]])
    return _scatter_slice(c, src, dim, index, index + 1)
