"""Indexing as both model formats spell it, in terms of the op library's ops: NumPy /
torch advanced indexing (``x[i, :, j]``, ``x[i, j] = v``) and one-hot encoding.

Shared by the ONNX and torch importers so each construct has one translation:

- ``advanced_index``: one index tensor is a ``gather``; several broadcast together and
  stack into the positions of a ``gather_nd`` over the indexed axes (moved to the
  front when they are not). The result's axes follow NumPy's rule: the broadcast index
  axes stand where the indexed axes were when those are adjacent, else in front.
- ``index_put``: the same positions into a ``scatter_nd`` (accumulate: reduction add).
- ``one_hot``: ``where(indices == range(depth), on, off)`` -- an elementwise kernel.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..ir import GraphBuilder, Tensor
from ..dtypes import DType
from ..ops import broadcast_shapes
from .importing import Unsupported


def _int64(b: GraphBuilder, t: Tensor) -> Tensor:
    if t.dtype is DType.bool:
        raise Unsupported("a boolean mask as an index (its result's shape depends on the "
                          "data; index with integer positions, e.g. torch.where(mask, x, 0))")
    if t.dtype.is_float:
        raise Unsupported(f"a {t.dtype.value} index tensor")
    return t if t.dtype is DType.int64 else b.cast(t, to=DType.int64)


def _positions(b: GraphBuilder, idxs: Sequence[Tensor]) -> tuple[Tensor, tuple[int, ...]]:
    """Index tensors broadcast and stacked along a new last axis: [*B, k]; and B."""
    shape = broadcast_shapes(*[tuple(t.shape) for t in idxs])
    cols = []
    for t in idxs:
        t = _int64(b, t)
        if tuple(t.shape) != shape:
            t = b.expand(t, shape=list(shape)) if len(t.shape) == len(shape) else \
                b.expand(b.reshape(t, shape=[1] * (len(shape) - len(t.shape)) + list(t.shape)),
                         shape=list(shape))
        cols.append(b.unsqueeze(t, axes=[len(shape)]))
    return (cols[0] if len(cols) == 1 else b.concat(*cols, axis=len(shape))), shape


def _layout(x: Tensor, idxs: Sequence[Tensor | None]):
    """(indexed axes, the other axes, whether the indexed ones are adjacent)."""
    rank = len(x.shape)
    full = list(idxs) + [None] * (rank - len(idxs))
    picked = [d for d, t in enumerate(full) if t is not None]
    rest = [d for d, t in enumerate(full) if t is None]
    adjacent = picked == list(range(picked[0], picked[0] + len(picked)))
    return picked, rest, adjacent


def _front(b: GraphBuilder, x: Tensor, picked, rest) -> Tensor:
    perm = picked + rest
    return x if perm == sorted(perm) else b.transpose(x, perm=perm)


def _result_perm(nb: int, n_rest: int, at: int) -> list[int]:
    """From [*B, *rest] to [*rest[:at], *B, *rest[at:]] (adjacent indexed axes at ``at``)."""
    return [nb + i for i in range(at)] + list(range(nb)) + [nb + i for i in range(at, n_rest)]


def advanced_index(b: GraphBuilder, x: Tensor, idxs: Sequence[Tensor | None]) -> Tensor:
    """``x[idxs]`` with NumPy's advanced-indexing rules (None: the whole axis).

    >>> advanced_index(b, mask, [batch_idx, None, None, kv_idx])   # doctest: +SKIP
    """
    if len(idxs) > len(x.shape):
        raise Unsupported(f"{len(idxs)} indices into a rank-{len(x.shape)} tensor")
    picked, rest, adjacent = _layout(x, idxs)
    tensors = [idxs[d] for d in picked]
    if len(tensors) == 1:   # one index tensor: a gather along its axis, in place
        return b.gather(x, _int64(b, tensors[0]), axis=picked[0])
    pos, shape = _positions(b, tensors)
    y = b.gather_nd(_front(b, x, picked, rest), pos, batch_dims=0)
    if adjacent and picked[0] > 0:
        y = b.transpose(y, perm=_result_perm(len(shape), len(rest), picked[0]))
    return y


def index_put(b: GraphBuilder, x: Tensor, idxs: Sequence[Tensor | None], values: Tensor,
              accumulate: bool) -> Tensor:
    """``x[idxs] = values`` (``+=`` with accumulate) as a new tensor, NumPy's rules."""
    if len(idxs) > len(x.shape):
        raise Unsupported(f"{len(idxs)} indices into a rank-{len(x.shape)} tensor")
    picked, rest, adjacent = _layout(x, idxs)
    pos, shape = _positions(b, [idxs[d] for d in picked])
    rest_shape = [x.shape[d] for d in rest]
    front = list(shape) + rest_shape            # the updates' shape for scatter_nd
    at = picked[0] if adjacent else 0
    seen = rest_shape[:at] + list(shape) + rest_shape[at:]   # x[idxs]'s shape
    if values.dtype is not x.dtype:
        values = b.cast(values, to=x.dtype)
    if tuple(values.shape) != tuple(seen):
        if len(values.shape) < len(seen):
            values = b.reshape(values, shape=[1] * (len(seen) - len(values.shape))
                               + list(values.shape))
        values = b.expand(values, shape=seen)
    if at:
        inv = np.argsort(_result_perm(len(shape), len(rest), at)).tolist()
        values = b.transpose(values, perm=inv)
    assert list(values.shape) == front
    y = b.scatter_nd(_front(b, x, picked, rest), pos, values,
                     reduction="add" if accumulate else "none")
    perm = picked + rest
    return y if perm == sorted(perm) else b.transpose(y, perm=np.argsort(perm).tolist())


def one_hot(b: GraphBuilder, indices: Tensor, depth: int, values: Tensor, axis: int) -> Tensor:
    """ONNX OneHot: ``values[1]`` where the (wrapped) index equals the position along the
    new ``axis`` of length ``depth``, ``values[0]`` elsewhere (an index out of
    [-depth, depth) matches nothing)."""
    idx = indices if indices.dtype is DType.int64 else b.cast(indices, to=DType.int64)
    idx = b.where(b.lt(idx, 0), b.add(idx, depth), idx)
    rank = len(indices.shape) + 1
    classes = np.arange(max(depth, 0), dtype=np.int64).reshape(
        [max(depth, 0) if d == axis else 1 for d in range(rank)])
    hit = b.eq(b.unsqueeze(idx, axes=[axis]), b.constant(classes))
    off = b.reshape(b.slice(values, starts=[0], ends=[1]), shape=[])
    on = b.reshape(b.slice(values, starts=[1], ends=[2]), shape=[])
    return b.where(hit, on, off)
