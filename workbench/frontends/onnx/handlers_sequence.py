"""Tensor sequences that only split a tensor: ``SplitToSequence`` read back by
``SequenceAt`` at constant positions.

torch's legacy exporter writes ``torch.unbind``/``split`` over a dimension it cannot
count at export time this way (transformers' Mamba selective scan: one
``SplitToSequence`` per loop, each piece taken by a ``SequenceAt``). The workbench has no
sequence values in its IR; such a sequence is a static list of slices of one tensor, so
it is held at import as where its pieces lie (:class:`SplitSequence`) and each
``SequenceAt`` becomes the ``Slice`` (and, for ``keepdims=0``, ``Squeeze``) of its piece.
A sequence used any other way (a graph output, ``ConcatFromSequence``, a ``Loop``) is
refused with that reason.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .common import _axis, _Ctx, _handles, _malformed, _Unsupported


@dataclass(frozen=True)
class SplitSequence:
    """A ``SplitToSequence`` result: piece i of ONNX value ``source`` spans
    ``[offsets[i], offsets[i] + sizes[i])`` along ``axis`` (squeezed there when
    ``squeeze``)."""
    source: str
    axis: int
    offsets: tuple[int, ...]
    sizes: tuple[int, ...]
    squeeze: bool


@_handles("SplitToSequence")
def _split_to_sequence(c: _Ctx):
    shape = c.shape(0)
    axis = _axis(c, c.attr("axis", 0), len(shape))
    d = shape[axis]
    split = c.const(1, "split").reshape(-1) if c.has(1) else None
    squeeze = False
    if split is None:            # pieces of 1 along the axis, squeezed unless keepdims=1
        sizes = [1] * d
        squeeze = not int(c.attr("keepdims", 1))
    elif c.const(1, "split").ndim == 0:    # a scalar: equal pieces, the last one smaller
        n = int(split[0])
        if n <= 0:
            raise _malformed(c, f"split {n} must be positive")
        sizes = [n] * (d // n) + ([d % n] if d % n else [])
    else:
        sizes = [int(s) for s in split]
        if sum(sizes) != d or min(sizes, default=0) < 0:
            raise _malformed(c, f"split sizes {sizes} do not cut {d} along axis {axis}")
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(int) if sizes else []
    return [SplitSequence(c.node.input[0], axis, tuple(int(o) for o in offsets),
                          tuple(sizes), squeeze)]


@_handles("SequenceAt")
def _sequence_at(c: _Ctx):
    seq = c.scope.env.get(c.node.input[0])
    if not isinstance(seq, SplitSequence):
        raise _Unsupported("a sequence not made by SplitToSequence")
    n = len(seq.sizes)
    i = int(c.const(1, "position").reshape(-1)[0])
    if not -n <= i < n:
        raise _malformed(c, f"position {i} is outside the sequence of {n} tensors")
    i %= n
    lo, hi = seq.offsets[i], seq.offsets[i] + seq.sizes[i]
    arr = c.scope.const(seq.source)
    if arr is not None:          # a constant's piece is a constant
        piece = np.take(arr, np.arange(lo, hi), axis=seq.axis)
        return [np.ascontiguousarray(piece.squeeze(seq.axis) if seq.squeeze else piece)]
    x = c.scope.tensor(seq.source)
    piece = x if (lo, hi) == (0, x.shape[seq.axis]) else c.b.slice(
        x, starts=[lo], ends=[hi], axes=[seq.axis], steps=[1])
    return [c.b.squeeze(piece, axes=[seq.axis]) if seq.squeeze else piece]


@_handles("SequenceLength")
def _sequence_length(c: _Ctx):
    seq = c.scope.env.get(c.node.input[0])
    if not isinstance(seq, SplitSequence):
        raise _Unsupported("a sequence not made by SplitToSequence")
    return [np.asarray(len(seq.sizes), dtype=np.int64)]
