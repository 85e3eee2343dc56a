"""Layout ops: they move elements without arithmetic.

Codegen treats each as an index transform (given the output index, which input element
is read), so they fuse into elementwise kernels without materializing anything.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..ir.dtypes import DType
from .registry import Kind, Mapping_, OpDef, broadcast_shapes, normalize_axes, register


def _contig(a):
    """A C-contiguous copy that keeps 0-d results 0-d (np.ascontiguousarray makes them 1-d)."""
    return np.array(a, order="C")


def _numel(shape):
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def _reshape_infer(ins, attrs):
    shape = tuple(int(d) for d in attrs["shape"])
    if _numel(shape) != ins[0].numel or any(d < 0 for d in shape):
        raise GraphError(f"cannot reshape {list(ins[0].shape)} to {list(shape)}")
    return [(shape, ins[0].dtype)]


register(OpDef("reshape", Kind.layout, Mapping_.reorganize, (1, 1), _reshape_infer,
               lambda xs, a: [xs[0].reshape(a["shape"])], None,
               "reinterpret the row-major data with a new static shape (attr shape)"))


def _squeeze_infer(ins, attrs):
    x = ins[0]
    axes = normalize_axes(attrs["axes"], len(x.shape))
    if any(x.shape[a] != 1 for a in axes):
        raise GraphError(f"squeeze axes {list(axes)} of {list(x.shape)} are not all 1")
    return [(tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype)]


register(OpDef("squeeze", Kind.layout, Mapping_.reorganize, (1, 1), _squeeze_infer,
               lambda xs, a: [np.squeeze(xs[0], axis=normalize_axes(a["axes"], xs[0].ndim))],
               None, "remove size-1 axes (attr axes)"))


def _unsqueeze_infer(ins, attrs):
    x = ins[0]
    rank = len(x.shape) + len(attrs["axes"])
    axes = normalize_axes(attrs["axes"], rank)
    it = iter(x.shape)
    return [(tuple(1 if i in axes else next(it) for i in range(rank)), x.dtype)]


register(OpDef("unsqueeze", Kind.layout, Mapping_.reorganize, (1, 1), _unsqueeze_infer,
               lambda xs, a: [xs[0].reshape(_unsqueeze_infer([_V(xs[0])], a)[0][0])],
               None, "insert size-1 axes (attr axes, positions in the output)"))


class _V:
    """Adapter so shape rules can run on arrays inside references."""
    def __init__(self, a):
        self.shape, self.dtype, self.numel = tuple(a.shape), DType.of(a.dtype), a.size


def _transpose_infer(ins, attrs):
    x = ins[0]
    perm = tuple(attrs.get("perm") or reversed(range(len(x.shape))))
    if sorted(perm) != list(range(len(x.shape))):
        raise GraphError(f"perm {list(perm)} is not a permutation of rank {len(x.shape)}")
    return [(tuple(x.shape[p] for p in perm), x.dtype)]


register(OpDef("transpose", Kind.layout, Mapping_.shuffle, (1, 1), _transpose_infer,
               lambda xs, a: [_contig(np.transpose(xs[0], a.get("perm")))],
               None, "permute axes (attr perm)"))


def _expand_infer(ins, attrs):
    shape = broadcast_shapes(ins[0].shape, tuple(attrs["shape"]))
    return [(shape, ins[0].dtype)]


register(OpDef("expand", Kind.layout, Mapping_.one_to_many, (1, 1), _expand_infer,
               lambda xs, a: [_contig(np.broadcast_to(
                   xs[0], _expand_infer([_V(xs[0])], a)[0][0]))],
               None, "broadcast to a shape (attr shape, NumPy rules)"))


def slice_params(shape, attrs):
    """Per-axis (start, step, length) of a slice, all static and normalized."""
    rank = len(shape)
    starts, ends = attrs["starts"], attrs["ends"]
    axes = attrs.get("axes") or tuple(range(len(starts)))
    steps = attrs.get("steps") or (1,) * len(starts)
    out = [(0, 1, d) for d in shape]
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int(a) % rank
        d = shape[a]
        if st == 0:
            raise GraphError("slice step 0 is not allowed")
        idx = range(*slice(int(s), int(e), int(st)).indices(d))
        out[a] = (idx.start if len(idx) else 0, int(st), len(idx))
    return tuple(out)


def _slice_infer(ins, attrs):
    p = slice_params(ins[0].shape, attrs)
    return [(tuple(n for _, _, n in p), ins[0].dtype)]


def _slice_ref(xs, attrs):
    p = slice_params(xs[0].shape, attrs)
    # a negative step that reaches index 0 stops at -1, which Python would read as
    # "the last element": spell that stop as None
    sl = tuple(slice(s, s + st * n if s + st * n >= 0 else None, st) if n else slice(0, 0)
               for s, st, n in p)
    return [_contig(xs[0][sl])]


register(OpDef("slice", Kind.layout, Mapping_.reorganize, (1, 1), _slice_infer, _slice_ref,
               None, "static strided slice (attrs starts, ends, axes, steps)"))


def _concat_infer(ins, attrs):
    rank = len(ins[0].shape)
    axis = int(attrs["axis"]) % rank
    base = ins[0].shape
    for v in ins:
        if len(v.shape) != rank or any(d != b for i, (d, b) in enumerate(zip(v.shape, base))
                                       if i != axis):
            raise GraphError(f"concat inputs {[list(v.shape) for v in ins]} differ "
                             f"off axis {axis}")
    dts = {v.dtype for v in ins}
    if len(dts) != 1:
        raise GraphError("concat needs inputs of one dtype")
    shape = tuple(sum(v.shape[axis] for v in ins) if i == axis else d
                  for i, d in enumerate(base))
    return [(shape, ins[0].dtype)]


register(OpDef("concat", Kind.layout, Mapping_.reorganize, (1, 64), _concat_infer,
               lambda xs, a: [np.concatenate(xs, axis=int(a["axis"]))], None,
               "join along attr axis"))


def _split_infer(ins, attrs):
    x = ins[0]
    axis = int(attrs["axis"]) % len(x.shape)
    sizes = tuple(int(s) for s in attrs["sizes"])
    if sum(sizes) != x.shape[axis]:
        raise GraphError(f"split sizes {list(sizes)} do not add up to {x.shape[axis]}")
    return [(tuple(s if i == axis else d for i, d in enumerate(x.shape)), x.dtype)
            for s in sizes]


def _split_ref(xs, attrs):
    axis = int(attrs["axis"]) % xs[0].ndim
    cuts = np.cumsum(attrs["sizes"])[:-1]
    return [_contig(p) for p in np.split(xs[0], cuts, axis=axis)]


register(OpDef("split", Kind.layout, Mapping_.reorganize, (1, 1), _split_infer, _split_ref,
               None, "cut along attr axis into attr sizes"))


def _gather_infer(ins, attrs):
    data, idx = ins
    if idx.dtype not in (DType.int32, DType.int64):
        raise GraphError(f"gather indices must be int32 or int64, got {idx.dtype.value}")
    axis = int(attrs.get("axis", 0)) % len(data.shape)
    shape = data.shape[:axis] + idx.shape + data.shape[axis + 1:]
    return [(shape, data.dtype)]


def _gather_ref(xs, attrs):
    data, idx = xs
    axis = int(attrs.get("axis", 0)) % data.ndim
    n = data.shape[axis]
    # out-of-range indices are clamped, as the kernels do (ONNX leaves them undefined)
    idx = np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1)
    return [_contig(np.take(data, idx, axis=axis))]


register(OpDef("gather", Kind.layout, Mapping_.one_to_many, (2, 2), _gather_infer,
               _gather_ref, None, "take along attr axis at integer indices"))
